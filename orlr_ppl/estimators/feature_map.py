"""The feature map every estimator fits on its training instances and applies before each prediction.

``standardize`` chooses it: True centres and scales each feature (``feature_mean_``,
``feature_scale_``); ``"quantile-normal"`` first maps each feature through its training quantiles
to a standard Normal (``feature_quantiles_``, ``data.quantile_normal``), then centres and scales;
False leaves the features raw (zeros and ones: the identity). All of it is saved with the model.
Only the centring and scaling is linear, so only then do fitted weights have a form in raw
feature units (``to_feature_units``, through ``raw_unit_scaling``).
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
from sklearn.preprocessing import StandardScaler

from ..data.quantile_normal import (
    HEAVY_TAIL_Z,
    QUANTILE_NORMAL,
    check_quantiles,
    extreme_z,
    fit_quantiles,
    quantile_normal,
)
from .inputs import split_by_bag

if TYPE_CHECKING:  # diagnostics imports ArviZ: loaded only when a posterior is checked
    from ..inference.diagnostics import Diagnostics

SCALING_ARRAYS: dict[str, tuple[str, ...]] = {"feature_mean_": ("d",), "feature_scale_": ("d",)}
"""The standardisation, saved with every model (part of each ``_saved_arrays``).

Optional on load: a folder saved before standardisation existed has neither,
and its model predicts on raw features (zeros and ones: the identity).
"""

QUANTILES_ARRAY = "feature_quantiles_"
"""(Q, d) the training quantiles of the quantile-normal map: saved beside the scaling when used."""


def check_standardize(value: Any) -> None:
    """Raise a ValueError unless ``value`` is True, False or ``"quantile-normal"``: what standardize takes."""
    if not (isinstance(value, bool | np.bool_) or value == QUANTILE_NORMAL):
        raise ValueError(
            f"standardize={value!r}: give True (centre and scale each feature), False (raw features) "
            f"or {QUANTILE_NORMAL!r} (each feature through its training quantiles to a Normal, then "
            "centred and scaled)"
        )


def fit_quantile_map(feats: Sequence[np.ndarray], standardize: Any) -> np.ndarray | None:
    """(Q, d) training quantiles under ``standardize="quantile-normal"``; None otherwise."""
    check_standardize(standardize)
    return fit_quantiles(np.concatenate(feats)) if standardize == QUANTILE_NORMAL else None


def apply_quantile_map(feats: list[np.ndarray], quantiles: np.ndarray | None) -> list[np.ndarray]:
    """The B bags (n_b, d) through ``quantiles`` (all instances at once); untouched for None."""
    if quantiles is None:
        return feats
    return split_by_bag(quantile_normal(np.concatenate(feats), quantiles), feats)


def default_scaling(
    values: dict[str, np.ndarray],
    saved: Collection[str],
    standardize: Any,
    n_features: int,
    param_file: Path,
    fix: str,
) -> dict[str, np.ndarray]:
    """The identity scaling for a folder saved before standardisation (no scaling arrays); else ``{}``.

    Args:
        values: the arrays read from ``param_file``.
        saved: the estimator's ``_saved_arrays``: which of ``SCALING_ARRAYS`` it writes.
    """
    absent = [k for k in SCALING_ARRAYS if k in saved and k not in values]
    if not absent:
        return {}
    if standardize:
        raise ValueError(
            f"{param_file} is incomplete: it has no {absent}, but metadata.json says "
            f"standardize={standardize!r}; {fix}"
        )
    return {"feature_mean_": np.zeros(n_features), "feature_scale_": np.ones(n_features)}


def check_saved_quantiles(
    values: dict[str, np.ndarray], standardize: Any, n_features: int, param_file: Path, fix: str
) -> None:
    """Raise unless ``params.npz`` holds valid quantiles exactly when ``standardize`` asks for them."""
    wanted = standardize == QUANTILE_NORMAL
    if wanted != (QUANTILES_ARRAY in values):
        has = "has" if QUANTILES_ARRAY in values else "has no"
        raise ValueError(
            f"{param_file} {has} {QUANTILES_ARRAY}, but metadata.json says standardize={standardize!r}; {fix}"
        )
    if wanted:
        check_quantiles(values[QUANTILES_ARRAY], n_features, str(param_file))


def fit_scaling(feats: Sequence[np.ndarray], standardize: bool) -> tuple[np.ndarray, np.ndarray]:
    """``(mean, scale)``, each (d,), of every training instance; zeros and ones without ``standardize``.

    scikit-learn's ``StandardScaler`` computes them, as for ``MIMLData.fit_standardizer``:
    a constant (or numerically constant) feature gets scale 1, so it stays
    finite and, being 0 on every training instance, gets no weight.
    """
    d = feats[0].shape[1]
    if not standardize:
        return np.zeros(d), np.ones(d)
    scaler = StandardScaler().fit(np.concatenate(feats).astype(np.float64, copy=False))
    return np.asarray(scaler.mean_, np.float64), np.asarray(scaler.scale_, np.float64)


def apply_scaling(
    feats: list[np.ndarray], mean: np.ndarray | None, scale: np.ndarray | None
) -> list[np.ndarray]:
    """``(x - mean) / scale`` per bag; the identity (zeros and ones, or None) returns the bags untouched."""
    if mean is None or scale is None or (not np.any(mean) and np.all(scale == 1.0)):
        return feats  # bit-for-bit the unstandardised arithmetic (models saved before standardisation)
    return [(x - mean) / scale for x in feats]


def raw_unit_scaling(
    quantiles: np.ndarray | None, mean: np.ndarray, scale: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """``(mean, scale)`` when they are the whole feature map: what ``to_feature_units`` needs.

    Under the quantile-normal map the fitted parameters act on Normal scores, a
    nonlinear function of each raw feature, so they have no raw-unit form: a ValueError.
    """
    if quantiles is not None:
        raise ValueError(
            f"standardize={QUANTILE_NORMAL!r}: the parameters act on each feature's Normal score, a "
            "nonlinear map of it (feature_quantiles_), so they have no form in raw feature units; "
            "read them as they are, or fit with standardize=True"
        )
    return mean, scale


def to_feature_units(
    coef: np.ndarray, intercept: np.ndarray, mean: np.ndarray, scale: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """Weights on standardised features, rewritten for raw ones.

    ``((x - m) / s) @ W + b = x @ (W / s) + (b - (m / s) @ W)``; ``coef`` may
    carry leading draw axes: (..., d, C) with ``intercept`` (..., C).
    """
    raw = coef / scale[:, None]
    return raw, intercept - np.einsum("d,...dc->...c", mean / scale, coef)


def heavy_tailed_features(x: np.ndarray, standardize: Any, names: Sequence[str] | None) -> dict[str, float]:
    """Name -> largest |z| of the features of the (n, d) training instances ``x`` that reach ``HEAVY_TAIL_Z``.

    Empty under ``standardize="quantile-normal"``, which is the remedy ``heavy_tail_note`` offers.
    ``names``: the d feature names, default ``"0"``, ``"1"``, ... (the posterior's labels without names).
    """
    if standardize == QUANTILE_NORMAL:
        return {}
    z = extreme_z(x)
    names = [str(j) for j in range(len(z))] if names is None else [str(n) for n in names]
    return {n: float(v) for n, v in zip(names, z, strict=True) if v >= HEAVY_TAIL_Z}


def heavy_tail_note(heavy: dict[str, float], diagnostics: Diagnostics) -> str:
    """A sentence for the ``ConvergenceWarning`` when failing weights ``W[feature, class]`` sit on the
    ``heavy`` features (``heavy_tailed_features``); empty when none does.

    Such a weight is set by a few extreme instances, and its chains mix slowly. On HJA union this
    was the worst weight in most folds, and the quantile-normal map made every fold converge
    (REPRODUCTION.md), so the note offers it.
    """
    from ..inference.diagnostics import failing_parameters

    failing = failing_parameters(diagnostics)
    named = {f: z for f, z in heavy.items() if any(p.startswith(f"W[{f}, ") for p in failing)}
    if not named:
        return ""
    listed = ", ".join(f"{f} ({z:.1f} sd)" for f, z in sorted(named.items(), key=lambda fz: -fz[1]))
    return (
        "failing weights W[f, ...] sit on heavy-tailed features f, whose training values reach far "
        f"from their mean: f = {listed}. A few extreme instances set such a weight, and its chains "
        "mix slowly: refit with standardize='quantile-normal' (each feature through its training "
        "quantiles to a Normal), which made such chains converge on HJA birdsong"
    )
