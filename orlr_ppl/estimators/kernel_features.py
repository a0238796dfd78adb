"""The feature map of a model with one row of weights per mapped feature: a kernel step fitted last.

Shared by ORLR and ``SoftmaxRegression`` (K-SLR). When the map's last step is a
kernel (``RBFDictionary``, or scikit-learn's ``Nystroem``), the steps before it
are fitted with the training instances (``_fit_features``) and the kernel step
afterwards, at a width the model chooses (``_build_kernel_map``: the step's
own, the median heuristic, or a cross-validated one), so that a selection can
refit the kernel step alone on each fold's mapped features. ``feature_map_``
is then the whole fitted map, which every prediction applies.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ..features import fit_bags, make_feature_map, median_gamma, split_kernel, transform_bags
from ..features.maps import KernelStep, join, kernel_step
from ..seeding import seed_of


class KernelFeatures:
    """Mixin: ``coef_`` has one row ("R") per feature the linear model sees: an input feature, a
    dictionary element (``RBFDictionary``), a Nystroem direction, or a column of another map."""

    random_state: int | None
    features: Any
    _optional_arrays = ("row_scale_",)  # folders saved before row_scale_ existed lack it
    _saved_arrays = {"coef_": ("R", "K"), "intercept_": ("K",), "row_scale_": ("R",)}

    def _array_dims(self) -> dict[str, int]:
        dims = super()._array_dims()  # type: ignore[misc]
        fmap = getattr(self, "feature_map_", None)
        width = dims["d"] if fmap is None else fmap.transform(np.zeros((1, dims["d"]))).shape[1]
        dims["R"] = int(width)
        return dims

    def _seed(self) -> int:
        return seed_of(self.random_state)

    def _kernel_spec(self) -> KernelStep | None:
        """The kernel step the ``features`` parameter asks for (unfitted); None without one."""
        return kernel_step(make_feature_map(self.features, self.random_state))

    def _kernel(self) -> KernelStep | None:
        """The fitted kernel step of ``feature_map_``; None without one."""
        return kernel_step(getattr(self, "feature_map_", None))

    def _fit_features(self, feats: list[np.ndarray]) -> list[np.ndarray]:
        """Fit the map's steps before a kernel step (all of it without one); the bags mapped."""
        self.n_features_in_ = feats[0].shape[1]
        before, _ = split_kernel(make_feature_map(self.features, self.random_state))
        self.feature_map_ = before
        return list(feats) if before is None else fit_bags(before, feats)

    def _default_gamma(self, feats: list[np.ndarray]) -> float:
        """The kernel step's own width, or the median heuristic on the mapped training instances."""
        spec = self._kernel_spec()
        gamma = getattr(spec, "gamma", None)
        return median_gamma(np.concatenate(feats), self._seed()) if gamma is None else float(gamma)

    def _build_kernel_map(self, feats: list[np.ndarray], gamma: float) -> list[np.ndarray]:
        """Fit the kernel step at width ``gamma`` on the mapped training bags; their kernel features.

        ``feature_map_`` becomes the whole map, and ``kernel_gamma_`` the width.
        """
        kernel = self._kernel_spec()
        assert kernel is not None
        kernel.set_params(gamma=float(gamma))
        mapped = fit_bags(kernel, feats)
        self.feature_map_ = join(getattr(self, "feature_map_", None), kernel)
        self.kernel_gamma_ = float(gamma)
        return mapped

    def _map_features(self, feats: list[np.ndarray]) -> list[np.ndarray]:
        """Bags through the steps before the kernel to the features the linear model sees."""
        return transform_bags(self._kernel(), feats)
