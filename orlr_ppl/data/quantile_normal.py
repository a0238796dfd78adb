"""The quantile-normal feature map: each feature through its training quantiles to a standard Normal.

For features whose standardised values are spiked or heavy-tailed (HJA's x6: a fifth of its values
exactly 0, z-scores from -7 to 8), where a weight comes to rest on a few extreme instances and a
posterior over it mixes slowly. The map is monotone in each feature: it keeps the order of the
instances along a feature and discards its spacing.

Fit (``fit_quantiles``): ``Q = min(n_quantiles, n)`` levels ``r_k = k / (Q - 1)``, and per feature
the training percentiles ``q_k = percentile(x, 100 r_k)`` (linear interpolation between order
statistics).

Map (``quantile_normal``): ``u(x)`` is the level of ``x`` by linear interpolation of ``r`` in ``q``,
averaged over an ascending and a descending pass, so a value repeated over many quantiles (a spike)
goes to the middle of its levels rather than one end; ``x`` within ``1e-7`` of the training range's
ends or beyond it gets ``u = 0`` or ``1``; then ``z = Phi^{-1}(u)``, clipped to ``Phi^{-1}(1e-7 - eps)
= -5.2`` and its mirror. So unseen extremes stay finite. A spike *at* an end of the range goes
to the clip with its end, not to the middle of its levels (HJA union's x8 has a quarter of its
values at its minimum, 0: they all map to -5.2).

This is scikit-learn's ``QuantileTransformer(output_distribution="normal")`` without its subsampling
(it draws 10,000 training instances when there are more); up to 10,000 instances the two agree bit
for bit. Only the (Q, d) quantiles are kept, so a saved model needs no pickled transformer.
"""

from __future__ import annotations

import numpy as np
from scipy import special, stats

QUANTILE_NORMAL = "quantile-normal"
"""The ``standardize`` value that selects this map (before the usual centring and scaling)."""

N_QUANTILES = 1000
"""Levels kept per feature (scikit-learn's default): the map's resolution in ranks."""

_BOUND = 1e-7  # scikit-learn's BOUNDS_THRESHOLD: how close to the training range counts as its end
_CLIP_LOW = float(stats.norm.ppf(_BOUND - np.spacing(1)))
_CLIP_HIGH = float(stats.norm.ppf(1.0 - (_BOUND - np.spacing(1))))


HEAVY_TAIL_Z = 6.0
"""A feature is *heavy-tailed* when some training value lies this many sds from its mean: a Normal
sample would need about 10^9 instances to reach it, and HJA's features reach 7-21."""


def extreme_z(x: np.ndarray) -> np.ndarray:
    """(d,) per feature of ``x`` (n, d), the largest ``|x - mean| / sd`` (0 for a constant feature)."""
    x = np.asarray(x, np.float64)
    spread = x.std(axis=0)
    worst = np.abs(x - x.mean(axis=0)).max(axis=0)
    return np.divide(worst, spread, out=np.zeros_like(worst), where=spread > 0)


def fit_quantiles(x: np.ndarray, n_quantiles: int = N_QUANTILES) -> np.ndarray:
    """(Q, d) training quantiles of each feature, ``Q = min(n_quantiles, n)`` evenly spaced levels.

    Args:
        x: (n, d) training instances, finite, ``n >= 2``.
        n_quantiles: levels kept at most, at least 2.
    Returns:
        (Q, d) float64, non-decreasing down each column.
    """
    x = np.asarray(x, np.float64)
    if x.ndim != 2 or len(x) < 2:
        raise ValueError(
            f"the quantile-normal map needs at least 2 training instances, got {len(x)}: "
            "fit on more instances, or standardise instead (standardize=True)"
        )
    if n_quantiles < 2:
        raise ValueError(f"n_quantiles={n_quantiles}: give at least 2")
    levels = np.linspace(0.0, 1.0, min(n_quantiles, len(x)))
    # Interpolated percentiles can step down by a rounding error; np.interp needs them sorted.
    return np.maximum.accumulate(np.percentile(x, levels * 100.0, axis=0), axis=0)


def quantile_normal(x: np.ndarray, quantiles: np.ndarray) -> np.ndarray:
    """(n, d) the instances mapped through ``quantiles`` to standard Normal scores, in [-5.2, 5.2].

    Args:
        x: (n, d) instances (any, training or new).
        quantiles: (Q, d) from ``fit_quantiles``.
    Returns:
        (n, d) float64.
    """
    x = np.asarray(x, np.float64)
    levels = np.linspace(0.0, 1.0, len(quantiles))
    u = np.empty_like(x)
    for j in range(x.shape[1]):  # per feature: d is small, and np.interp takes one column at a time
        col, q = x[:, j], quantiles[:, j]
        u[:, j] = 0.5 * (np.interp(col, q, levels) - np.interp(-col, -q[::-1], -levels[::-1]))
        u[col + _BOUND > q[-1], j] = 1.0
        u[col - _BOUND < q[0], j] = 0.0  # after the top: a constant feature maps to the bottom, as sklearn's
    # ndtri is what stats.norm.ppf evaluates, without its per-call checks (10 times faster here).
    return np.clip(special.ndtri(u), _CLIP_LOW, _CLIP_HIGH)


def check_quantiles(quantiles: np.ndarray, n_features: int, where: str) -> None:
    """Raise a ValueError naming ``where`` unless ``quantiles`` is (Q >= 2, n_features), finite, sorted."""
    q = np.asarray(quantiles)
    if q.ndim != 2 or q.shape[0] < 2 or q.shape[1] != n_features:
        raise ValueError(
            f"{where}: feature_quantiles_ has shape {q.shape}, not (Q >= 2, {n_features}); "
            "re-fit and save the model"
        )
    if not np.all(np.isfinite(q)) or np.any(np.diff(q, axis=0) < 0):
        raise ValueError(
            f"{where}: feature_quantiles_ is not finite and non-decreasing down each feature; "
            "re-fit and save the model"
        )
