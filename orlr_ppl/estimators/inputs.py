"""What users pass to ``fit`` and ``predict``, turned into what the estimators compute with.

``fit(bags, targets)`` or ``fit(MIMLData)``: ``fit_inputs``. Instance labels
(the reference models) are class indices or names; -1 marks an unlabelled
instance, left out of training.

Labels. A bag's labels come as class indices (ints), as class names (strings)
or, for all bags at once, as a (B, C) 0/1 label matrix. The rules, the same
for every estimator:

* a 2-D NumPy array is always a (B, C) 0/1 label matrix (what
  ``MIMLData.label_matrix()`` returns); its C fixes the class count;
* any other sequence holds one label set per bag: lists of ints are class
  indices, lists of strings are class names (the classes are then the sorted
  distinct names, as scikit-learn's ``LabelEncoder`` makes them); mixing the
  two is an error.

Features are checked here (``fit_inputs``); the map fitted on them and
applied before every prediction is ``feature_map``.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Sequence
from typing import Any

import numpy as np

from ..data._labels import warn_unnamed_classes
from ..data.container import MIMLData

NAME, INDEX = "class name", "class index"
"""The two kinds of label (``label_kind``)."""


# -- what fit receives ------------------------------------------------------------


def fit_inputs(
    estimator: Any, data: Sequence[np.ndarray] | MIMLData, targets: Sequence[Any] | None, what: str
) -> tuple[Sequence[np.ndarray], Sequence[Any], int | None]:
    """``(bags, targets, n_classes)`` from ``fit(bags, targets)`` or ``fit(MIMLData)``.

    ``what`` is "label_sets" or "instance_labels". A ``MIMLData`` is first
    checked for bags that break the union assumption (all listed in one error),
    judged under the estimator's relaxations (``leak``, ``novel_class``) if it has them.
    """
    if not isinstance(data, MIMLData):
        if targets is None:
            raise ValueError(f"fit needs (bags, {what}) or a MIMLData")
        return data, targets, estimator.n_classes
    if targets is not None:
        raise ValueError(f"give either a MIMLData or (bags, {what}), not both")
    if what == "label_sets":  # judged under the estimator's relaxations of the union (ORLR's)
        data.check_fittable(
            getattr(estimator, "leak", None) is not None, bool(getattr(estimator, "novel_class", False))
        )
    elif data.instance_labels is None:
        raise ValueError(f"{type(estimator).__name__} trains on instance labels; this MIMLData has none")
    estimator.class_names_ = list(data.class_names)
    estimator.feature_names_ = list(data.feature_names)
    n_classes = data.n_classes if estimator.n_classes is None else estimator.n_classes
    return data.bags, getattr(data, what), n_classes


def infer_n_classes(label_sets: Sequence[Iterable[int]], n_classes: int | None) -> int:
    """``n_classes`` if given, else the largest index label + 1 (at least 2)."""
    if n_classes is not None:
        return int(n_classes)
    top = max((int(max(s)) for s in label_sets if len(list(s))), default=-1)
    if top < 1:
        raise ValueError("cannot infer n_classes from labels: pass n_classes (at least 2)")
    warn_unnamed_classes(label_sets, top + 1, "fit")
    return top + 1


def flat_instances(
    feats: list[np.ndarray], instance_labels: Sequence[np.ndarray]
) -> tuple[np.ndarray, np.ndarray]:
    """(n, d) features and (n,) int labels of all bags, end to end."""
    if len(feats) != len(instance_labels):
        raise ValueError(f"got {len(feats)} bags but {len(instance_labels)} instance-label arrays")
    for b, (x, y) in enumerate(zip(feats, instance_labels)):
        if np.shape(y) != (len(x),):
            raise ValueError(f"bag {b} has {len(x)} instances but instance labels of shape {np.shape(y)}")
    return np.concatenate(feats), np.concatenate(instance_labels)


def shape_of(bags: Sequence[np.ndarray]) -> dict[str, Any]:
    """Training data shape kept in the saved metadata, and each bag's ``bag_digests``."""
    return {
        "n_bags": len(bags),
        "n_instances": int(sum(len(b) for b in bags)),
        "bag_digests": bag_digests(bags),
    }


def bag_digests(bags: Sequence[np.ndarray]) -> list[str]:
    """B hex strings: a 64-bit BLAKE2 digest of each bag's (n_b, d) features as float64.

    Equal bags have equal digests, so a model can tell which bags it was fitted on (``fitted_on``)
    without keeping them; the chance that two different bags share one is about 2**-64.
    """
    out = []
    for x in bags:
        arr = np.ascontiguousarray(x, dtype=np.float64)
        h = hashlib.blake2b(digest_size=8)
        h.update(np.asarray(arr.shape, np.int64).tobytes())
        h.update(arr.tobytes())
        out.append(h.hexdigest())
    return out


def check_instance_labels(y: np.ndarray, n_classes: int) -> None:
    bad = y[(y < 0) | (y >= n_classes)]
    if bad.size:
        raise ValueError(
            f"instance labels {np.unique(bad).tolist()} outside [0, {n_classes}): use class indices "
            f"0..{n_classes - 1} (-1 for an unlabelled instance), or raise n_classes"
        )


# -- label sets ----------------------------------------------------------------


def is_label_matrix(label_sets: Any) -> bool:
    """True for a 2-D NumPy array: always read as a (B, C) 0/1 label matrix."""
    return isinstance(label_sets, np.ndarray) and label_sets.ndim == 2


def matrix_to_sets(matrix: np.ndarray) -> list[list[int]]:
    """Each row's columns holding 1, after checking the matrix holds only 0 and 1."""
    if not np.isin(matrix, (0, 1)).all():
        bad = next(b for b, row in enumerate(matrix) if not np.isin(row, (0, 1)).all())
        raise ValueError(
            f"a 2-D array is read as a (B, C) 0/1 label matrix (one row per bag, one column per class), "
            f"but row {bad} (bag {bad}) holds {matrix[bad].tolist()[:10]}: pass a 0/1 matrix, or pass "
            "label-index lists as a list of lists (e.g. [[0, 2], [1]])"
        )
    return [np.flatnonzero(row).tolist() for row in matrix]


def as_label_lists(label_sets: Iterable[Any]) -> list[list[Any]]:
    """Each bag's labels as a plain list (iterated once: generators are fine)."""
    out = []
    for b, raw in enumerate(label_sets):
        if isinstance(raw, (str, bytes)):
            raise ValueError(
                f"the label set of bag {b} is the string {raw!r}: give a list of labels, e.g. [{raw!r}]"
            )
        if isinstance(raw, np.ndarray) and raw.ndim != 1:
            raise ValueError(f"the label set of bag {b} has shape {raw.shape}: give a flat list of labels")
        try:
            out.append(raw.tolist() if isinstance(raw, np.ndarray) else list(raw))
        except TypeError as err:
            raise ValueError(
                f"the label set of bag {b} is {raw!r}, not a list of labels: give one list per bag, "
                "e.g. [[0], [1, 2]]"
            ) from err
    return out


def label_kind(label_lists: Sequence[Sequence[Any]], what: str = "label sets") -> str:
    """``NAME`` if every label is a string, else ``INDEX``; a mix of both is a ValueError.

    Non-string labels that are not integers are left to the index checks
    (which name the bag).
    """
    first: dict[str, tuple[int, Any]] = {}
    for b, labels in enumerate(label_lists):
        for v in labels:
            first.setdefault(NAME if isinstance(v, str) else INDEX, (b, v))
        if len(first) == 2:
            (bn, vn), (bi, vi) = first[NAME], first[INDEX]
            raise ValueError(
                f"the {what} mix class names and class indices (bag {bn} has {vn!r}, bag {bi} has {vi!r}): "
                "use names for every label, or indices for every label"
            )
    return NAME if NAME in first else INDEX


def class_names_of(label_lists: Sequence[Sequence[str]], n_classes: int | None, what: str) -> list[str]:
    """The sorted distinct names: the classes of a fit on named labels."""
    names = sorted({str(v) for labels in label_lists for v in labels})
    if len(names) < 2:
        raise ValueError(f"the {what} name only the class(es) {names}: a classifier needs at least 2 classes")
    if n_classes is not None and int(n_classes) != len(names):
        raise ValueError(
            f"n_classes={n_classes}, but the {what} name {len(names)} classes {names}: with class names, "
            "leave n_classes=None (the classes are the names seen in training), or build a MIMLData "
            "with class_names to fix the class list"
        )
    return names


def encode_names(label_lists: Sequence[Sequence[str]], class_names: Sequence[str]) -> list[list[int]]:
    """Names to class indices; a name that is no class is a ValueError naming it and its bag."""
    index = {str(c): k for k, c in enumerate(class_names)}
    out = []
    for b, labels in enumerate(label_lists):
        unknown = [v for v in labels if str(v) not in index]
        if unknown:
            raise ValueError(
                f"bag {b} has label {unknown[0]!r}, which is not a class of this model "
                f"(classes: {list(class_names)}): use one of those names, or indices 0..{len(index) - 1}"
            )
        out.append([index[str(v)] for v in labels])
    return out


def fit_label_sets(label_sets: Any, n_classes: int | None) -> tuple[list[Any], int | None, list[str] | None]:
    """``(index label sets, n_classes or None, class names or None)`` for ``fit``.

    Args:
        label_sets: a (B, C) 0/1 label matrix, or one list of labels (indices
            or names) per bag.
        n_classes: the estimator's ``n_classes`` (None: inferred later).
    Returns:
        The label sets as index lists; the class count (a matrix's C, the
        number of names, else ``n_classes``); the names, for named labels.
    """
    if is_label_matrix(label_sets):
        width = label_sets.shape[1]
        if n_classes is not None and int(n_classes) != width:
            raise ValueError(
                f"the label matrix has {width} columns (classes) but n_classes={n_classes}: "
                "give one column per class, or leave n_classes=None"
            )
        return matrix_to_sets(label_sets), width, None
    lists = as_label_lists(label_sets)
    if label_kind(lists) == INDEX:
        return lists, n_classes, None
    names = class_names_of(lists, n_classes, "label sets")
    return encode_names(lists, names), len(names), names


def predict_label_sets(label_sets: Any, n_classes: int, class_names: Sequence[str] | None) -> list[Any]:
    """Index label sets for transductive prediction by a model fitted on ``n_classes`` classes."""
    if is_label_matrix(label_sets):
        if label_sets.shape[1] != n_classes:
            raise ValueError(
                f"the label matrix has {label_sets.shape[1]} columns but the model has {n_classes} "
                "classes: give one column per class"
            )
        return matrix_to_sets(label_sets)
    lists = as_label_lists(label_sets)
    if label_kind(lists) == INDEX:
        return lists
    if class_names is None:
        b = next(b for b, labels in enumerate(lists) if labels)
        raise ValueError(
            f"bag {b} has the class name {lists[b][0]!r}, but this model was fitted on class indices and "
            f"has no class names: pass class indices 0..{n_classes - 1}"
        )
    return encode_names(lists, class_names)


# -- instance labels -------------------------------------------------------------


def _instance_lists(instance_labels: Iterable[Any]) -> list[Any]:
    """Per bag, a numeric array as is (its kind is its dtype's), anything else as a plain list."""
    out = []
    for y in instance_labels:
        if isinstance(y, np.ndarray) and y.dtype.kind in "biuf":
            out.append(y)
        else:
            arr = np.asarray(y, dtype=object)  # object: a list mixing names and ints keeps both kinds
            out.append(arr.tolist() if arr.ndim else [arr.item()])
    return out


def fit_instance_labels(
    instance_labels: Iterable[Any], n_classes: int | None
) -> tuple[list[np.ndarray], int | None, list[str] | None]:
    """``(B int arrays, n_classes or None, class names or None)`` from indices or names per instance."""
    lists = _instance_lists(instance_labels)
    kind = label_kind([y if isinstance(y, list) else y[:1].tolist() for y in lists], "instance labels")
    if kind == INDEX:
        return [index_array(y, b) for b, y in enumerate(lists)], n_classes, None
    names = class_names_of(lists, n_classes, "instance labels")
    return [np.asarray(c, dtype=np.int64) for c in encode_names(lists, names)], len(names), names


def score_instance_labels(
    instance_labels: Iterable[Any], class_names: Sequence[str] | None
) -> list[np.ndarray]:
    """Instance labels to compare with predictions: names mapped through the model's classes."""
    lists = _instance_lists(instance_labels)
    kind = label_kind([y if isinstance(y, list) else y[:1].tolist() for y in lists], "instance labels")
    if kind == INDEX:
        return [index_array(y, b) for b, y in enumerate(lists)]
    if class_names is None:
        raise ValueError(
            "the instance labels are class names, but this model has no class names: pass indices"
        )
    return [np.asarray(c, dtype=np.int64) for c in encode_names(lists, class_names)]


def check_scored_labels(truth: Sequence[np.ndarray], n_outputs: int) -> None:
    """Refuse a true label the model cannot predict: a score against it would be silently low.

    Args:
        truth: B int arrays (n_b,) of class indices, -1 for an unlabelled instance.
        n_outputs: the model's classes, plus one for a novel class.
    """
    for b, y in enumerate(truth):
        bad = y[(y < -1) | (y >= n_outputs)]
        if bad.size:
            raise ValueError(
                f"bag {b} has the instance label {int(bad[0])}, but the model's classes are "
                f"0..{n_outputs - 1}: pass class indices of the fitted model (-1 for unlabelled)"
            )


def index_array(y: Any, b: int) -> np.ndarray:
    """Bag ``b``'s instance labels as int64, refusing non-integer values (no silent truncation)."""
    arr = np.asarray(y)
    if arr.size == 0 or arr.dtype.kind in "biu":
        return arr.astype(np.int64)
    if arr.dtype.kind == "f" and np.all(arr == np.round(arr)):
        return arr.astype(np.int64)
    raise ValueError(
        f"bag {b} has non-integer instance labels {arr.ravel().tolist()[:5]}: use class indices or names"
    )


def split_by_bag(flat: np.ndarray, feats: Sequence[np.ndarray], axis: int = 0) -> list[np.ndarray]:
    """Cut an array laid out over all bags' instances (length n on ``axis``) back into B per-bag arrays."""
    return np.split(flat, np.cumsum([len(x) for x in feats])[:-1], axis=axis)
