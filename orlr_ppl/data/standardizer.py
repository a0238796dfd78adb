"""``Standardizer``: per-feature centring and scaling of a ``MIMLData``, fitted on training bags only."""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING, NamedTuple

import numpy as np
from sklearn.preprocessing import StandardScaler

if TYPE_CHECKING:  # the container imports this module (for fit_standardizer), not the reverse
    from .container import MIMLData


class Standardizer(NamedTuple):
    """Per-feature centring and scaling, fitted on training bags only.

    Attributes:
        mean: (d,) mean of each feature over the training instances.
        scale: (d,) standard deviation (1 where a feature is constant).
    """

    mean: np.ndarray
    scale: np.ndarray

    @classmethod
    def fit(cls, data: MIMLData) -> Standardizer:
        """Fit on every instance of ``data`` (pass the training bags only).

        scikit-learn's ``StandardScaler`` computes the statistics (and sets the
        scale of a constant, or numerically constant, feature to 1); the two
        arrays are kept, so a saved model needs no pickled scaler.
        """
        scaler = StandardScaler().fit(np.concatenate(data.bags))
        return cls(scaler.mean_, scaler.scale_)

    def transform(self, data: MIMLData) -> MIMLData:
        """``data`` with features ``(x - mean) / scale``."""
        if data.n_features != len(self.mean):
            raise ValueError(
                f"the standardiser was fitted on {len(self.mean)} features, data has {data.n_features}"
            )
        return replace(data, bags=[(x - self.mean) / self.scale for x in data.bags])
