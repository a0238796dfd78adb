"""The prior's scale chosen by the evidence: type-II maximum likelihood on the Laplace approximation.

MacKay's evidence framework (as scikit-learn's ``BayesianRidge`` and ``ARDRegression``):
the marginal likelihood of the bag labels under the prior ``W_raw ~ Normal(0, s^2)``,
approximated at the MAP ``theta^_s`` (``laplace``)::

    log p(Y | X, s) ~= log p(Y, theta^_s | X, s) + (P / 2) log(2 pi) - (1 / 2) log det H_s,

is maximised over ``s``. With ``a = 1 / s^2`` and ``Sigma = H_s^-1``, its stationary point
satisfies MacKay's fixed point ``a = gamma / ||W_raw^||^2``, ``gamma = P_W - a tr(Sigma_W)``
(``P_W`` weights; ``gamma`` the number the data determine, each weight counting
``1 - a Sigma_ii``: 1 where the likelihood pins it, 0 where the prior alone does). Each
step refits the MAP from the last one (warm) and recomputes the exact Hessian; a step
that lowers the evidence is halved on the log scale. Weights the data leave free (a
blank pixel's) then stop inflating the scale that every weight shares, and collinear
directions count for nothing.

The evidence is one mode's: where the posterior has several (the guide's "Several
optima"), it scores the one the MAP found.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

from ..model.numpyro_model import ModelData
from .laplace import Gaussian, laplace_approximation
from .methods import MAP

MAX_STEPS = 30
"""MacKay steps at most."""
TOL = 1e-3
"""Stop when a step moves ``log s`` by less than this (a 0.1 % change of the scale)."""
SCALE_RANGE = (1e-3, 1e3)
"""The scales searched: the fixed point is clipped into this range (a weight-free model, or
one whose weights the data fix outright, would send it to 0 or infinity)."""


class EvidenceFit(NamedTuple):
    """The evidence's choice of the prior scale.

    Attributes:
        prior_scale: the chosen ``s``.
        log_evidence: the Laplace approximation of ``log p(Y | X, s)`` there.
        gaussian: the Laplace approximation at the chosen scale (its MAP, Hessian).
        path: ((scale, log evidence), ...) every scale tried, in order.
        converged: the last step moved ``log s`` by less than ``TOL``.
    """

    prior_scale: float
    log_evidence: float
    gaussian: Gaussian
    path: tuple[tuple[float, float], ...]
    converged: bool


def mackay_scale(gaussian: Gaussian, prior_scale: float, n_weights: int) -> float:
    """MacKay's update of the weights' prior scale at one Laplace approximation.

    ``n_weights``: ``W_raw``'s entries, the first of the flat parameters (``laplace.Gaussian``).
    """
    a = 1.0 / prior_scale**2
    eye = np.eye(gaussian.cholesky.shape[0])
    inv_chol = np.linalg.solve(gaussian.cholesky, eye[:, :n_weights])  # L^-1 restricted to W's columns
    trace = float(np.sum(inv_chol**2))  # tr(Sigma_W), Sigma = L^-T L^-1
    gamma = n_weights - a * trace
    norm = float(np.sum(gaussian.mode[:n_weights] ** 2))
    if norm <= 0 or gamma <= 0:
        return SCALE_RANGE[0]
    return float(np.clip(np.sqrt(norm / gamma), *SCALE_RANGE))


def fit_evidence(
    data: ModelData,
    intercept_scale: float | None,
    fit_intercept: bool = True,
    start: float = 1.0,
    max_iter: int = MAP.max_iter,
    tol: float = MAP.tol,
) -> EvidenceFit:
    """Choose the weights' prior scale by the Laplace evidence (module docstring).

    ``data`` float64 under ``jax.enable_x64`` (the MAPs and Hessians, ``laplace``); ``start``:
    the first scale; ``max_iter``, ``tol``: each MAP's. Normal prior only (``check_laplace``).
    """
    n_weights = data.n_features * (data.n_outputs - 1)
    scale = float(start)
    gaussian = laplace_approximation(data, scale, intercept_scale, fit_intercept, max_iter, tol)
    path = [(scale, gaussian.log_evidence)]
    best = (scale, gaussian)
    converged = False
    for _ in range(MAX_STEPS):
        proposal = mackay_scale(best[1], best[0], n_weights)
        step = np.log(proposal) - np.log(best[0])
        while abs(step) >= TOL:
            scale = float(best[0] * np.exp(step))
            gaussian = laplace_approximation(
                data, scale, intercept_scale, fit_intercept, max_iter, tol, init=best[1].map.params
            )
            path.append((scale, gaussian.log_evidence))
            if gaussian.log_evidence >= best[1].log_evidence:
                break
            step /= 2  # the fixed point overshot: halve the step on the log scale
        if abs(step) < TOL:
            converged = True
            break
        best = (scale, gaussian)
    return EvidenceFit(best[0], best[1].log_evidence, best[1], tuple(path), converged)
