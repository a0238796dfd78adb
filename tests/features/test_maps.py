"""The feature maps' raw-unit form: ``linear_scaling`` says exactly what ``transform`` does."""

from __future__ import annotations

import numpy as np
import pytest
from sklearn.preprocessing import QuantileTransformer, StandardScaler

from orlr_ppl.features.maps import linear_scaling


@pytest.mark.parametrize("with_mean", [True, False])
@pytest.mark.parametrize("with_std", [True, False])
def test_linear_scaling_is_the_transform(with_mean, with_std):
    """``(x - mean) / scale`` with the returned pair equals the scaler's own transform, for every
    switch: ``with_mean=False`` computes ``mean_`` (for the variance) but never subtracts it."""
    x = np.random.default_rng(0).normal(5.0, 3.0, size=(50, 4))  # far from zero mean: a wrong shift shows
    scaler = StandardScaler(with_mean=with_mean, with_std=with_std).fit(x)
    mean, scale = linear_scaling(scaler, 4)
    np.testing.assert_allclose((x - mean) / scale, scaler.transform(x), rtol=1e-12)


def test_no_map_is_the_identity_and_other_maps_are_refused():
    mean, scale = linear_scaling(None, 3)
    assert mean.tolist() == [0.0] * 3 and scale.tolist() == [1.0] * 3
    with pytest.raises(ValueError, match="not a centring and scaling"):
        linear_scaling(QuantileTransformer(n_quantiles=3).fit(np.eye(3)), 3)
