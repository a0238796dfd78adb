"""l2-penalised multinomial logistic regression by L-BFGS: the fit behind ``SoftmaxRegression``.

Minimises, over weights ``W`` (R, C) and intercepts ``b`` (C,),

    (1/n) [ -sum_i log softmax(x_i W + b)[y_i]  +  ||W||^2 / (2 s^2) ],

the negative log posterior of a softmax regression under ORLR's Normal(0, s^2)
weight prior, with flat intercepts. Softmax is unchanged by adding a vector to
every row of ``W``, and the penalty is least when each row sums to zero, so the
optimum's rows sum to zero and its penalty is ORLR's on the sum-to-zero basis.
The sum runs over the classes in ``y`` only: a class absent from training
would drive its unpenalised intercept to minus infinity, so ``fit_softmax``
gives it no weight and the intercept ``ABSENT_INTERCEPT``.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np
from scipy.special import log_softmax

from ..inference.point.lbfgs import minimize_lbfgs

ABSENT_INTERCEPT = -50.0
"""A class no training instance has: probability about ``exp(-50)`` times the others'."""


class SoftmaxFit(NamedTuple):
    """Result of ``fit_softmax``.

    Attributes:
        coef: (R, C) weights (zero columns for absent classes).
        intercept: (C,) intercepts (``ABSENT_INTERCEPT`` for absent classes).
        n_iter: L-BFGS iterations taken.
        converged: whether the gradient tolerance was met within ``max_iter``.
        theta: the optimiser's flat parameters, to warm-start a fit on the same data.
    """

    coef: np.ndarray
    intercept: np.ndarray
    n_iter: int
    converged: bool
    theta: np.ndarray


def softmax_objective(
    theta: np.ndarray, x: np.ndarray, onehot: np.ndarray, inv_var: float, fit_intercept: bool
) -> tuple[float, np.ndarray]:
    """The averaged penalised negative log-likelihood and its gradient.

    Args:
        theta: (R * K [+ K],) flat ``W`` (R, K) then ``b`` (K,) when ``fit_intercept``.
        x: (n, R) features. onehot: (n, K) 0/1 labels. inv_var: ``1 / s^2``.
    """
    n, r = x.shape
    k = onehot.shape[1]
    w = theta[: r * k].reshape(r, k)
    logp = log_softmax(x @ w + (theta[r * k :] if fit_intercept else 0.0), axis=1)
    resid = np.exp(logp) - onehot  # d(-log lik)/d logits
    value = (-np.sum(logp * onehot) + 0.5 * inv_var * np.sum(w * w)) / n
    grad_w = (x.T @ resid + inv_var * w) / n
    grad = np.concatenate([grad_w.ravel(), resid.sum(axis=0) / n]) if fit_intercept else grad_w.ravel()
    return float(value), grad


def fit_softmax(
    x: np.ndarray,
    y: np.ndarray,
    n_classes: int,
    scale: float,
    fit_intercept: bool = True,
    max_iter: int = 1000,
    tol: float = 1e-6,
    init: np.ndarray | None = None,
) -> SoftmaxFit:
    """Fit ``W`` (R, C) and ``b`` (C,) to features ``x`` (n, R) and labels ``y`` (n,) in ``range(n_classes)``.

    ``scale``: the prior sd ``s``. ``tol``: L-BFGS's bound on the largest
    gradient component of the averaged objective. ``init``: a previous fit's
    ``theta`` on the same data and classes (a warm start).
    """
    x = np.asarray(x, np.float64)
    present = np.unique(y)
    onehot = (np.asarray(y)[:, None] == present[None, :]).astype(np.float64)
    size = x.shape[1] * len(present) + (len(present) if fit_intercept else 0)
    theta0 = np.zeros(size) if init is None or np.shape(init) != (size,) else init
    res = minimize_lbfgs(
        softmax_objective,
        theta0,
        (x, onehot, 1.0 / scale**2, fit_intercept),
        max_iter=max_iter,
        gtol=tol,
        ftol=1e-13,
    )
    r, k = x.shape[1], len(present)
    coef = np.zeros((r, n_classes))
    coef[:, present] = res.x[: r * k].reshape(r, k)
    intercept = np.full(n_classes, ABSENT_INTERCEPT)
    intercept[present] = res.x[r * k :] if fit_intercept else 0.0
    return SoftmaxFit(coef, intercept, int(res.nit), bool(res.status == 0), res.x)
