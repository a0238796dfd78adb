"""MAP point estimates of the ORed-logistic model by L-BFGS."""

from __future__ import annotations

from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from jax.flatten_util import ravel_pytree
from scipy.optimize import minimize

from ..model.log_density import potential_and_grad, prior_scales
from ..model.numpyro_model import ModelData, fitted_leak, split_model_data, start_params, sum_to_zero_basis


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
    max_iter: int = 500,
    tol: float = 1e-9,
    fit_intercept: bool = True,
) -> MAPResult:
    """Maximise ``orlr_model``'s log posterior with scipy's L-BFGS-B.

    The objective and its gradient come from ``log_density.potential_and_grad``,
    compiled once per shape family (the data are its arguments), so the NUTS
    start that follows a MAP, or the next fold's MAP, reuses the compilation.
    The gradient is the DP's backward pass. L-BFGS-B's own steps run on the
    host, a few microseconds each beside a gradient. Starts from zero weights
    (uniform class probabilities), where every bag's likelihood is positive.
    With ``prior_scale=None`` on separable data the maximum likelihood is at
    infinity; L-BFGS then stops at ``max_iter``.

    Args:
        data: from ``make_model_data``.
        prior_scale, intercept_scale, fit_intercept: ``orlr_model``'s priors.
        max_iter, tol: L-BFGS-B's iteration cap and relative tolerance on the objective.
    """
    arrays, shape = split_model_data(data)
    arrays = jax.device_put(arrays)  # once, not at every L-BFGS step
    c = data.n_outputs
    dtype = data.buckets[0].features.dtype
    scales = prior_scales(prior_scale, intercept_scale, dtype)
    init = start_params(data, fit_intercept, dtype)
    flat0, unravel = ravel_pytree(init)

    def _fun(x: np.ndarray) -> tuple[float, np.ndarray]:
        value, grad = potential_and_grad(unravel(jnp.asarray(x, dtype)), arrays, scales, shape, fit_intercept)
        return float(value), np.asarray(ravel_pytree(grad)[0], dtype=np.float64)

    res = minimize(
        _fun,
        np.asarray(flat0, np.float64),
        jac=True,
        method="L-BFGS-B",
        options={"maxiter": max_iter, "ftol": tol, "gtol": 1e-6},
    )
    params = unravel(jnp.asarray(res.x, dtype))
    basis = np.asarray(sum_to_zero_basis(c), np.float64)
    beta_raw = np.asarray(params["beta_raw"]) if fit_intercept else np.zeros(c - 1)
    return MAPResult(
        np.asarray(params["W_raw"]) @ basis.T,
        beta_raw @ basis.T,
        -float(res.fun),
        int(res.nit),
        bool(res.success),
        fitted_leak(params, data),
    )
