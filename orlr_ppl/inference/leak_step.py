"""EM's closed-form M-step for the leak probability of the relaxed union (``leak="learn"``)."""

from __future__ import annotations

import jax
import jax.numpy as jnp

from ..model.log_density import EStep, Params
from ..model.numpyro_model import ModelArrays, ModelShape

Array = jax.Array


def leak_update(
    params: Params, e: EStep, arrays: ModelArrays, weights: Array | None, shape: ModelShape
) -> Params:
    """The leak's M-step in closed form: ``logit((E[leaks] + a) / (trials + a + b))``.

    Every real bag offers each of the C named classes one Bernoulli(eps)
    trial; ``E[leaks]`` sums the E-step's chances that a leak switched a class
    on. The Beta(a, b) prior is a density on the logit (the model's site), so
    its mode there is ``(leaks + a) / (trials + a + b)``, not the Beta's mode.
    Stochastic EM weighs each bucket's counts as its responsibilities.

    Args:
        params: the raw parameters, with ``leak_logit`` ().
        e: the E-step (``e.leaked``: per bucket (B_k, C) chances a leak switched each class on).
        arrays: the buckets the E-step ran on (``split_model_data``).
        weights: (K,) each bucket's weight under stochastic EM; None: all 1.
        shape: the model's ``ModelShape`` (``leak_prior``, ``n_classes``).
    Returns:
        ``params`` with ``leak_logit`` replaced by its M-step value.
    """
    a, b = shape.leak_prior
    w = jnp.ones(len(arrays)) if weights is None else weights
    leaks = sum(jnp.sum(lk) for lk in e.leaked)  # already weighted (``stochastic_em.weighted``)
    bags = sum(wk * jnp.sum(jnp.any(arr[1], axis=1)) for wk, arr in zip(w, arrays))
    eps = (leaks + a) / (bags * shape.n_classes + a + b)
    dtype = params["leak_logit"].dtype
    return {**params, "leak_logit": jnp.asarray(jnp.log(eps) - jnp.log1p(-eps), dtype)}
