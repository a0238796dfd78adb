"""MAP point estimates of the ORed-logistic model: L-BFGS, or FISTA under the l2,1 prior."""

from __future__ import annotations

import functools
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from jax.flatten_util import ravel_pytree

from ..model.log_density import Params, Scales, potential, potential_and_grad_on_host, prior_scales
from ..model.numpyro_model import (
    ModelArrays,
    ModelData,
    ModelShape,
    fitted_leak,
    split_model_data,
    start_params,
    sum_to_zero_basis,
)
from ..model.priors import group_laplace_log_normalizer
from .lbfgs import minimize_lbfgs
from .methods import MAP
from .prox import FistaResult, fista, lipschitz_bound


class MAPResult(NamedTuple):
    """A MAP fit.

    Attributes:
        W: (d, C) weights; beta: (C,) intercepts (both sum to zero over classes).
        log_posterior: log likelihood + log prior at the optimum (the prior's
            term is zero when it is flat).
        n_iter: L-BFGS iterations.
        converged: whether L-BFGS met its tolerance.
        leak: the fitted leak probability with ``leak="learn"`` (else None).
    """

    W: np.ndarray
    beta: np.ndarray
    log_posterior: float
    n_iter: int
    converged: bool
    leak: float | None = None


def fit_map(
    data: ModelData,
    prior_scale: float | None = 1.0,
    intercept_scale: float | None = 10.0,
    max_iter: int = MAP.max_iter,
    tol: float = MAP.tol,
    fit_intercept: bool = True,
) -> MAPResult:
    """Maximise ``orlr_model``'s log posterior with scipy's L-BFGS-B.

    The objective and its gradient come from ``log_density.potential_and_grad_on_host``,
    compiled once per shape family (the data are its arguments), so the NUTS
    start that follows a MAP, or the next fold's MAP, reuses the compilation.
    The gradient is the DP's backward pass. L-BFGS-B's own steps run on the
    host, a few microseconds each beside a gradient. Starts from zero weights
    (uniform class probabilities), where every bag's likelihood is positive.
    With ``prior_scale=None`` on separable data the maximum likelihood is at
    infinity; L-BFGS then stops at ``max_iter``.

    Under the l2,1 prior (``data.weight_prior == "l21"``, group Laplace rows
    of scale ``prior_scale``) the objective is not smooth where a row is
    zero, so the MAP is found by FISTA instead (``_fista_map``), whose rows
    come out exactly zero where the penalty wins.

    Args:
        data: from ``make_model_data``.
        prior_scale, intercept_scale, fit_intercept: ``orlr_model``'s priors.
        max_iter, tol: the iteration cap and relative tolerance on the objective.
    """
    arrays, shape = split_model_data(data)
    arrays = jax.device_put(arrays)  # once, not at every L-BFGS step
    c = data.n_outputs
    dtype = data.buckets[0].features.dtype
    init = start_params(data, fit_intercept, dtype)
    if data.weight_prior == "l21" and prior_scale is not None:
        scales = prior_scales(None, intercept_scale, dtype)  # the smooth part: W_raw's prior is the penalty
        # 1 / L bounds the steps from below (see prox.backtracked_step); a learnt leak's curvature is
        # not in L, so with one the search alone sets the step.
        bound = lipschitz_bound(arrays, intercept_scale if fit_intercept else None)
        min_step = np.asarray(0.0 if data.leak == "learn" else 1.0 / bound, dtype)
        res = _fista_map(
            init,
            arrays,
            scales,
            np.asarray(1.0 / prior_scale, dtype),
            np.asarray(tol, dtype),
            min_step,
            shape,
            fit_intercept,
            int(max_iter),
        )
        log_z = float(group_laplace_log_normalizer(c - 1, prior_scale))
        return _result(
            res.params,
            -float(res.objective) - data.n_features * log_z,
            int(res.n_iter),
            bool(res.converged),
            data,
            fit_intercept,
        )
    scales = prior_scales(prior_scale, intercept_scale, dtype)
    flat0, unravel = ravel_pytree(init)

    def _fun(x: np.ndarray) -> tuple[float, np.ndarray]:
        value, grad = potential_and_grad_on_host(
            unravel(jnp.asarray(x, dtype)), arrays, scales, shape, fit_intercept
        )
        return float(value), np.asarray(ravel_pytree(grad)[0], dtype=np.float64)

    res = minimize_lbfgs(_fun, np.asarray(flat0, np.float64), max_iter=max_iter, gtol=1e-6, ftol=tol)
    params = unravel(jnp.asarray(res.x, dtype))
    return _result(params, -float(res.fun), int(res.nit), bool(res.success), data, fit_intercept)


def _result(
    params: Params, log_posterior: float, n_iter: int, converged: bool, data: ModelData, fit_intercept: bool
) -> MAPResult:
    """``MAPResult`` from raw parameters: ``W``, ``beta`` back from the sum-to-zero basis."""
    c = data.n_outputs
    basis = np.asarray(sum_to_zero_basis(c), np.float64)
    beta_raw = np.asarray(params["beta_raw"]) if fit_intercept else np.zeros(c - 1)
    return MAPResult(
        np.asarray(params["W_raw"]) @ basis.T,
        beta_raw @ basis.T,
        log_posterior,
        n_iter,
        converged,
        fitted_leak(params, data),
    )


@functools.partial(jax.jit, static_argnames=("shape", "fit_intercept", "max_iter"))
def _fista_map(
    params: Params,
    arrays: ModelArrays,
    scales: Scales,
    strength: jax.Array,
    tol: jax.Array,
    min_step: jax.Array,
    shape: ModelShape,
    fit_intercept: bool,
    max_iter: int,
) -> FistaResult:
    """FISTA on ``potential`` (flat prior on ``W_raw``) + ``strength * sum_j ||W_raw[j]||``: one program."""

    def loss(p: Params) -> jax.Array:
        return potential(p, arrays, scales, shape, fit_intercept)

    return fista(loss, params, strength, max_iter, tol, min_step=min_step)
