"""The feature maps an estimator takes by name, and what the estimators need to know of any map.

``features="standard"`` (scikit-learn's ``StandardScaler``: each feature centred
and scaled on the training instances, so that one prior scale means the same
for every feature whatever its units); ``"quantile-normal"`` (each feature
through its training quantiles to a standard Normal, ``QuantileTransformer``,
then centred and scaled: for spiked or heavy-tailed features, where a weight
rests on a few extreme instances and a posterior over it mixes slowly);
``"rbf"`` (standardised, then ``RBFDictionary``: kernel ORLR); None (the raw
features); or any scikit-learn transformer or ``Pipeline`` of them, cloned
and fitted on the training instances.

A map's last step may be a *kernel step* (``RBFDictionary`` or scikit-learn's
``Nystroem``): estimators that fit one row of weights per kernel column fit it
after the steps before it (``split_kernel``), so that its width can be chosen
by cross-validation on the mapped features.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from sklearn.base import TransformerMixin, clone
from sklearn.kernel_approximation import Nystroem
from sklearn.pipeline import Pipeline
from sklearn.preprocessing import QuantileTransformer, StandardScaler

from .rbf import RBFDictionary

FEATURE_MAPS = ("standard", "quantile-normal", "rbf")
"""The maps an estimator's ``features`` takes by name (besides None and a transformer)."""
N_QUANTILES = 1000
"""Levels of the quantile-normal map (scikit-learn's default): its resolution in ranks."""
HEAVY_TAIL_Z = 6.0
"""A feature is *heavy-tailed* when some training value lies this many sds from its mean: a Normal
sample would need about 10^9 instances to reach it, and HJA's features reach 7-21."""

KernelStep = RBFDictionary | Nystroem


def make_feature_map(features: Any, random_state: int | None = None) -> TransformerMixin | None:
    """An unfitted map for an estimator's ``features``: a named one, a clone of a transformer, or None."""
    if features is None:
        return None
    if isinstance(features, str):
        if features == "standard":
            return StandardScaler()
        if features == "quantile-normal":
            # subsample=None: every training instance's quantiles (scikit-learn draws 10,000 by default).
            quantiles = QuantileTransformer(
                n_quantiles=N_QUANTILES, output_distribution="normal", subsample=None, random_state=0
            )
            return Pipeline([("quantile", quantiles), ("standard", StandardScaler())])
        if features == "rbf":
            return Pipeline(
                [("standard", StandardScaler()), ("rbf", RBFDictionary(random_state=random_state))]
            )
    elif hasattr(features, "fit") and hasattr(features, "transform"):
        return clone(features)
    raise ValueError(
        f"features={features!r}: give one of {FEATURE_MAPS}, None (raw features), or a scikit-learn "
        "transformer (e.g. make_pipeline(StandardScaler(), RBFDictionary(gamma=0.5)))"
    )


def kernel_step(fmap: TransformerMixin | None) -> KernelStep | None:
    """The map's last step when it is a kernel (``RBFDictionary`` or ``Nystroem``), else None."""
    last = fmap.steps[-1][1] if isinstance(fmap, Pipeline) else fmap
    return last if isinstance(last, RBFDictionary | Nystroem) else None


def split_kernel(fmap: TransformerMixin | None) -> tuple[TransformerMixin | None, KernelStep | None]:
    """``(the steps before the kernel step, the kernel step)``; ``(fmap, None)`` without a kernel."""
    kernel = kernel_step(fmap)
    if kernel is None:
        return fmap, None
    if not isinstance(fmap, Pipeline):
        return None, kernel
    before = fmap.steps[:-1]
    if not before:
        return None, kernel
    return (before[0][1] if len(before) == 1 else Pipeline(before)), kernel


def join(before: TransformerMixin | None, kernel: KernelStep | None) -> TransformerMixin | None:
    """The whole fitted map from its two fitted parts (``split_kernel``'s inverse)."""
    if kernel is None or before is None:
        return before if kernel is None else kernel
    steps = before.steps if isinstance(before, Pipeline) else [("features", before)]
    return Pipeline([*steps, ("kernel", kernel)])


def steps_of(fmap: TransformerMixin | None) -> list[TransformerMixin]:
    """The map's transformers in order (a Pipeline's steps, nested ones flattened)."""
    if fmap is None:
        return []
    if isinstance(fmap, Pipeline):
        return [t for _, step in fmap.steps for t in steps_of(step) if step != "passthrough"]
    return [fmap]


def linear_scaling(fmap: TransformerMixin | None, n_features: int) -> tuple[np.ndarray, np.ndarray]:
    """``(mean, scale)``, each (d,), when the map is ``x -> (x - mean) / scale`` (a ``StandardScaler``,
    or none: zeros and ones); a ValueError otherwise, as then weights have no raw-unit form."""
    steps = steps_of(fmap)
    if not steps:
        return np.zeros(n_features), np.ones(n_features)
    if len(steps) == 1 and isinstance(steps[0], StandardScaler):
        s = steps[0]
        # What transform does: with_mean=False still computes mean_ (for the variance) but does not
        # subtract it, and with_std=False leaves scale_ None.
        centred = s.with_mean and s.mean_ is not None
        mean = np.asarray(s.mean_, np.float64) if centred else np.zeros(n_features)
        scale = np.ones(n_features) if s.scale_ is None else np.asarray(s.scale_, np.float64)
        return mean, scale
    raise ValueError(
        f"the feature map {fmap!r} is not a centring and scaling, so the weights act on features that "
        "have no form in raw feature units: read them as they are, or fit with features='standard'"
    )


def is_quantile_map(fmap: TransformerMixin | None) -> bool:
    """The map passes features through their quantiles (the remedy for heavy tails)."""
    return any(isinstance(s, QuantileTransformer) for s in steps_of(fmap))


def extreme_z(x: np.ndarray) -> np.ndarray:
    """(d,) per feature of ``x`` (n, d), the largest ``|x - mean| / sd`` (0 for a constant feature)."""
    x = np.asarray(x, np.float64)
    spread = x.std(axis=0)
    worst = np.abs(x - x.mean(axis=0)).max(axis=0)
    return np.divide(worst, spread, out=np.zeros_like(worst), where=spread > 0)


def to_feature_units(
    coef: np.ndarray, intercept: np.ndarray, mean: np.ndarray, scale: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """Weights on standardised features, rewritten for raw ones.

    ``((x - m) / s) @ W + b = x @ (W / s) + (b - (m / s) @ W)``; ``coef`` may
    carry leading draw axes: (..., d, C) with ``intercept`` (..., C).
    """
    raw = coef / scale[:, None]
    return raw, intercept - np.einsum("d,...dc->...c", mean / scale, coef)
