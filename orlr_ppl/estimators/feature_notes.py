"""What a posterior fit says about its features: the heavy-tailed ones and the note a failed
convergence check adds about them, and the constant ones whose weights the checks leave out
(``ORLR``'s diagnostics)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from ..features.maps import HEAVY_TAIL_Z, extreme_z, is_quantile_map

if TYPE_CHECKING:
    from ..inference.checks.diagnostics import Diagnostics


def _labels(names: Sequence[str] | None, d: int) -> list[str]:
    """The d features' labels as the posterior's ``feature`` coordinate reads: their names, else
    ``"0"``, ``"1"``, ...."""
    return [str(j) for j in range(d)] if names is None else [str(n) for n in names]


def heavy_tailed_features(x: np.ndarray, fmap: Any, names: Sequence[str] | None) -> dict[str, float]:
    """Name -> largest |z| of the features of the (n, d) training instances ``x`` that reach ``HEAVY_TAIL_Z``.

    Empty under a quantile map (``features="quantile-normal"``), the remedy ``heavy_tail_note`` offers.
    ``names``: the d feature names, default ``"0"``, ``"1"``, ... (the posterior's labels without names).
    """
    if is_quantile_map(fmap):
        return {}
    z = extreme_z(x)
    names = _labels(names, x.shape[1])
    return {n: float(v) for n, v in zip(names, z, strict=True) if v >= HEAVY_TAIL_Z}


def constant_features(x: np.ndarray, names: Sequence[str] | None) -> list[str]:
    """Names of the features of the (n, d) training instances ``x`` that take one value throughout.

    The likelihood does not depend on their weights, so those weights' posterior is the prior, whatever
    the data; the convergence checks leave them out (``diagnose(constant_features=...)``).
    ``names``: the d feature names, default ``"0"``, ``"1"``, ... (the posterior's labels without names).
    """
    names = _labels(names, x.shape[1])
    flat = np.ptp(x, axis=0) == 0 if len(x) else np.zeros(x.shape[1], bool)
    return [n for n, f in zip(names, flat, strict=True) if f]


def heavy_tail_note(heavy: dict[str, float], diagnostics: Diagnostics) -> str:
    """A sentence for the ``ConvergenceWarning`` when failing weights ``W[feature, class]`` sit on the
    ``heavy`` features (``heavy_tailed_features``); empty when none does.

    Such a weight is set by a few extreme instances, and its chains mix slowly. On HJA union this
    was the worst weight in most folds, and the quantile-normal map made every fold converge
    (REPRODUCTION.md), so the note offers it.
    """
    from ..inference.checks.diagnostics import failing_parameters

    failing = failing_parameters(diagnostics)
    named = {f: z for f, z in heavy.items() if any(p.startswith(f"W[{f}, ") for p in failing)}
    if not named:
        return ""
    listed = ", ".join(f"{f} ({z:.1f} sd)" for f, z in sorted(named.items(), key=lambda fz: -fz[1]))
    return (
        "failing weights W[f, ...] sit on heavy-tailed features f, whose training values reach far "
        f"from their mean: f = {listed}. A few extreme instances set such a weight, and its chains "
        "mix slowly: refit with ORLR(features='quantile-normal') (each feature through its training "
        "quantiles to a Normal), which made such chains converge on HJA birdsong"
    )


# -- fitting back ends: the inference layer's EM, MAP, NUTS and SVI, one call each --
