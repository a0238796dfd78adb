"""Reader for MIML data in the HJA bag CSV layout: features, bag labels, optional instance labels.

**Bag CSV** (``read_bag_csv``), the three-file layout of the HJA birdsong
data; comma-separated, one record per line, surrounding spaces ignored::

    features.csv          one row per instance: bag id, then d numbers
        bag_id,f1,f2      optional header (kept as feature names)
        7,0.25,1.5
        7,0.5,-2          a bag's instances need not be contiguous
    bag_labels.csv        one row per bag: bag id, then zero or more labels
        bag_id,[labels]   optional header
        7,0,3             labels are integer class indices
        8                 a bag with an empty label set
    instance_labels.csv   optional; one row per instance, in the order of
        7,3               features.csv: bag id (must match that row), label

A first row is a header when it has at least two fields and none after the
first is a number. Bag ids are kept as the strings written; bags are
ordered by first appearance in the features file. Every bag with instances
needs exactly one label row and every label row a bag with instances. Bags
with an empty label set are kept (``MIMLData.validate`` reports them).
"""

from __future__ import annotations

import csv
import io
from pathlib import Path

import numpy as np

from ..container import MIMLData
from ._text import existing_file, is_number, read_text

__all__ = ["read_bag_csv"]


def read_bag_csv(
    features_csv: str | Path,
    bag_labels_csv: str | Path,
    instance_labels_csv: str | Path | None = None,
    *,
    n_classes: int | None = None,
) -> MIMLData:
    """Read a MIML data set from the HJA three-file CSV layout (format: see the module docstring).

    Args:
        features_csv: one row per instance: bag id, then d numbers.
        bag_labels_csv: one row per bag: bag id, then its class indices.
        instance_labels_csv: optional, one row per instance in the order of
            ``features_csv``: bag id, instance class index.
        n_classes: C; default: largest label + 1 (at least 2).

    Returns:
        ``MIMLData`` with B bags of shape (n_b, d) in order of first
        appearance in ``features_csv``, their label sets, ``bag_ids`` (str),
        ``feature_names`` from the header (else "x0".."x{d-1}") and, with
        ``instance_labels_csv``, B int arrays (n_b,) of instance labels.

    Raises:
        ValueError: a missing file or malformed content, naming the file and,
            where it sits on one line, the line.
    """
    fpath, lpath = existing_file(features_csv), existing_file(bag_labels_csv)
    ipath = None if instance_labels_csv is None else existing_file(instance_labels_csv)
    names, x, ids, flines = _read_features(fpath)
    labels = _read_bag_labels(lpath, n_classes)
    _match_bags(fpath, lpath, ids, labels)
    inst = None if ipath is None else _read_instance_labels(ipath, fpath, ids, flines, n_classes)
    try:
        return MIMLData.from_arrays(
            x,
            {bag: labs for bag, (_, labs) in labels.items()},
            bag_ids=np.asarray(ids),
            instance_labels=inst,
            feature_names=names,
            n_classes=n_classes,
        )
    except ValueError as e:
        files = ", ".join(str(p) for p in (fpath, lpath, ipath) if p is not None)
        raise ValueError(f"{files}: {e}") from e


def _csv_rows(path: Path) -> tuple[list[str] | None, list[tuple[int, list[str]]]]:
    """``(header or None, [(line, fields)])``; blank rows are skipped, fields stripped."""
    rows = []
    with io.StringIO(read_text(path), newline="") as f:
        reader = csv.reader(f)
        prev = 0
        try:
            for fields in reader:
                line, prev = prev + 1, reader.line_num
                fields = [v.strip() for v in fields]
                if any(fields):
                    rows.append((line, fields))
        except csv.Error as e:
            raise ValueError(f"{path}, line {reader.line_num}: {e}") from e
    if not rows:
        raise ValueError(f"{path}: the file holds no rows")
    first = rows[0][1]
    # A header names columns: no field after the bag-id column reads as a number
    if len(first) >= 2 and not any(is_number(v) for v in first[1:]):
        return first, rows[1:]
    return None, rows


def _read_features(path: Path) -> tuple[list[str] | None, np.ndarray, list[str], list[int]]:
    """``(feature names or None, (n, d) features, n bag ids, n line numbers)``."""
    header, rows = _csv_rows(path)
    if not rows:
        raise ValueError(f"{path}: the file holds a header but no instances")
    first_line, first = rows[0]
    width = len(first)
    if width < 2:
        raise ValueError(f"{path}, line {first_line}: a row needs the bag id and at least one feature")
    if header is not None and len(header) != width:
        raise ValueError(f"{path}, line 1: the header has {len(header)} fields, the rows {width}")
    x = np.empty((len(rows), width - 1))
    for r, (line, fields) in enumerate(rows):
        if len(fields) != width:
            raise ValueError(
                f"{path}, line {line}: {len(fields)} fields, expected {width} "
                f"(bag id and {width - 1} features, as on line {first_line})"
            )
        if not fields[0]:
            raise ValueError(f"{path}, line {line}: the bag id is empty")
        try:
            x[r] = [float(v) for v in fields[1:]]
        except ValueError:
            bad = next(j for j, v in enumerate(fields[1:], start=2) if not is_number(v))
            raise ValueError(
                f"{path}, line {line}: field {bad} {fields[bad - 1]!r} is not a number"
            ) from None
    if not np.all(np.isfinite(x)):
        r, j = np.argwhere(~np.isfinite(x))[0]
        line, fields = rows[r]
        raise ValueError(f"{path}, line {line}: field {j + 2} {fields[j + 1]!r} is not a finite number")
    return None if header is None else header[1:], x, [f[0] for _, f in rows], [line for line, _ in rows]


def _label(path: Path, line: int, j: int, v: str, n_classes: int | None) -> int:
    try:
        c = int(v)
    except ValueError:
        raise ValueError(f"{path}, line {line}: field {j} {v!r} is not an integer class index") from None
    if c < 0:
        raise ValueError(f"{path}, line {line}: field {j}: class {c} is negative")
    if n_classes is not None and c >= n_classes:
        raise ValueError(f"{path}, line {line}: field {j}: class {c} is outside [0, {n_classes}) (n_classes)")
    return c


def _read_bag_labels(path: Path, n_classes: int | None) -> dict[str, tuple[int, list[int]]]:
    """bag id -> (line, class indices), in file order."""
    _, rows = _csv_rows(path)
    labels: dict[str, tuple[int, list[int]]] = {}
    for line, fields in rows:
        bag, values = fields[0], fields[1:]
        while values and not values[-1]:  # a trailing comma ("7,") is an empty label list
            values.pop()
        if not bag:
            raise ValueError(f"{path}, line {line}: the bag id is empty")
        if bag in labels:
            raise ValueError(
                f"{path}, line {line}: bag {bag!r} already has a label row on line {labels[bag][0]}"
            )
        labels[bag] = (line, [_label(path, line, j, v, n_classes) for j, v in enumerate(values, start=2)])
    return labels


def _match_bags(fpath: Path, lpath: Path, ids: list[str], labels: dict[str, tuple[int, list[int]]]) -> None:
    order = list(dict.fromkeys(ids))
    unlabelled = [b for b in order if b not in labels]
    if unlabelled:
        raise ValueError(f"{lpath}: bag(s) {unlabelled[:20]} have instances in {fpath} but no label row here")
    present = set(order)
    empty = [f"{b!r} (line {line})" for b, (line, _) in labels.items() if b not in present]
    if empty:
        raise ValueError(f"{lpath}: bag(s) {', '.join(empty[:20])} have no instances in {fpath}")


def _read_instance_labels(
    path: Path, fpath: Path, ids: list[str], flines: list[int], n_classes: int | None
) -> np.ndarray:
    """(n,) instance labels; row k must name the bag of instance k of the features file."""
    _, rows = _csv_rows(path)
    out = np.empty(len(ids), dtype=np.int64)
    for k, (line, fields) in enumerate(rows):
        if k >= len(ids):
            raise ValueError(f"{path}, line {line}: more rows than the {len(ids)} instances of {fpath}")
        if len(fields) != 2:
            raise ValueError(
                f"{path}, line {line}: {len(fields)} fields, expected 2 (bag id, instance label)"
            )
        if fields[0] != ids[k]:
            raise ValueError(
                f"{path}, line {line}: bag id {fields[0]!r}, but instance {k + 1} "
                f"({fpath}, line {flines[k]}) is in bag {ids[k]!r}"
            )
        out[k] = _label(path, line, 2, fields[1], n_classes)
    if len(rows) < len(ids):
        raise ValueError(
            f"{path}: {len(rows)} rows, but {fpath} has {len(ids)} instances (the first without a label is "
            f"on line {flines[len(rows)]} of {fpath})"
        )
    return out
