"""Variational posterior of the ORed-logistic model by SVI (``numpyro.infer.SVI``)."""

from __future__ import annotations

from typing import Literal, NamedTuple

import jax
import numpy as np
import numpyro
from numpyro import handlers
from numpyro.infer import SVI, Trace_ELBO, init_to_value
from numpyro.infer.autoguide import AutoLowRankMultivariateNormal, AutoNormal
from numpyro.infer.util import log_density

from ..model.numpyro_model import ModelData, orlr_model
from .arviz_compat import Posterior
from .inference_data import inference_data, with_derived, zeros_init
from .methods import SVI as SVISettings


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


def fit_svi(
    data: ModelData,
    prior_scale: float | None = 1.0,
    intercept_scale: float | None = 10.0,
    fit_intercept: bool = True,
    guide: Literal["normal", "lowrank"] = SVISettings.guide,  # type: ignore[assignment]
    num_steps: int = SVISettings.num_steps,
    learning_rate: float = SVISettings.learning_rate,
    subsample_size: int | None = SVISettings.subsample_size,
    num_draws: int = SVISettings.num_draws,
    seed: int = 0,
    progress_bar: bool = False,
) -> SVIResult:
    """Variational posterior with an AutoNormal or AutoLowRankMultivariateNormal guide.

    ``subsample_size`` trains on minibatches of bags (stratified by label-set
    size, see ``orlr_model``). ``num_draws`` draws from the fitted guide are
    returned as one chain.
    """
    model_kwargs = {
        "prior_scale": prior_scale,
        "intercept_scale": intercept_scale,
        "fit_intercept": fit_intercept,
    }
    init = init_to_value(values=zeros_init(data, fit_intercept))
    if guide == "normal":
        auto = AutoNormal(_latent_sites, init_loc_fn=init, init_scale=0.01)
    elif guide == "lowrank":
        auto = AutoLowRankMultivariateNormal(_latent_sites, init_loc_fn=init, init_scale=0.01)
    else:
        raise ValueError(f"guide={guide!r}: choose 'normal' or 'lowrank'")
    svi = SVI(orlr_model, auto, numpyro.optim.Adam(learning_rate), Trace_ELBO())
    result = svi.run(
        jax.random.PRNGKey(seed),
        num_steps,
        data,
        **model_kwargs,
        subsample_size=subsample_size,
        progress_bar=progress_bar,
    )
    keys = jax.random.split(jax.random.PRNGKey(seed + 1), num_draws)
    draws, log_q, log_p = _guide_draws(auto, result.params, data, model_kwargs, keys)
    chains = {k: np.asarray(v)[None] for k, v in with_derived(draws, data.n_outputs).items()}
    stats = {"lp": np.asarray(log_p)[None], "log_q": np.asarray(log_q)[None]}
    return SVIResult(
        inference_data(data, chains, model_kwargs, stats, seed=seed + 2), np.asarray(result.losses)
    )


def _guide_draws(auto, params: dict, data: ModelData, model_kwargs: dict, keys: jax.Array):
    """Draws from the fitted guide with log q(theta_s) and the model's log joint log p(theta_s, Y).

    Returns ``(draws, log_q, log_p)``: the latent sites' values, each (S, ...), and two (S,)
    arrays. Each draw is one run of the guide, whose trace holds its own log density (for the
    low-rank guide, the auxiliary flat latent and the Jacobian of its unpacking); ``log_p`` is
    ``orlr_model``'s joint density at the draw, all bags.
    """

    def one(key):
        log_q, trace = log_density(handlers.seed(auto, key), (data,), model_kwargs, params)
        draw = {
            name: site["value"]
            for name, site in trace.items()
            if site["type"] == "sample" and not site["infer"].get("is_auxiliary")
        }
        log_p, _ = log_density(orlr_model, (data,), model_kwargs, draw)
        return draw, log_q, log_p

    # Compiled here, with the data as constants: one compile per fit, as ``SVI.run``'s own.
    return jax.jit(jax.vmap(one))(keys)
