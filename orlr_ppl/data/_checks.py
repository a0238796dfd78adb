"""Checks behind ``MIMLData``'s constructor: features, instance labels, label ranges; each names the bag."""

from __future__ import annotations

from collections.abc import Hashable, Sequence
from typing import Any

import numpy as np

from ._labels import UNLABELLED, bag_name


def check_features(bags: list[np.ndarray], ids: Sequence[Hashable]) -> int:
    """d, after checking that every bag is a finite (n_b, d) array with the same d."""
    d = None
    for b, x in enumerate(bags):
        if x.ndim != 2 or (d is not None and x.shape[1] != d):
            want = "(n_instances, n_features)" if d is None else f"(n_instances, {d})"
            raise ValueError(f"bag {bag_name(b, ids)} has features of shape {x.shape}: expected {want}")
        d = x.shape[1]
        if not np.all(np.isfinite(x)):
            rows = np.flatnonzero(~np.all(np.isfinite(x), axis=1)).tolist()
            raise ValueError(
                f"bag {bag_name(b, ids)} has NaN or infinite features in instance(s) {rows}: "
                "impute or remove them before building MIMLData"
            )
    return int(d)


def instance_arrays(raw: Sequence[Any], bags: list[np.ndarray], ids: Sequence[Hashable]) -> list[np.ndarray]:
    """B int64 arrays (n_b,), after checking there is one int label per instance (ranges: the caller)."""
    if len(raw) != len(bags):
        raise ValueError(f"got {len(bags)} bags but {len(raw)} instance-label arrays")
    out = []
    for b, (x, y) in enumerate(zip(bags, raw)):
        y = np.asarray(y)
        if y.shape != (len(x),) or (y.size and not np.issubdtype(y.dtype, np.integer)):
            raise ValueError(
                f"bag {bag_name(b, ids)} has {len(x)} instances but instance labels "
                f"{y.dtype}{list(y.shape)}: give one int label per instance"
            )
        out.append(y.astype(np.int64))
    return out


def top_label(sets: list[list[int]] | None, inst: list[np.ndarray] | None) -> int:
    """The largest class seen (-1 if none): in the label sets, or without them in the instance labels.

    Instance labels count only without label sets: with them, an instance
    label above every bag label is an error, not a reason for more classes.
    """
    if sets is not None:
        return max((s[-1] for s in sets if s), default=-1)
    return max((int(y.max()) for y in inst or () if y.size), default=-1)


def check_label_ranges(
    sets: list[list[int]] | None, inst: list[np.ndarray] | None, n_classes: int, ids: Sequence[Hashable]
) -> None:
    """Every bag label in ``[0, n_classes)``; every instance label there too, or -1 (unlabelled)."""
    for b, s in enumerate(sets or ()):
        if s and s[-1] >= n_classes:
            raise ValueError(
                f"bag {bag_name(b, ids)} has label {s[-1]} outside [0, {n_classes}): raise n_classes"
            )
    for b, y in enumerate(inst or ()):
        bad = np.unique(y[(y < UNLABELLED) | (y >= n_classes)]).tolist()
        if bad:
            raise ValueError(
                f"bag {bag_name(b, ids)} has instance labels {bad} outside [0, {n_classes}): give class "
                f"indices, or {UNLABELLED} for an unlabelled instance"
            )
