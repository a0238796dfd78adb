"""EM's closed-form M-step for the leak probability of the relaxed union (``leak="learn"``)."""

from __future__ import annotations

import jax
import jax.numpy as jnp

from ...model.log_density import EStep, Params
from ...model.numpyro_model import ModelArrays, ModelShape

Array = jax.Array


def _counts(e: EStep, arrays: ModelArrays, weights: Array | None, shape: ModelShape) -> tuple[Array, Array]:
    """``(E[leaks], trials)``: the E-step's expected leaks over all bags and classes, and the
    Bernoulli(eps) trials they came from (C named classes per real bag), each bucket weighted."""
    w = jnp.ones(len(arrays)) if weights is None else weights
    leaks = sum(jnp.sum(lk) for lk in e.leaked)  # already weighted (``stochastic_em.weighted``)
    bags = sum(wk * jnp.sum(jnp.any(arr[1], axis=1)) for wk, arr in zip(w, arrays))
    return leaks, bags * shape.n_classes


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
    leaks, trials = _counts(e, arrays, weights, shape)
    eps = (leaks + a) / (trials + a + b)
    dtype = params["leak_logit"].dtype
    return {**params, "leak_logit": jnp.asarray(jnp.log(eps) - jnp.log1p(-eps), dtype)}


def leak_gradient(params: Params, e: EStep, arrays: ModelArrays, shape: ModelShape) -> Array:
    """() ``d log p(theta | Y) / d leak_logit`` at the E-step's parameters, ``leaks + a - eps (n + a + b)``.

    Fisher's identity: the gradient of the log posterior is that of the expected complete
    log joint at the E-step's own posteriors, whose leak part is ``leaks log eps + (n -
    leaks) log(1 - eps)`` over ``n`` trials, plus the prior ``a log eps + b log(1 - eps)`` on
    the logit scale. It is zero exactly at ``leak_update``'s value.
    """
    a, b = shape.leak_prior
    leaks, trials = _counts(e, arrays, None, shape)
    eps = jax.nn.sigmoid(params["leak_logit"])
    return leaks + a - eps * (trials + a + b)
