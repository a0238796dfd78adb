"""MAP point estimates of the ORed-logistic model: L-BFGS, or FISTA under the l2,1 prior."""

from __future__ import annotations

import functools
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from jax.flatten_util import ravel_pytree

from ...model.log_density import Params, Scales, potential, potential_and_grad_on_host, prior_scales
from ...model.numpyro_model import (
    ModelArrays,
    ModelData,
    ModelShape,
    fitted_leak,
    split_model_data,
    start_params,
    sum_to_zero_basis,
)
from ...model.priors import group_laplace_log_normalizer, horseshoe_start
from ..methods import MAP, PointFit
from .lbfgs import minimize_lbfgs
from .prox import FistaResult, fista, lipschitz_bound


class MAPResult(NamedTuple):
    """A MAP fit.

    Attributes:
        W: (d, C) weights; beta: (C,) intercepts (both sum to zero over classes).
        log_posterior: log likelihood + log prior at the optimum (the prior's
            term is zero when it is flat).
        n_iter: L-BFGS (or FISTA) iterations.
        converged: whether the first-order condition holds: ``optimality <= tol``.
        leak: the fitted leak probability with ``leak="learn"`` (else None).
        optimality: the first-order residual at the estimate (``optimality``): the
            largest component of the log posterior's gradient; under the l2,1 prior,
            of FISTA's last gradient mapping.
        params: the raw parameters at the estimate (``W_raw``, ``beta_raw``, ...), as the
            model's sites take them: the start of a warm refit, a Laplace approximation.
    """

    W: np.ndarray
    beta: np.ndarray
    log_posterior: float
    n_iter: int
    converged: bool
    leak: float | None = None
    optimality: float = float("nan")
    params: dict[str, np.ndarray] | None = None


def fit_map(
    data: ModelData,
    prior_scale: float | None = 1.0,
    intercept_scale: float | None = 10.0,
    max_iter: int = MAP.max_iter,
    tol: float = MAP.tol,
    fit_intercept: bool = True,
    init: dict[str, np.ndarray] | None = None,
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

    Converged means a first-order condition (``optimality``): the largest component of
    the log posterior's gradient is at most ``tol``. L-BFGS stops there, at ``max_iter``,
    or when its line search fails, which in float32 happens well short of ``tol`` (the
    objective's round-off hides the last rises): build ``data`` in float64 under
    ``jax.enable_x64`` for an optimum, as the estimators do.

    Args:
        data: from ``make_model_data``.
        prior_scale, intercept_scale, fit_intercept: ``orlr_model``'s priors.
        max_iter, tol: the iteration cap and the first-order tolerance.
        init: raw starting parameters (``MAPResult.params`` of an earlier fit, e.g.
            under another prior scale); default zeros.
    """
    arrays, shape = split_model_data(data)
    arrays = jax.device_put(arrays)  # once, not at every L-BFGS step
    c = data.n_outputs
    dtype = data.buckets[0].features.dtype
    init = {
        **start_params(data, fit_intercept, dtype),
        **{k: np.asarray(v, dtype) for k, v in (init or {}).items()},
    }
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
            float(res.residual),
            float(tol),
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

    # No test on the objective's relative change (ftol=0): L-BFGS stops at the first-order
    # tolerance, at max_iter, or where its line search can rise no more.
    res = minimize_lbfgs(_fun, np.asarray(flat0, np.float64), max_iter=max_iter, gtol=tol, ftol=0.0)
    params = unravel(jnp.asarray(res.x, dtype))
    optimality = float(np.max(np.abs(res.jac))) if np.size(res.jac) else 0.0
    return _result(params, -float(res.fun), int(res.nit), optimality, float(tol), data, fit_intercept)


def _result(
    params: Params,
    log_posterior: float,
    n_iter: int,
    optimality: float,
    tol: float,
    data: ModelData,
    fit_intercept: bool,
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
        bool(optimality <= tol),
        fitted_leak(params, data),
        optimality,
        {k: np.asarray(v) for k, v in params.items()},
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


def run(
    method: MAP,
    data: ModelData,
    prior_scale: float | None,
    intercept_scale: float | None,
    fit_intercept: bool,
    seed: int = 0,
) -> PointFit:
    """``MAP.fit``: ``fit_map`` with ``method``'s settings (deterministic: ``seed`` is unused)."""
    res = fit_map(data, prior_scale, intercept_scale, method.max_iter, method.tol, fit_intercept)
    coef, intercept = np.asarray(res.W), np.asarray(res.beta)
    return PointFit(
        coef, intercept, res.log_posterior, res.n_iter, res.converged, None, res.leak, res.optimality
    )


def sampler_start(
    data: ModelData, prior_scale: float | None, intercept_scale: float | None, fit_intercept: bool
) -> dict[str, np.ndarray]:
    """Raw starting parameters for NUTS and SVI (``init="map"``): the MAP under the same prior.

    The MAP is found in float64 whatever ``data``'s dtype, to ``MAP()``'s first-order
    tolerance: in float32 L-BFGS's line search stalls short of it (the log posterior's
    round-off hides the last rises), and the chains' jitter and a whitening are
    measured from this point. A few hundred L-BFGS steps cost less than the warmup
    iterations they save. The group horseshoe has no MAP: its start is the Normal
    prior's MAP of the same scale, in its sites.

    Returns ``W_raw`` (d, C - 1) and, with intercepts, ``beta_raw`` (C - 1,): the MAP
    in the model's sum-to-zero basis; with a learnt leak, ``leak_logit``.
    """
    horseshoe = data.weight_prior == "group_horseshoe"
    point_data = data._replace(weight_prior="normal") if horseshoe else data
    wide = tuple(b._replace(features=np.asarray(b.features, np.float64)) for b in point_data.buckets)
    with jax.enable_x64(True):
        fit = fit_map(
            point_data._replace(buckets=wide), prior_scale, intercept_scale, fit_intercept=fit_intercept
        )
    basis = sum_to_zero_basis(data.n_outputs)
    start = horseshoe_start(fit.W @ basis, prior_scale) if horseshoe else {"W_raw": fit.W @ basis}
    if fit_intercept:
        start["beta_raw"] = fit.beta @ basis
    if fit.leak is not None and data.leak == "learn":
        start["leak_logit"] = np.log(fit.leak) - np.log1p(-fit.leak)
    return start
