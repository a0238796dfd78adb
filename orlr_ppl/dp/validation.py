"""Validation of ragged bags and label sets, shared by every layer above the DP.

Every check raises a ``ValueError`` that names the bag (and the instances)
and says how to fix it.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

import numpy as np

DEFAULT_MAX_LABELS = 16
"""Largest label set accepted by default: the DP holds ``2**K`` states a bag."""


def check_label_sets(
    label_sets: Sequence[Iterable[int]],
    n_instances: Sequence[int],
    n_classes: int,
    max_labels: int = DEFAULT_MAX_LABELS,
    leak: bool = False,
    novel: bool = False,
) -> list[np.ndarray]:
    """Validate label sets; return each as a sorted unique int array.

    ``leak`` and ``novel`` (the model's relaxations of the union, issue 12)
    make bags with more labels than instances, and with no label, possible.

    Raises:
        ValueError: naming the bag, for an empty bag, an empty label set, a
            non-integer label, a label outside ``[0, n_classes)``, more labels
            than instances (likelihood exactly zero) or more than
            ``max_labels`` labels.
    """
    if len(label_sets) != len(n_instances):
        raise ValueError(
            f"got {len(n_instances)} bags but {len(label_sets)} label sets: "
            "give exactly one label set per bag"
        )
    out, impossible = [], []
    for b, (raw, n_b) in enumerate(zip(label_sets, n_instances)):
        arr = parse_label_set(raw, str(b))
        bad = arr[(arr < 0) | (arr >= n_classes)]
        if bad.size:
            raise ValueError(
                f"bag {b} has label(s) {bad.tolist()} outside [0, {n_classes}): "
                f"use class indices 0..{n_classes - 1} or raise n_classes"
            )
        problem = zero_likelihood_reason(arr.size, n_b, leak, novel)
        if problem:
            impossible.append((b, problem))
        elif arr.size > max_labels:
            raise ValueError(
                f"bag {b} has {arr.size} labels, above max_labels={max_labels} (the DP holds "
                f"2**{arr.size} states for it): raise max_labels if memory allows, or split the bag"
            )
        out.append(arr)
    if impossible:
        raise ValueError(_impossible_message(impossible))
    return out


def parse_label_set(raw: Iterable[int], bag: str) -> np.ndarray:
    """One bag's labels as a sorted unique int64 array (possibly empty); ``bag`` names it in errors."""
    if isinstance(raw, (str, bytes)) or np.ndim(raw) > 1:
        raise ValueError(f"label set of bag {bag} must be a flat iterable of class indices")
    arr = np.asarray(list(raw) if not isinstance(raw, np.ndarray) else raw)
    if arr.size and not (np.issubdtype(arr.dtype, np.integer) or np.issubdtype(arr.dtype, np.bool_)):
        if not (np.issubdtype(arr.dtype, np.floating) and np.all(arr == np.round(arr))):
            raise ValueError(f"bag {bag} has non-integer labels {arr.tolist()}: use class indices")
    return np.unique(arr.astype(np.int64))


def zero_likelihood_reason(
    n_labels: int, n_instances: int, leak: bool = False, novel: bool = False
) -> str | None:
    """Why a bag has likelihood exactly zero under the union model, or None.

    With a ``leak`` a label needs no instance; with a ``novel`` class a bag
    may name no label (all its instances novel).
    """
    if n_instances == 0:
        return "is empty: every bag needs at least one instance"
    if n_labels == 0 and not novel:
        return (
            "has an empty label set: under the ORed-logistic model every bag has at least one label "
            "(a model with a novel class, ORLR(novel_class=True), allows it)"
        )
    if n_labels > n_instances and not leak:
        return (
            f"has {n_labels} labels but only {n_instances} instance(s): its likelihood is exactly "
            "zero under the union model (each instance carries one label; ORLR(leak=...) lets a "
            "label leak without an instance)"
        )
    return None


def check_known_labels(
    instance_labels: Sequence[Iterable[int]],
    n_instances: Sequence[int],
    label_sets: Sequence[np.ndarray],
    novel_class: int | None = None,
) -> list[np.ndarray]:
    """Validate partial instance labels, one (n_b,) int array per bag with -1 for unknown.

    A known label must lie in its bag's label set (or be ``novel_class``):
    the model could not give the bag its labels otherwise.

    Raises:
        ValueError: naming the bag (and instance) for a wrong count, a
            non-integer label, or a known label outside the bag's set.
    """
    if len(instance_labels) != len(n_instances):
        raise ValueError(
            f"got {len(n_instances)} bags but {len(instance_labels)} instance-label arrays: "
            "give one per bag, -1 for each unknown instance"
        )
    out = []
    for b, (raw, n_b, allowed) in enumerate(zip(instance_labels, n_instances, label_sets)):
        arr = np.asarray(raw)
        if arr.shape != (n_b,):
            raise ValueError(f"bag {b} has {n_b} instances but instance labels of shape {arr.shape}")
        if arr.size and not np.issubdtype(arr.dtype, np.integer):
            if not (np.issubdtype(arr.dtype, np.floating) and np.all(arr == np.round(arr))):
                raise ValueError(f"bag {b} has non-integer instance labels: use class indices, -1 unknown")
        arr = arr.astype(np.int64)
        ok = (
            (arr == -1) | np.isin(arr, allowed) | ((arr == novel_class) if novel_class is not None else False)
        )
        if not np.all(ok):
            i = int(np.flatnonzero(~ok)[0])
            extra = f" or the novel class {novel_class}" if novel_class is not None else ""
            raise ValueError(
                f"bag {b}, instance {i} has known label {int(arr[i])}, not in the bag's label set "
                f"{np.asarray(allowed).tolist()}{extra}: fix the label, or give -1 for unknown"
            )
        out.append(arr)
    return out


def _impossible_message(impossible: list[tuple[int, str]], shown: int = 20) -> str:
    fix = "fix their label sets or remove them (MIMLData.drop_impossible() does, and reports which)"
    if len(impossible) == 1:
        b, why = impossible[0]
        return f"bag {b} {why}; remove it or fix its label set"
    listed = "; ".join(f"bag {b} {why}" for b, why in impossible[:shown])
    more = f"; and {len(impossible) - shown} more" if len(impossible) > shown else ""
    ids = [b for b, _ in impossible]
    return f"{len(impossible)} bags are impossible under the union model ({ids}): {listed}{more}. {fix}"


def check_ragged(
    arrays: Sequence[np.ndarray], kind: str, column: str, width: int | None = None
) -> tuple[list[np.ndarray], int]:
    """Validate a ragged list of (n_b, width) float arrays, one per bag.

    Args:
        arrays: one 2-D array per bag.
        kind: what the arrays hold, for messages ("logits", "features").
        column: what a column is, for messages ("classes", "features").
        width: the required column count; default: bag 0's.
    Returns:
        The arrays as floating arrays, and the column count.
    Raises:
        ValueError: naming the bag, for a non-2-D array, an empty bag, a
            column count that differs, or NaN/infinite entries (naming the
            instances).
    """
    if isinstance(arrays, np.ndarray) and arrays.ndim == 2:
        raise ValueError(f"{kind} must be a list of (n_b, {column}) arrays, one per bag, not one 2-D array")
    out = []
    for b, a in enumerate(arrays):
        a = np.asarray(a)
        if a.ndim != 2:
            raise ValueError(f"{kind} of bag {b} have shape {a.shape}: expected (n_instances, {column})")
        if a.shape[0] == 0:
            raise ValueError(f"bag {b} is empty: every bag needs at least one instance; remove it")
        if width is None:
            width = a.shape[1]
        elif a.shape[1] != width:
            raise ValueError(f"bag {b} has {a.shape[1]} {column}, expected {width}")
        if not np.issubdtype(a.dtype, np.floating):
            a = a.astype(np.float64)
        if not np.all(np.isfinite(a)):
            rows = np.flatnonzero(~np.all(np.isfinite(a), axis=1)).tolist()
            raise ValueError(
                f"bag {b} has NaN or infinite {kind} in instance(s) {rows}: impute or remove "
                "them (or the bag) before fitting"
            )
        out.append(a)
    if width is None:
        raise ValueError("no bags given")
    return out, width


def check_logits(logits: Sequence[np.ndarray]) -> tuple[list[np.ndarray], int]:
    """``check_ragged`` for logits: returns the arrays and the class count."""
    return check_ragged(logits, "logits", "classes")


def check_features(bags: Sequence[np.ndarray], n_features: int | None = None) -> list[np.ndarray]:
    """``check_ragged`` for features (n_b, d); ``n_features`` fixes ``d``."""
    return check_ragged(bags, "features", "features", n_features)[0]


def _first(ids: np.ndarray, shown: int = 10) -> str:
    """``ids`` for a message: all of them, or the first ``shown`` and how many more."""
    more = f" and {len(ids) - shown} more" if len(ids) > shown else ""
    return f"{ids[:shown].tolist()}{more}"


def check_flat_bags(
    features: np.ndarray,
    sizes: np.ndarray,
    label_matrix: np.ndarray | None,
    n_classes: int,
    max_labels: int = DEFAULT_MAX_LABELS,
    first_bag: int = 0,
    source: str = "",
) -> tuple[np.ndarray, np.ndarray, np.ndarray | None]:
    """``check_features`` and ``check_label_sets`` for bags held as flat arrays, vectorised.

    Args:
        features: (n_instances, d) instance features, bag after bag.
        sizes: (B,) instance count of each bag, summing to ``n_instances``.
        label_matrix: (B, C) 0/1 multi-hot label sets, or None (unlabelled).
        n_classes: C.
        max_labels: cap on a label set's size (the DP holds ``2**K`` states).
        first_bag: number of the first bag, so that a chunk of a larger
            collection names its bags as the collection does.
        source: what holds the arrays (a file), named in messages.
    Returns:
        ``features`` as a floating array, ``sizes`` as int64, and the label
        matrix as bool (or None).
    Raises:
        ValueError: naming the source and the bags, for a wrong shape, an empty
            bag, NaN or infinite features, an entry other than 0/1, an empty
            label set, more labels than instances (likelihood exactly zero)
            or more than ``max_labels`` labels.
    """
    where = f" in {source}" if source else ""
    features, sizes = np.asarray(features), np.asarray(sizes)
    if features.ndim != 2:
        raise ValueError(f"features{where} have shape {features.shape}: expected (n_instances, n_features)")
    if sizes.ndim != 1 or not (np.issubdtype(sizes.dtype, np.integer) or sizes.size == 0):
        raise ValueError(f"bag sizes{where} must be a 1-D integer array, one instance count per bag")
    sizes = sizes.astype(np.int64)
    if np.any(sizes < 1):
        bad = np.flatnonzero(sizes < 1) + first_bag
        raise ValueError(f"bag(s) {_first(bad)}{where} are empty: every bag needs at least one instance")
    if int(sizes.sum()) != features.shape[0]:
        raise ValueError(
            f"bag sizes{where} add up to {int(sizes.sum())} instances but features have "
            f"{features.shape[0]} rows: give one size per bag, in the order of the rows"
        )
    if not np.issubdtype(features.dtype, np.floating):
        features = features.astype(np.float64)
    finite = np.isfinite(features).all(axis=1)
    if not finite.all():
        rows = np.flatnonzero(~finite)
        bags = np.unique(np.searchsorted(np.cumsum(sizes), rows, side="right")) + first_bag
        raise ValueError(
            f"bag(s) {_first(bags)}{where} have NaN or infinite features (instance rows {_first(rows)}): "
            "impute or remove them (or the bags) before fitting"
        )
    if label_matrix is None:
        return features, sizes, None
    labels = np.asarray(label_matrix)
    if labels.shape != (len(sizes), n_classes):
        raise ValueError(
            f"label matrix{where} has shape {labels.shape}: expected ({len(sizes)}, {n_classes}), "
            "one 0/1 row per bag and one column per class"
        )
    if labels.dtype != np.bool_ and not np.isin(labels, (0, 1)).all():
        bad = np.flatnonzero(~np.isin(labels, (0, 1)).all(axis=1)) + first_bag
        raise ValueError(f"label matrix rows of bag(s) {_first(bad)}{where} hold values other than 0 and 1")
    present = labels.astype(bool)
    counts = present.sum(axis=1)
    empty = "have an empty label set: under the ORed-logistic model every bag has at least one label"
    too_many = "have more labels than instances: their likelihood is exactly zero under the union model"
    for bad, why in ((counts == 0, empty), (counts > sizes, too_many)):
        if bad.any():
            raise ValueError(
                f"bag(s) {_first(np.flatnonzero(bad) + first_bag)}{where} {why}; fix their label sets "
                "or remove them"
            )
    if np.any(counts > max_labels):
        bad = np.flatnonzero(counts > max_labels) + first_bag
        raise ValueError(
            f"bag(s) {_first(bad)}{where} have more than max_labels={max_labels} labels (the DP holds "
            "2**K states for a bag of K labels): raise max_labels if memory allows, or split the bags"
        )
    return features, sizes, present
