"""Variational posterior of the ORed-logistic model by SVI (``numpyro.infer.SVI``)."""

from __future__ import annotations

from typing import Literal, NamedTuple

import jax
import numpy as np
import numpyro
from numpyro.infer import SVI, Trace_ELBO, init_to_value
from numpyro.infer.autoguide import AutoLowRankMultivariateNormal, AutoNormal

from ..model.numpyro_model import ModelData, orlr_model
from .inference_data import az, inference_data, with_derived, zeros_init


class SVIResult(NamedTuple):
    """An SVI fit: posterior draws as InferenceData and the ELBO loss trace."""

    posterior: az.InferenceData
    losses: np.ndarray


def fit_svi(
    data: ModelData,
    prior_scale: float | None = 1.0,
    intercept_scale: float | None = 10.0,
    fit_intercept: bool = True,
    guide: Literal["normal", "lowrank"] = "normal",
    num_steps: int = 3000,
    learning_rate: float = 0.01,
    subsample_size: int | None = None,
    num_draws: int = 500,
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
        auto = AutoNormal(orlr_model, init_loc_fn=init, init_scale=0.01)
    elif guide == "lowrank":
        auto = AutoLowRankMultivariateNormal(orlr_model, init_loc_fn=init, init_scale=0.01)
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
    draws = auto.sample_posterior(jax.random.PRNGKey(seed + 1), result.params, sample_shape=(num_draws,))
    chains = {k: np.asarray(v)[None] for k, v in with_derived(draws, data.n_outputs).items()}
    return SVIResult(inference_data(data, chains, model_kwargs, seed=seed + 2), np.asarray(result.losses))
