"""Mean-field Gaussian SVI on bags streamed from a store (``stochastic_map``'s stream and objective).

``q(theta) = N(loc, diag(exp(log_scale))**2)`` on the raw weights ``W_raw``,
``beta_raw`` (as ``AutoNormal``). Each step draws ``theta = loc + sigma * eps``
once and takes an Adam step on the negative ELBO's estimate::

    -(log p(theta) + (n_bags / B_t) sum_{b in batch} log p(Y_b | X_b, theta)) - sum log sigma + const,

the first term ``orlr_model``'s potential with its likelihood scaled
(``streaming.minibatch_potential``), so SVI, MAP and the samplers share one model. The
step is a module-level jitted function of (state, minibatch arrays); every
minibatch packs into one layout, so a fit compiles it once.
"""

from __future__ import annotations

import functools
from typing import TYPE_CHECKING, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
import optax
from jax.sharding import Mesh

from ...model.log_density import Params, Scales, prior_scales
from ...model.numpyro_model import ModelArrays, ModelShape, sum_to_zero_basis
from .packed import PackedStream
from .stochastic_map import (
    StreamSettings,
    likelihood_weight,
    minibatch_potential,
    minibatch_stream,
    weights_of,
    zero_start,
)

if TYPE_CHECKING:  # the store is the data layer's; this layer takes it as an argument
    from ...data.store import BagStore

Array = jax.Array


class _SVIState(NamedTuple):
    loc: Params
    log_scale: Params
    opt_state: optax.OptState
    key: Array


@functools.partial(jax.jit, static_argnames=("shape", "fit_intercept"))
def _svi_step(
    state: _SVIState,
    arrays: ModelArrays,
    n_bags: Array,
    scales: Scales,
    learning_rate: Array,
    shape: ModelShape,
    fit_intercept: bool,
) -> tuple[_SVIState, Array]:
    """One Adam step on a one-draw estimate of the negative ELBO; returns the state and the estimate."""
    key, draw = jax.random.split(state.key)
    weight = likelihood_weight(arrays, n_bags)
    leaves, tree = jax.tree.flatten(state.loc)
    noise = jax.tree.unflatten(
        tree,
        [jax.random.normal(k, x.shape, x.dtype) for k, x in zip(jax.random.split(draw, len(leaves)), leaves)],
    )

    def neg_elbo(loc: Params, log_scale: Params) -> Array:
        theta = jax.tree.map(lambda m, s, e: m + jnp.exp(s) * e, loc, log_scale, noise)
        entropy = sum(jnp.sum(s) for s in jax.tree.leaves(log_scale))  # of q, up to a constant
        return minibatch_potential(theta, arrays, weight, scales, shape, fit_intercept) - entropy

    loss, grads = jax.value_and_grad(neg_elbo, argnums=(0, 1))(state.loc, state.log_scale)
    updates, opt_state = optax.adam(learning_rate).update(
        grads, state.opt_state, (state.loc, state.log_scale)
    )
    loc, log_scale = optax.apply_updates((state.loc, state.log_scale), updates)
    return _SVIState(loc, log_scale, opt_state, key), loss


class StreamingSVIResult(NamedTuple):
    """A mean-field Gaussian variational posterior fitted on a stream.

    Attributes:
        W, beta: (d, C), (C,) posterior means of the sum-to-zero weights.
        W_sd, beta_sd: their posterior standard deviations under ``q``.
        loc, scale: ``q``'s means and standard deviations of the raw
            parameters ``W_raw`` (d, C-1), ``beta_raw`` (C-1,).
        losses: (n_steps,) each step's one-draw minibatch estimate of the
            negative ELBO (up to a constant).
        n_steps: Adam steps taken.
    """

    W: np.ndarray
    beta: np.ndarray
    W_sd: np.ndarray
    beta_sd: np.ndarray
    loc: dict[str, np.ndarray]
    scale: dict[str, np.ndarray]
    losses: np.ndarray
    n_steps: int


def fit_streaming_svi(
    store: BagStore | PackedStream,
    prior_scale: float = 1.0,
    intercept_scale: float = 10.0,
    fit_intercept: bool = True,
    epochs: int = 1,
    batch_bags: int | None = None,
    learning_rate: float = 0.01,
    init_scale: float = 0.01,
    seed: int = 0,
    mesh: Mesh | None = None,
    process_index: int = 0,
    process_count: int = 1,
) -> StreamingSVIResult:
    """Mean-field Gaussian SVI on minibatches streamed from ``store``; arguments as ``fit_streaming``.

    ``q`` starts at zero means and ``init_scale`` standard deviations (as
    ``inference.posterior.svi``'s AutoNormal). Needs proper priors: a flat prior has no
    posterior to approximate.
    """
    if prior_scale is None or intercept_scale is None:
        raise ValueError("fit_streaming_svi needs proper priors: give prior_scale and intercept_scale")
    loc = zero_start(store, fit_intercept, None)
    log_scale = {k: np.full_like(v, np.log(init_scale)) for k, v in loc.items()}
    state = _SVIState(
        loc, log_scale, optax.adam(learning_rate).init((loc, log_scale)), jax.random.PRNGKey(seed)
    )
    scales = prior_scales(prior_scale, intercept_scale, store.dtype)
    how = StreamSettings(
        learning_rate, fit_intercept, epochs, batch_bags, seed, mesh, process_index, process_count
    )
    state, losses = minibatch_stream(_svi_step, state, store, scales, how)
    mean = {k: np.asarray(v, np.float64) for k, v in state.loc.items()}
    sd = {k: np.exp(np.asarray(v, np.float64)) for k, v in state.log_scale.items()}
    w, beta = weights_of(mean, store.n_classes)
    basis_sq = sum_to_zero_basis(store.n_classes) ** 2  # W = W_raw H^T: variances add through H^2
    w_sd = np.sqrt(sd["W_raw"] ** 2 @ basis_sq.T)
    beta_sd = np.sqrt(sd["beta_raw"] ** 2 @ basis_sq.T) if fit_intercept else np.zeros(store.n_classes)
    return StreamingSVIResult(w, beta, w_sd, beta_sd, mean, sd, losses, len(losses))
