"""The ORed-logistic log posterior over bags laid end to end.

The same objective as ``orlr_model``'s log density (tested equal), computed
on flat instance arrays with the packed DP, which is what EM and MAP use.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from .dp.packing import PackedBags, pack_bags
from .dp.ragged import packed_log_likelihood
from .dp.validation import DEFAULT_MAX_LABELS, check_features, check_label_sets
from .model.numpyro_model import sum_to_zero_basis

Array = jax.Array


class FlatData(NamedTuple):
    """Bags laid end to end, for objectives over all instances at once.

    Attributes:
        features: (n_instances, d) float features.
        packed: the DP packing of the bags' label sets.
        basis: (C, C-1) sum-to-zero basis.
    """

    features: Array
    packed: PackedBags
    basis: Array


def make_flat_data(
    bags: Sequence[np.ndarray],
    label_sets: Sequence[Iterable[int]],
    n_classes: int,
    max_labels: int = DEFAULT_MAX_LABELS,
) -> FlatData:
    """Validate bags and label sets and lay them out for EM and MAP."""
    feats = check_features(bags)
    sets = check_label_sets(label_sets, [len(x) for x in feats], n_classes, max_labels)
    packed = pack_bags([len(x) for x in feats], sets)
    x = jnp.asarray(np.concatenate(feats))
    return FlatData(x, packed, jnp.asarray(sum_to_zero_basis(n_classes), x.dtype))


def log_prior(params: dict[str, Array], prior_scale: float | None, intercept_scale: float | None) -> Array:
    """Normal log-density of the raw parameters; a None scale is flat (adds 0)."""
    total = jnp.zeros((), params["W_raw"].dtype)
    for name, scale in (("W_raw", prior_scale), ("beta_raw", intercept_scale)):
        if scale is not None and name in params:
            z = params[name] / scale
            total = total - 0.5 * jnp.sum(z * z) - z.size * (np.log(scale) + 0.5 * np.log(2 * np.pi))
    return total


def instance_scores(params: dict[str, Array], data: FlatData) -> Array:
    """(n_instances, C) logits ``x W + beta`` from the raw parameters (``beta_raw`` optional)."""
    scores = data.features @ (params["W_raw"] @ data.basis.T)
    return scores + params["beta_raw"] @ data.basis.T if "beta_raw" in params else scores


def log_posterior(
    params: dict[str, Array], data: FlatData, prior_scale: float | None, intercept_scale: float | None
) -> Array:
    """``sum_b log p(Y_b | X_b, theta) + log p(theta)`` (scalar); same as ``orlr_model``'s."""
    ll = packed_log_likelihood(instance_scores(params, data), data.packed)
    return jnp.sum(ll) + log_prior(params, prior_scale, intercept_scale)
