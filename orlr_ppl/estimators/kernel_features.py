"""The feature map before a linear model: the inputs as they are, or RBF kernel features.

Shared by kernel ORLR (``ORLR(kernel=RBF(...))``) and kernel softmax regression
(``SoftmaxRegression(kernel="rbf")``, K-SLR): each fitted model keeps its map's
dictionary (and Nystroem projection) among its saved arrays, so a loaded
model maps new bags exactly as the fit did.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ..data.kernel import RBF, KernelMap, fit_kernel_map
from .base import SCALING_ARRAYS


class _KernelFeatures:
    """Mixin: ``kernel``/``nystroem``/``dictionary_size`` parameters, the fitted map, its saved arrays.

    ``coef_`` has one row ("R") per feature the linear model sees: an input
    feature, a dictionary element, or a Nystroem direction.
    """

    random_state: int | None
    _optional_arrays = ("row_scale_",)  # folders saved before row_scale_ existed lack it

    def _rbf(self) -> RBF | None:
        """The kernel map's settings (None: linear features), from the estimator's parameters."""
        if getattr(self, "kernel", None) is None:
            return None
        return RBF(dictionary_size=self.dictionary_size, nystroem=bool(self.nystroem))  # type: ignore[attr-defined]

    def _nystroem(self) -> bool:
        rbf = self._rbf()
        return rbf is not None and rbf.nystroem

    @property
    def _saved_arrays(self) -> dict[str, tuple[str, ...]]:  # type: ignore[override]
        arrays = {"coef_": ("R", "K"), "intercept_": ("K",), **SCALING_ARRAYS, "row_scale_": ("R",)}
        if self._rbf() is not None:
            arrays["kernel_dictionary_"] = ("m", "d")
            if self._nystroem():
                arrays["kernel_projection_"] = ("m", "R")
        return arrays

    def _array_dims(self) -> dict[str, int]:
        dims = super()._array_dims()  # type: ignore[misc]
        dims["R"] = dims["d"]
        if self._rbf() is not None:
            dims["m"] = int(np.shape(self.kernel_dictionary_)[0])
            proj = getattr(self, "kernel_projection_", None)
            dims["R"] = dims["m"] if proj is None or not self._nystroem() else int(np.shape(proj)[1])
        return dims

    def _seed(self) -> int:
        return 0 if self.random_state is None else int(self.random_state)

    def _kernel_map(self) -> KernelMap:
        proj = self.kernel_projection_ if self._nystroem() else None
        return KernelMap(self.kernel_dictionary_, float(self.kernel_gamma_), proj)

    def _build_kernel_map(self, feats: list[np.ndarray], gamma: float) -> list[np.ndarray]:
        """Fit the kernel map on standardised training bags (or one flat array); their kernel features."""
        rbf = self._rbf()
        assert rbf is not None
        kmap = fit_kernel_map(
            np.concatenate(feats), "rbf", gamma, rbf.dictionary_size, rbf.nystroem, self._seed()
        )
        self.kernel_dictionary_, self.kernel_gamma_ = kmap.dictionary, kmap.gamma
        if kmap.projection is not None:
            self.kernel_projection_ = kmap.projection
        return [kmap.transform(x) for x in feats]

    def _map_features(self, feats: list[np.ndarray]) -> list[np.ndarray]:
        """Standardised bags to the features the linear model sees (kernel features, or as they are)."""
        if self._rbf() is None:
            return feats
        kmap = self._kernel_map()
        return [kmap.transform(x) for x in feats]

    def _check_bags(self, bags: Any) -> list[np.ndarray]:
        return self._map_features(super()._check_bags(bags))  # type: ignore[misc]

    def _check_gamma(self) -> None:
        gamma = getattr(self, "gamma", None)
        if self._rbf() is not None and not (gamma == "auto" or (np.isscalar(gamma) and float(gamma) > 0)):
            raise ValueError(f"gamma={gamma!r}: give a positive RBF width, or 'auto' (chosen by CV)")
