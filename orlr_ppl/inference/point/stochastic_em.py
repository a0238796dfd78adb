"""Stochastic EM's draws (Pham, Raich & Fern, 6.6.1): a fraction of each bucket's bags, and their weights.

Each iteration draws, in every label-set bucket, the same fraction of its bags
without replacement; weighting the E-step's responsibilities by (real bags in
the bucket) / (real bags drawn) makes ``Q`` an unbiased estimate of the full one.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax, random

from ...model.log_density import EStep
from ...model.numpyro_model import ModelArrays

Array = jax.Array


def sample_sizes(arrays: ModelArrays, bag_fraction: float) -> tuple[int, ...] | None:
    """Per bucket, the bags stochastic EM draws each iteration: ``ceil(bag_fraction * B_k)``.

    None for ``bag_fraction >= 1`` (plain EM). ``B_k`` counts padding bags,
    so the sizes stay in the bucket's canonical shape family.
    """
    if bag_fraction >= 1.0:
        return None
    return tuple(max(1, int(np.ceil(bag_fraction * m.shape[0]))) for _, m, *_ in arrays)


def draw_bags(key: Array, arrays: ModelArrays, sizes: tuple[int, ...]) -> tuple[ModelArrays, Array]:
    """Each bucket's ``sizes[k]`` bags drawn without replacement, and (K,) their weights.

    Real bags are drawn before padding bags (a priority of uniform noise,
    plus 2 for padding), so a draw holds ``min(size, R_k)`` of the bucket's
    ``R_k`` real bags, uniformly; weighting each by ``R_k / min(size, R_k)``
    makes the weighted sum over the draw an unbiased estimate of the sum over
    the bucket.
    """
    drawn, weights = [], []
    for (x, m, y, z), size, k in zip(arrays, sizes, random.split(key, len(arrays))):
        real = jnp.any(m, axis=1)
        n_real = jnp.sum(real).astype(x.dtype)
        if size >= m.shape[0]:  # the whole bucket, every iteration
            drawn.append((x, m, y, z))
            weights.append(jnp.ones((), x.dtype))
            continue
        priority = random.uniform(k, real.shape, x.dtype) + jnp.where(real, 0.0, 2.0).astype(x.dtype)
        _, take = lax.top_k(-priority, size)
        drawn.append(tuple(None if a is None else jnp.asarray(a)[take] for a in (x, m, y, z)))
        weights.append(n_real / jnp.maximum(jnp.minimum(n_real, size), 1.0))
    return tuple(drawn), jnp.stack(weights)


def weighted(e: EStep, weights: Array) -> tuple[Array, EStep]:
    """The log joint estimate ``log p(theta) + sum_k w_k sum_b log p(Y_b | X_b)``, and ``e`` weighted.

    ``Q`` is linear in the responsibilities, so scaling bucket ``k``'s by
    ``w_k`` scales its term of ``Q`` by the same.
    """
    sums = [jnp.sum(ll) for ll in e.log_likelihoods]
    estimate = e.log_joint - sum(sums) + sum(w * s for w, s in zip(weights, sums))
    posteriors = tuple(w * r for w, r in zip(weights, e.posteriors))
    leaked = None if e.leaked is None else tuple(w * lk for w, lk in zip(weights, e.leaked))
    return estimate, e._replace(log_joint=estimate, posteriors=posteriors, leaked=leaked)
