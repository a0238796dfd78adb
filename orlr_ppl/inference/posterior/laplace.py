"""The Laplace approximation of the ORed-logistic posterior: the Gaussian at the MAP, and its evidence.

With ``U(theta) = -log p(theta, Y | X)`` the potential, ``theta^`` its minimiser (the
MAP, ``map.fit_map`` in float64) and ``H`` its Hessian there (exact: Louis' identity
over the DP's pairwise posteriors, ``log_density.potential_hessian``)::

    q(theta) = Normal(theta^, H^-1),
    log p(Y | X) ~= -U(theta^) + (P / 2) log(2 pi) - (1 / 2) log det H,

the second MacKay's evidence, which ``evidence`` maximises over the prior's scales
(type-II maximum likelihood). Draws are ``theta^ + L^-T z``, ``H = L L^T``, ``z`` standard
normal, and each keeps ``lp = -U`` and ``log_q``, as an SVI posterior's draws do: PSIS
then weights them towards the posterior (``arviz_compat.loo``), and the Pareto k-hat of
the ratios ``lp - log_q`` over all draws says how far the posterior is from ``q``
(Yao et al. 2018, "Yes, but did it work?"; ``diagnostics``).

The approximation covers the Normal (or flat) prior, a novel class, a named leak and
known instance labels. A learnt leak, the l2,1 prior (whose MAP sits on a kink) and the
group horseshoe (which has no MAP) raise a ValueError.
"""

from __future__ import annotations

from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from jax.flatten_util import ravel_pytree
from scipy.linalg import cho_factor, solve_triangular

from ...model.log_density import draws_log_densities, hessian_chunks, potential_hessian, prior_scales
from ...model.numpyro_model import ModelData, split_model_data
from ..methods import Laplace, PosteriorFit
from ..point.map import MAPResult, fit_map
from .arviz_compat import Posterior
from .inference_data import RAW_SITES, inference_data, with_derived

METHOD = "laplace"
"""``sample_stats.attrs["inference"]`` of a Laplace posterior: what the diagnostics read to name it."""


class Gaussian(NamedTuple):
    """The Laplace approximation at a mode.

    Attributes:
        map: the MAP fit (``MAPResult``; its ``params`` the mode's raw sites).
        mode: (P,) the mode, flat (``ravel_pytree``'s order: ``W_raw`` rows, then ``beta_raw``).
        hessian: (P, P) float64 ``H``, the potential's Hessian at the mode.
        cholesky: (P, P) float64 lower-triangular ``L``, ``L L^T = H``.
        log_evidence: the Laplace approximation of ``log p(Y | X)`` (NaN under a flat prior,
            whose evidence does not exist).
    """

    map: MAPResult
    mode: np.ndarray
    hessian: np.ndarray
    cholesky: np.ndarray
    log_evidence: float


def check_laplace(data: ModelData) -> None:
    """ValueError for a model the Laplace approximation does not cover (module docstring)."""
    if data.leak == "learn":
        raise ValueError(
            "inference='laplace' with leak='learn': the approximation covers a fixed leak (leak=0.05, "
            "say) or none; sample a learnt leak with inference='nuts'"
        )
    if data.weight_prior != "normal":
        raise ValueError(
            f"inference='laplace' with prior={data.weight_prior!r}: the Laplace approximation needs a "
            "smooth mode (the l2,1 MAP sits on a kink where rows are zero, the horseshoe has none); "
            "use prior='normal', or sample with inference='nuts'"
        )


def laplace_approximation(
    data: ModelData,
    prior_scale: float | None,
    intercept_scale: float | None,
    fit_intercept: bool = True,
    max_iter: int = Laplace.max_iter,
    tol: float = Laplace.tol,
    init: dict[str, np.ndarray] | None = None,
) -> Gaussian:
    """The MAP of ``data``'s model and the Gaussian there (``Gaussian``); float64 ``data`` under
    ``jax.enable_x64`` for an exact mode and Hessian.

    ``init``: where the MAP starts (an earlier ``Gaussian.map.params``), default zeros.
    A ValueError when the Hessian is not positive definite: the MAP is then no strict
    maximum (a flat prior along features the data do not inform, say).
    """
    check_laplace(data)
    mode = fit_map(data, prior_scale, intercept_scale, max_iter, tol, fit_intercept, init)
    arrays, shape = split_model_data(data)
    dtype = data.buckets[0].features.dtype
    scales = prior_scales(prior_scale, intercept_scale, dtype)
    params = {k: jnp.asarray(v) for k, v in mode.params.items()}
    padded, n_chunks = hessian_chunks(arrays, shape, fit_intercept)
    hess, resolved = potential_hessian(params, padded, scales, shape, fit_intercept, False, n_chunks)
    if not bool(resolved):  # a bag near underflow: again with the DP's log-space fallback compiled in
        hess, _ = potential_hessian(params, padded, scales, shape, fit_intercept, True, n_chunks)
    hess = np.asarray(hess, np.float64)
    try:
        chol = cho_factor(hess, lower=True)[0]
    except np.linalg.LinAlgError as err:
        low = float(np.linalg.eigvalsh(hess)[0])
        raise ValueError(
            f"the Hessian of the negative log posterior at the MAP is not positive definite (smallest "
            f"eigenvalue {low:.3g}): the MAP is no strict maximum there, e.g. a flat prior along features "
            "the bags do not inform; give a prior_scale, or drop those features"
        ) from err
    chol = np.tril(chol)
    flat = np.asarray(ravel_pytree(params)[0], np.float64)
    log_evidence = float("nan")
    if prior_scale is not None and (intercept_scale is not None or not fit_intercept):
        log_evidence = float(
            mode.log_posterior + 0.5 * flat.size * np.log(2 * np.pi) - np.sum(np.log(np.diag(chol)))
        )
    return Gaussian(mode, flat, hess, chol, log_evidence)


class LaplaceFit(NamedTuple):
    """A Laplace posterior.

    Attributes:
        posterior: draws from the Gaussian (``arviz_compat.Posterior``, one chain), with
            ``lp`` and ``log_q`` per draw in ``sample_stats``.
        gaussian: the approximation itself (``Gaussian``).
    """

    posterior: Posterior
    gaussian: Gaussian


def gaussian_draws(gaussian: Gaussian, num_draws: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """(S, P) draws from ``Normal(mode, H^-1)`` and (S,) their log densities ``log q``."""
    rng = np.random.default_rng([int(seed), 4057])
    z = rng.standard_normal((int(num_draws), gaussian.mode.size))
    draws = gaussian.mode + solve_triangular(gaussian.cholesky, z.T, lower=True, trans="T").T
    log_det = np.sum(np.log(np.diag(gaussian.cholesky)))  # log det H^(1/2)
    log_q = -0.5 * np.sum(z * z, axis=1) - 0.5 * gaussian.mode.size * np.log(2 * np.pi) + log_det
    return draws, log_q


def fit_laplace(
    data: ModelData,
    prior_scale: float | None = 1.0,
    intercept_scale: float | None = 10.0,
    fit_intercept: bool = True,
    num_draws: int = Laplace.num_draws,
    seed: int = 0,
    max_iter: int = Laplace.max_iter,
    tol: float = Laplace.tol,
    gaussian: Gaussian | None = None,
) -> LaplaceFit:
    """The Laplace posterior of ``data``'s model as draws (float64 ``data`` under ``jax.enable_x64``).

    ``gaussian``: an approximation already made (``laplace_approximation``, e.g. by the
    evidence's search), else made here. Each draw's log joint and per-bag
    log-likelihoods come from one compiled program (``draws_log_densities``), as SVI's.
    """
    if gaussian is None:
        gaussian = laplace_approximation(data, prior_scale, intercept_scale, fit_intercept, max_iter, tol)
    flat, log_q = gaussian_draws(gaussian, num_draws, seed)
    _, unravel = ravel_pytree({k: jnp.asarray(v) for k, v in gaussian.map.params.items()})
    raw = jax.vmap(unravel)(jnp.asarray(flat, data.buckets[0].features.dtype))
    raw = {k: v for k, v in raw.items() if k in RAW_SITES}
    arrays, shape = split_model_data(data)
    scales = prior_scales(prior_scale, intercept_scale, data.buckets[0].features.dtype)
    potentials, per_bucket = draws_log_densities(raw, arrays, scales, shape, fit_intercept)
    log_lik = data.merge_sites({data.site_name(k): np.asarray(v) for k, v in enumerate(per_bucket)})
    chains = {k: np.asarray(v)[None] for k, v in with_derived(raw, data.n_outputs).items()}
    stats = {"lp": -np.asarray(potentials)[None], "log_q": np.asarray(log_q)[None]}
    model_kwargs = dict(prior_scale=prior_scale, intercept_scale=intercept_scale, fit_intercept=fit_intercept)
    attrs = {"inference": METHOD, "log_evidence": gaussian.log_evidence}
    posterior = inference_data(
        data, chains, model_kwargs, log_lik[None], stats, seed=seed + 2, sample_stats_attrs=attrs
    )
    return LaplaceFit(posterior, gaussian)


def run(
    method: Laplace,
    data: ModelData,
    prior_scale: float | None,
    intercept_scale: float | None,
    fit_intercept: bool,
    seed: int = 0,
) -> PosteriorFit:
    """``Laplace.fit``: ``fit_laplace`` with ``method``'s settings (float64 ``data`` under
    ``jax.enable_x64``); the draws from ``seed``."""
    res = fit_laplace(
        data, prior_scale, intercept_scale, fit_intercept, method.num_draws, seed, method.max_iter, method.tol
    )
    return PosteriorFit(res.posterior, None, res.gaussian)
