"""Full posterior of the ORed-logistic model by NUTS (``numpyro.infer.MCMC``)."""

from __future__ import annotations

import jax
import numpy as np
from numpyro.infer import MCMC, NUTS, init_to_value

from .inference_data import az, inference_data, with_derived, zeros_init
from .model import ModelData, orlr_model


def fit_nuts(
    data: ModelData,
    prior_scale: float | None = 1.0,
    intercept_scale: float | None = 10.0,
    fit_intercept: bool = True,
    num_warmup: int = 500,
    num_samples: int = 500,
    num_chains: int = 2,
    seed: int = 0,
    progress_bar: bool = False,
) -> az.InferenceData:
    """Sample the posterior with NUTS; chains run one after another (CPU).

    Chains start at zero weights (uniform class probabilities), a point of
    positive likelihood for every bag, and are jittered by warmup.
    """
    model_kwargs = {
        "prior_scale": prior_scale,
        "intercept_scale": intercept_scale,
        "fit_intercept": fit_intercept,
    }
    kernel = NUTS(orlr_model, init_strategy=init_to_value(values=zeros_init(data, fit_intercept)))
    mcmc = MCMC(
        kernel,
        num_warmup=num_warmup,
        num_samples=num_samples,
        num_chains=num_chains,
        chain_method="sequential",
        progress_bar=progress_bar,
    )
    mcmc.run(
        jax.random.PRNGKey(seed), data, **model_kwargs, extra_fields=("diverging", "num_steps", "energy")
    )
    raw = mcmc.get_samples(group_by_chain=True)
    chains = with_derived(raw, data.n_classes)
    extra = mcmc.get_extra_fields(group_by_chain=True)
    stats = {
        "diverging": np.asarray(extra["diverging"]),
        "n_steps": np.asarray(extra["num_steps"]),
        "energy": np.asarray(extra["energy"]),
    }
    return inference_data(data, chains, model_kwargs, stats)
