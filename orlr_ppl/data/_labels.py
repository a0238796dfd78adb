"""Grouping instances into bags and encoding labels: the helpers behind ``MIMLData``'s constructors.

Pure functions, shared by the container and the file readers (``io``), so
every way into ``MIMLData`` groups bags and reads labels the same way.
"""

from __future__ import annotations

import warnings
from collections.abc import Hashable, Iterable, Mapping, Sequence
from typing import Any

import numpy as np

from ..dp.validation import parse_label_set

BagLabels = Mapping[Hashable, Iterable[Any]] | Sequence[Iterable[Any]] | np.ndarray
"""Each bag's labels: a mapping bag id -> labels, a sequence of label lists, or a (B, C) 0/1 matrix."""


def bag_name(b: int, ids: Sequence[Hashable]) -> str:
    """How messages name bag ``b``: its index, and its id where that differs."""
    return f"{b}" if ids[b] == b else f"{b} (id {ids[b]!r})"


def label_list(raw: Any, b: int, ids: Sequence[Hashable]) -> list[int]:
    """Bag ``b``'s label set as a sorted list of non-negative class indices."""
    if isinstance(raw, np.ndarray):
        names = raw.dtype.kind in "US"
    elif isinstance(raw, (str, bytes)):
        names = False  # parse_label_set says a set must be an iterable of labels
    else:
        raw = list(raw)  # an iterator would be spent by the check
        names = any(isinstance(v, (str, bytes)) for v in raw)
    if names:
        raise ValueError(
            f"bag {bag_name(b, ids)} has labels {list(raw)[:5]} that are names, not class indices: build "
            "with MIMLData.from_arrays(..., class_names=[...]) to map names to indices"
        )
    arr = parse_label_set(raw, bag_name(b, ids))
    if arr.size and arr[0] < 0:
        raise ValueError(f"bag {bag_name(b, ids)} has a negative label {int(arr[0])}")
    return arr.tolist()


def group_by_bag(ids: np.ndarray) -> tuple[list[Hashable], list[np.ndarray]]:
    """Bag ids in order of first appearance, and each bag's instance rows.

    Args:
        ids: (n,) the bag id of each instance; a bag's rows need not be contiguous.
    Returns:
        ``(order, members)``: B distinct ids (plain Python values) and B int
        arrays of row indices, each in the rows' original order.
    """
    uniq, first, inverse = np.unique(ids, return_index=True, return_inverse=True)
    order = np.argsort(first, kind="stable")
    # A stable sort keeps each bag's instances in file order.
    rows = np.argsort(inverse, kind="stable")
    bounds = np.cumsum(np.bincount(inverse, minlength=len(uniq)))[:-1]
    members = np.split(rows, bounds)
    return [plain(uniq[k]) for k in order], [members[k] for k in order]


def plain(v: Any) -> Hashable:
    """A NumPy scalar as the Python value it holds (ids print and compare as users wrote them)."""
    return v.item() if isinstance(v, np.generic) else v


UNLABELLED = -1
"""The instance label of an unlabelled instance (kept by ``MIMLData``, skipped by the metrics)."""


def encode(
    labels: Iterable[Any], class_names: Sequence[str] | None, what: str, unlabelled: bool = False
) -> np.ndarray:
    """Class indices (int64) from indices or, given ``class_names``, names; ``what`` names them in errors.

    With ``unlabelled`` (instance labels), -1 (or "-1", unless that is a
    class name) stays -1: an unlabelled instance. Ranges are the caller's.
    """
    arr = np.asarray(list(labels) if not isinstance(labels, np.ndarray) else labels)
    if arr.size == 0:
        return arr.astype(np.int64)
    if np.issubdtype(arr.dtype, np.integer):
        return arr.astype(np.int64)
    if class_names is not None:
        index = {str(c): k for k, c in enumerate(class_names)}
        if unlabelled:
            index.setdefault(str(UNLABELLED), UNLABELLED)
        unknown = sorted({str(v) for v in arr.tolist()} - index.keys())
        if unknown:
            raise ValueError(
                f"{what} {unknown[:10]} are not among class_names {list(class_names)[:20]}: pass "
                "class_names holding every label (or give every label as a class index)"
            )
        return np.array([index[str(v)] for v in arr.tolist()], dtype=np.int64)
    if np.issubdtype(arr.dtype, np.floating) and np.all(arr == np.round(arr)):
        return arr.astype(np.int64)
    raise ValueError(
        f"{what} {arr.tolist()[:5]} are not class indices: pass class_names (a list of every class "
        "name) to map names to indices"
    )


def labels_in_order(
    bag_labels: BagLabels, order: list[Hashable], class_names: Sequence[str] | None
) -> list[list[int]]:
    """B sorted label lists, one per bag of ``order`` (a mapping is looked up by bag id)."""
    if isinstance(bag_labels, Mapping):
        missing = [b for b in order if b not in bag_labels]
        if missing:
            raise ValueError(f"bag(s) {missing[:10]} have instances but no entry in bag_labels")
        unused = [b for b in bag_labels if b not in set(order)]
        if unused:
            raise ValueError(f"bag_labels names bag(s) {unused[:10]} that have no instances")
        rows = [bag_labels[b] for b in order]
    else:
        if len(bag_labels) != len(order):
            raise ValueError(f"got {len(order)} bags but {len(bag_labels)} rows of bag_labels")
        arr = np.asarray(bag_labels) if isinstance(bag_labels, np.ndarray) else None
        if arr is not None and arr.ndim == 2:
            if not np.isin(arr, (0, 1)).all():
                raise ValueError("a 2-D bag_labels must be a (B, C) 0/1 matrix")
            return [np.flatnonzero(r).tolist() for r in arr]
        rows = list(bag_labels)
    return [
        sorted(
            set(encode(r if not isinstance(r, str) else [r], class_names, f"labels of bag {b!r}").tolist())
        )
        for b, r in zip(order, rows)
    ]


def warn_unnamed_classes(label_sets: Iterable[Iterable[int]], n_classes: int, where: str) -> None:
    """Warn when ``n_classes``, inferred from the largest label, leaves classes that no bag names.

    A label 7 makes eight classes 0..7; labels given as 1-based ids (as in the HJA files) make an
    empty class 0. Such a class is learnt from no bag, so the user is told rather than left to find
    it in ``coef_``'s shape.
    """
    named = {int(c) for s in label_sets for c in s}
    unnamed = sorted(set(range(n_classes)) - named)
    if unnamed:
        warnings.warn(
            f"{where}: class(es) {unnamed[:10]} appear in no label set, yet n_classes={n_classes} was "
            f"inferred from the largest label, {n_classes - 1}: no bag teaches those classes. If the labels "
            "are 1-based ids, subtract 1 or give them as class names; else pass n_classes to keep them",
            UserWarning,
            stacklevel=4,
        )
