"""MAP point estimates of the ORed-logistic model by L-BFGS."""

from __future__ import annotations

from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from jax.flatten_util import ravel_pytree
from scipy.optimize import minimize

from .objective import FlatData, log_posterior


class MAPResult(NamedTuple):
    """A MAP fit.

    Attributes:
        W: (d, C) weights; beta: (C,) intercepts (both sum to zero over classes).
        log_posterior: log likelihood + log prior at the optimum (the prior's
            term is zero when it is flat).
        n_iter: L-BFGS iterations.
        converged: whether L-BFGS met its tolerance.
    """

    W: np.ndarray
    beta: np.ndarray
    log_posterior: float
    n_iter: int
    converged: bool


def fit_map(
    data: FlatData,
    prior_scale: float | None = 1.0,
    intercept_scale: float | None = 10.0,
    max_iter: int = 500,
    tol: float = 1e-9,
    fit_intercept: bool = True,
) -> MAPResult:
    """Maximise the log posterior (``orlr_model``'s) with scipy's L-BFGS-B.

    The objective and its gradient come from one jitted call (the gradient
    from the DP's backward pass). Starts from zero weights (uniform class
    probabilities), where every bag's likelihood is positive. With
    ``prior_scale=None`` on separable data the maximum likelihood is at
    infinity; L-BFGS then stops at ``max_iter``.
    """
    d, c = data.features.shape[1], data.basis.shape[0]
    dtype = data.features.dtype
    init = {"W_raw": jnp.zeros((d, c - 1), dtype)}
    if fit_intercept:
        init["beta_raw"] = jnp.zeros((c - 1,), dtype)
    flat0, unravel = ravel_pytree(init)

    @jax.jit
    def _neg_and_grad(flat: jax.Array) -> tuple[jax.Array, jax.Array]:
        return jax.value_and_grad(lambda f: -log_posterior(unravel(f), data, prior_scale, intercept_scale))(
            flat
        )

    def _fun(x: np.ndarray) -> tuple[float, np.ndarray]:
        v, g = _neg_and_grad(jnp.asarray(x, dtype))
        return float(v), np.asarray(g, dtype=np.float64)

    res = minimize(
        _fun,
        np.asarray(flat0, np.float64),
        jac=True,
        method="L-BFGS-B",
        options={"maxiter": max_iter, "ftol": tol, "gtol": 1e-6},
    )
    params = unravel(jnp.asarray(res.x, dtype))
    basis = np.asarray(data.basis, np.float64)
    beta_raw = np.asarray(params["beta_raw"]) if fit_intercept else np.zeros(c - 1)
    return MAPResult(
        np.asarray(params["W_raw"]) @ basis.T,
        beta_raw @ basis.T,
        -float(res.fun),
        int(res.nit),
        bool(res.success),
    )
