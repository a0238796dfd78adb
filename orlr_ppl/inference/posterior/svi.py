"""Variational posterior of the ORed-logistic model by SVI (``numpyro.infer.SVI``)."""

from __future__ import annotations

import time
from functools import partial
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
import numpyro
import numpyro.distributions as dist
from jax.flatten_util import ravel_pytree
from numpyro import handlers
from numpyro.distributions import constraints
from numpyro.infer import SVI, Trace_ELBO, init_to_median, init_to_value
from numpyro.infer.autoguide import AutoLowRankMultivariateNormal, AutoNormal
from numpyro.infer.svi import SVIState

from ...model.log_density import Scales, draws_log_densities, prior_scales
from ...model.model_data import join_model_data, split_model_data
from ...model.numpyro_model import ModelArrays, ModelData, ModelShape, orlr_model
from ..methods import SVI as SVISettings
from ..methods import PosteriorFit
from ..point.map import sampler_start
from .arviz_compat import Posterior
from .inference_data import RAW_SITES, inference_data, with_derived, zeros_init
from .nuts import PROGRESS_SECONDS, progress_line


class SVIResult(NamedTuple):
    """An SVI fit: posterior draws (``arviz_compat.Posterior``) and the ELBO loss trace.

    The posterior's ``sample_stats`` hold, per draw, ``lp`` (the model's log joint
    density, log p(theta, Y | X) up to a constant) and ``log_q`` (the guide's log
    density at the draw): what PSIS-LOO needs to correct for sampling from the guide
    instead of the posterior (``arviz_compat.loo``).
    """

    posterior: Posterior
    losses: np.ndarray


def _observed(site: dict) -> bool:
    return site["type"] == "sample" and site.get("is_observed", False)


def _latent_sites(*args, **kwargs) -> None:
    """``orlr_model`` with its observed label-set sites hidden: the guide's prototype.

    An autoguide learns its latent sites' shapes and supports by running its
    model, and checks that the log density and its gradient are finite at the
    start, op by op (eagerly: one small compile per operation and shape, tens of
    seconds for the label-set likelihood's dynamic programme and its gradient,
    per bucket). The guide needs only the latent sites (``W_raw``, ``beta_raw``,
    ``leak_logit``, and the deterministic ``W``, ``beta``, ``leak`` for
    ``sample_posterior``), which are the model's own here; the ELBO still runs
    the whole ``orlr_model`` (compiled, in ``SVI.run``). The start is
    ``init_to_value``'s, so the guide starts where it would from the full model;
    only the prior's density is checked there (the likelihood is positive at
    zero weights for every bag ``make_model_data`` accepts).
    """
    handlers.block(orlr_model, hide_fn=_observed)(*args, **kwargs)


class _Static(NamedTuple):
    """What selects a compiled SVI program besides array shapes (hashable).

    n_bags: the real bag count, with minibatches only (their shares read it); None otherwise,
    so that every dataset of one shape family shares the program.
    """

    shape: ModelShape
    fit_intercept: bool
    guide: str
    subsample_size: int | None
    n_bags: int | None


BLOCK = 1000
"""Steps per call of the compiled optimiser (fewer with a progress bar); a longer fit calls it again."""


def _svi(guide: str, start: dict[str, jax.Array] | None, learning_rate) -> SVI:
    """NumPyro's ``SVI`` over ``orlr_model`` with the guide ``guide`` whose means start at ``start``."""
    init = init_to_value(values=start) if start is not None else init_to_median
    if guide == "normal":
        auto = AutoNormal(_latent_sites, init_loc_fn=init, init_scale=0.01)
    elif guide == "lowrank":
        auto = AutoLowRankMultivariateNormal(_latent_sites, init_loc_fn=init, init_scale=0.01)
    else:
        raise ValueError(f"guide={guide!r}: choose 'normal' or 'lowrank'")
    return SVI(orlr_model, auto, numpyro.optim.Adam(learning_rate), Trace_ELBO())


def _model_kwargs(scales: Scales, static: _Static) -> dict:
    return {
        "prior_scale": scales.prior_scale,
        "intercept_scale": scales.intercept_scale,
        "fit_intercept": static.fit_intercept,
        "subsample_size": static.subsample_size,
    }


@partial(jax.jit, static_argnums=(5, 6))
def _steps(
    state: SVIState,
    n: jax.Array,
    arrays: ModelArrays,
    scales: Scales,
    learning_rate: jax.Array,
    static: _Static,
    block: int,
) -> tuple[SVIState, jax.Array, dict[str, jax.Array]]:
    """``n`` (<= ``block``) Adam steps on the negative ELBO from ``state``.

    Returns the new state, the (block,) losses (NaN past ``n``) and the guide's parameters
    (constrained). The data and the step size enter traced and ``n`` bounds a loop, so one
    program serves every fit of a shape family, every step count and every refit of a loop, where
    ``SVI.run`` compiles a closure over its data afresh each fit (seconds to tens of seconds).
    """
    data = join_model_data(arrays, static.shape, static.n_bags)
    kwargs = _model_kwargs(scales, static)
    svi = _svi(static.guide, None, learning_rate)
    # Sets the guide's prototype and the parameters' constraints, which ``update`` reads; the state
    # it returns is unused (and compiled away): the fit's own comes in ``state``.
    svi.init(jax.random.PRNGKey(0), data, **kwargs)

    def step(i, carry):
        st, losses = carry
        st, loss = svi.update(st, data, **kwargs)
        return st, losses.at[i].set(loss)

    losses = jnp.full((block,), jnp.nan, data.buckets[0].features.dtype)
    state, losses = jax.lax.fori_loop(0, n, step, (state, losses))
    return state, losses, svi.get_params(state)


def _progress_bar(show: bool, total: int):
    """A tqdm bar over ``total`` steps (None without ``show``)."""
    if not show:
        return None
    from tqdm.auto import tqdm

    return tqdm(total=total, desc="SVI", postfix="compiling…")


def fit_svi(
    data: ModelData,
    method: SVISettings | None = None,
    prior_scale: float | None = 1.0,
    intercept_scale: float | None = 10.0,
    fit_intercept: bool = True,
    seed: int = 0,
    init_values: dict[str, np.ndarray] | None = None,
) -> SVIResult:
    """Variational posterior with an AutoNormal or AutoLowRankMultivariateNormal guide, as ``method``
    (an ``SVI`` settings object; None: ``SVI()``'s defaults) says.

    ``method.subsample_size`` trains on minibatches of bags (stratified by label-set size, see
    ``orlr_model``); ``method.num_draws`` draws from the fitted guide are returned as one chain.
    ``init_values`` (raw sites, e.g. ``W_raw``) start the guide's means there; None: where
    ``method.init`` says, the MAP under the same prior (``point.map.sampler_start``) or zero
    weights. The steps are NumPyro's ``SVI.update`` (``Trace_ELBO``, Adam), run by one
    module-level compiled program (``_steps``).
    """
    method = SVISettings() if method is None else method
    guide, num_steps, subsample_size = method.guide, method.num_steps, method.subsample_size
    if method.progress_bar:  # NumPyro's bar appears only once the first step has compiled
        progress_line("SVI: compiling the ELBO and its gradient…")
    if init_values is None and method.init == "map":
        init_values = sampler_start(data, prior_scale, intercept_scale, fit_intercept)
    start = zeros_init(data, fit_intercept)
    if init_values is not None:
        start.update({k: jax.numpy.asarray(v, start[k].dtype) for k, v in init_values.items() if k in start})
    arrays, shape = split_model_data(data)
    minibatch = subsample_size is not None and subsample_size < data.n_bags
    static = _Static(shape, fit_intercept, guide, subsample_size, data.n_bags if minibatch else None)
    scales = prior_scales(prior_scale, intercept_scale)
    rate = np.asarray(method.learning_rate, np.float32)
    svi = _svi(guide, start, method.learning_rate)
    kwargs = _model_kwargs(scales, static)
    state = svi.init(jax.random.PRNGKey(seed), data, **kwargs)  # eager: the guide's start (the MAP)
    bar = _progress_bar(method.progress_bar, num_steps)
    parts, done, per_step, block = [], 0, None, BLOCK
    try:
        while done < num_steps:
            n = min(block, num_steps - done)
            if bar is not None:  # about PROGRESS_SECONDS a call; one step until a call is timed
                n = 1 if per_step is None else int(np.clip(PROGRESS_SECONDS / max(per_step, 1e-9), 1, n))
            t0 = time.perf_counter()
            state, losses, params = _steps(
                state, np.asarray(n, np.int32), arrays, scales, rate, static, block
            )
            parts.append(np.asarray(losses)[:n])
            per_step, done = (time.perf_counter() - t0) / n, done + n
            if bar is not None:
                bar.set_postfix_str("", refresh=False)
                bar.update(n)
    finally:
        if bar is not None:
            bar.close()
    if not parts:
        params = svi.get_params(state)
    draws, log_q = guide_draws(svi.guide, params, jax.random.PRNGKey(seed + 1), method.num_draws)
    raw = {k: v for k, v in draws.items() if k in RAW_SITES}
    potentials, per_bucket = draws_log_densities(raw, arrays, scales, shape, fit_intercept)
    log_lik = data.merge_sites({data.site_name(k): np.asarray(v) for k, v in enumerate(per_bucket)})
    chains = {k: np.asarray(v)[None] for k, v in with_derived(draws, data.n_outputs).items()}
    stats = {"lp": -np.asarray(potentials)[None], "log_q": np.asarray(log_q)[None]}
    model_kwargs = dict(prior_scale=prior_scale, intercept_scale=intercept_scale, fit_intercept=fit_intercept)
    losses = np.concatenate(parts) if parts else np.zeros(0, np.float32)
    posterior = inference_data(
        data,
        chains,
        model_kwargs,
        log_lik[None],
        stats,
        seed=seed + 2,
        sample_stats_attrs={"inference": "svi"},
    )
    return SVIResult(posterior, losses)


def _base(support: constraints.Constraint) -> constraints.Constraint:
    """The constraint of one element: ``real`` for ``independent(real, k)``."""
    while isinstance(support, constraints.independent):
        support = support.base_constraint
    return support


def guide_draws(
    auto: AutoNormal | AutoLowRankMultivariateNormal, params: dict, key: jax.Array, num_draws: int
) -> tuple[dict[str, jax.Array], jax.Array]:
    """``num_draws`` draws from a fitted guide, each site (S, ...), and log q at each, (S,).

    Every latent site of ``orlr_model`` has real support, so the guide's density over the
    sites is its density over its unconstrained latent, with no Jacobian: the product of
    Normals of ``AutoNormal``, or ``AutoLowRankMultivariateNormal``'s joint Normal of the
    flat latent. Computed from the guide's parameters, with no program to compile.
    """
    unbounded = {
        name: site["fn"].support
        for name, site in auto.prototype_trace.items()
        if site["type"] == "sample" and not site["is_observed"]
    }
    bounded = [name for name, support in unbounded.items() if _base(support) is not constraints.real]
    if bounded:
        raise ValueError(f"the guide's log density needs a Jacobian for the bounded sites {bounded}")
    if isinstance(auto, AutoNormal):
        draws = auto.sample_posterior(key, params, sample_shape=(num_draws,))
        log_q = sum(
            dist.Normal(params[f"{name}_auto_loc"], params[f"{name}_auto_scale"])
            .log_prob(draws[name])
            .reshape(num_draws, -1)
            .sum(1)
            for name in unbounded
        )
        return {name: draws[name] for name in unbounded}, log_q
    draws = auto.sample_posterior(key, params, sample_shape=(num_draws,))
    draws = {name: draws[name] for name in unbounded}
    # The flat latent of an AutoContinuous guide is ``ravel_pytree`` of its sites by name (real
    # supports: no transform); test_svi holds NumPyro to that layout.
    latent = jax.vmap(lambda d: ravel_pytree(d)[0])(draws)
    return draws, auto.get_posterior(params).log_prob(latent)


def run(
    method: SVISettings,
    data: ModelData,
    prior_scale: float | None,
    intercept_scale: float | None,
    fit_intercept: bool,
    seed: int = 0,
) -> PosteriorFit:
    """``SVI.fit``: ``fit_svi`` with ``method``'s settings."""
    res = fit_svi(data, method, prior_scale, intercept_scale, fit_intercept, seed)
    return PosteriorFit(res.posterior, res.losses)
