"""The one adapter between instance-level transformers and bags: fit on every instance, map per bag."""

from __future__ import annotations

import warnings
from collections.abc import Sequence

import numpy as np
from sklearn.base import TransformerMixin


def split_by_bag(flat: np.ndarray, bags: Sequence[np.ndarray]) -> list[np.ndarray]:
    """``flat`` (sum n_b, ...) cut back into the bags' lengths, in order."""
    return np.split(flat, np.cumsum([len(x) for x in bags])[:-1])


def fit_bags(transformer: TransformerMixin, bags: Sequence[np.ndarray]) -> list[np.ndarray]:
    """Fit ``transformer`` on every instance of the B bags (n_b, d); the bags mapped, (n_b, d')."""
    with warnings.catch_warnings():
        # A quantile map of fewer instances than levels uses one level per instance, as asked for.
        warnings.filterwarnings("ignore", message="n_quantiles .* is greater than the total number")
        flat = transformer.fit_transform(np.concatenate(bags))
    return split_by_bag(np.asarray(flat), bags)


def transform_bags(transformer: TransformerMixin | None, bags: Sequence[np.ndarray]) -> list[np.ndarray]:
    """The B bags (n_b, d) through a fitted ``transformer``, all instances at once; as they are for None."""
    if transformer is None or not len(bags):
        return list(bags)
    return split_by_bag(np.asarray(transformer.transform(np.concatenate(bags))), bags)
