"""Reader for MIML data in the HJA bag CSV layout: features, bag labels, optional instance labels.

**Bag CSV** (``read_bag_csv``), the layout of the published HJA birdsong
files (``hja_birdsong_*.txt``), read unchanged; comma-separated, one record
per line, surrounding spaces ignored::

    features            one row per instance: bag id, then d numbers
        bag_id,f1,f2        optional header
        7,0.25,1.5
        7,0.5,-2            a bag's instances need not be contiguous
    bag labels          one row per bag: bag id, then zero or more class ids
        bag_id,[labels]     optional header
        7,1,3               class ids: integers >= 0 (HJA: species 1..13)
        8                   a bag with an empty label set
    instance labels     optional; one row per instance, in the order of the
        bag_id,label        features: bag id (must match that row), then
        7,3                 a class id, or -1 for an unlabelled instance
        7,-1                (kept as -1)
    class names         optional; one line per class, no header: id<TAB>name
        1<TAB>BRCR - Brown Creeper

**Headers.** A first row is a header when it has at least two fields and
no non-empty field after the first is a number. It names the features only
when it is as wide as the rows; a header of another width (the published
``bag_id, [segment features]``) just describes the columns, and the
features are named "x0".."x{d-1}".

**Class ids to class indices 0..C-1.** One rule, chosen by what is given:

1. A class-names file (``class_names=``, or else found beside the bag
   labels: ``<prefix>bag_labels.*`` or ``<prefix>labels.*`` has
   ``<prefix>class_names.txt``; ``class_names=False`` looks for none): its
   ids are the classes, numbered in ascending order of id (HJA: species
   1..13 are classes 0..12), so a class no bag has is still a class; a label
   the file does not list is an error. Class names: the file's names.
2. Else, with ``n_classes``: each id is its class index (id k is class k;
   an id outside [0, n_classes) is an error). Class names "0".."C-1".
3. Else: the distinct ids of the bag and instance labels, numbered in
   ascending order; class names are the ids as written ("1", "2", ...).
   Ids 0..C-1 without a gap thus map to themselves; with a gap (only 0 and
   2 used) 2 becomes class 1: pass ``n_classes`` or a names file to keep a
   class that no label uses.

Whatever the rule, ``MIMLData.class_ids`` holds the ids as written, in
class order (class k is id ``class_ids[k]``): nothing is shifted silently.
-1 is never a class: in the instance labels it marks an unlabelled
instance; in a bag's labels it is an error, as is any other negative id.

Bag ids are kept as the strings written; bags are ordered by first
appearance in the features file. Every bag with instances needs exactly one
label row and every label row a bag with instances. Bags with an empty
label set are kept (``MIMLData.validate`` reports them).
"""

from __future__ import annotations

import csv
import io
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

import numpy as np

from .._labels import UNLABELLED
from ..container import MIMLData
from ._text import existing_file, is_number, read_text

__all__ = ["read_bag_csv", "read_class_names"]


def read_bag_csv(
    features: str | Path,
    bag_labels: str | Path,
    instance_labels: str | Path | None = None,
    *,
    n_classes: int | None = None,
    class_names: str | Path | Literal[False] | None = None,
) -> MIMLData:
    """Read a MIML data set in the HJA bag CSV layout (format and class-id rule: the module docstring).

    Args:
        features: one row per instance: bag id, then d numbers.
        bag_labels: one row per bag: bag id, then its class ids.
        instance_labels: optional, one row per instance in the order of
            ``features``: bag id, class id or -1 (unlabelled).
        n_classes: C, making each id its own class index (rule 2); with a
            names file it must equal the file's number of classes.
        class_names: the ``id<TAB>name`` file; None looks for
            ``<prefix>class_names.txt`` beside ``bag_labels``, False for none.

    Returns:
        ``MIMLData`` with B bags of shape (n_b, d) in order of first
        appearance in ``features``, their label sets (class indices),
        ``bag_ids`` (str), ``class_ids`` (the ids as written, in class order),
        ``class_names``, ``feature_names`` from a header as wide as the rows
        (else "x0".."x{d-1}") and, with ``instance_labels``, B int arrays
        (n_b,) of class indices, -1 for unlabelled instances.

    Raises:
        ValueError: a missing file or malformed content, naming the file and,
            where it sits on one line, the line.
    """
    fpath, lpath = existing_file(features), existing_file(bag_labels)
    ipath = None if instance_labels is None else existing_file(instance_labels)
    classes = _class_rule(lpath, class_names, n_classes)
    names, x, ids, flines = _read_features(fpath)
    labels = _read_bag_labels(lpath, classes)
    _match_bags(fpath, lpath, ids, labels)
    inst = None if ipath is None else _read_instance_labels(ipath, fpath, ids, flines, classes)
    class_ids = classes.ids([c for _, labs in labels.values() for c in labs], inst)
    index = {c: k for k, c in enumerate(class_ids)}
    index[UNLABELLED] = UNLABELLED
    try:
        return MIMLData.from_arrays(
            x,
            {bag: [index[c] for c in labs] for bag, (_, labs) in labels.items()},
            bag_ids=np.asarray(ids),
            instance_labels=None if inst is None else np.array([index[c] for c in inst.tolist()]),
            class_names=classes.names_for(class_ids),
            feature_names=names,
            n_classes=len(class_ids) or None,
            class_ids=class_ids or None,
        )
    except ValueError as e:
        files = ", ".join(str(p) for p in (fpath, lpath, ipath, classes.names_path) if p is not None)
        raise ValueError(f"{files}: {e}") from e


def read_class_names(path: str | Path) -> dict[int, str]:
    """A class-names file: one ``id<TAB>name`` line per class, no header -> {id: name}, in file order."""
    path = existing_file(path)
    out: dict[int, str] = {}
    id_line: dict[int, int] = {}
    name_line: dict[str, int] = {}
    for n, text in enumerate(read_text(path).splitlines(), start=1):
        if not text.strip():
            continue
        if "\t" not in text:
            raise ValueError(f"{path}, line {n}: expected 'id<TAB>name', found no tab in {text!r}")
        raw_id, name = (v.strip() for v in text.split("\t", 1))
        try:
            c = int(raw_id)
        except ValueError:
            raise ValueError(f"{path}, line {n}: class id {raw_id!r} is not an integer") from None
        if c < 0:
            raise ValueError(f"{path}, line {n}: class id {c} is negative (-1 marks unlabelled instances)")
        if not name:
            raise ValueError(f"{path}, line {n}: class {c} has an empty name")
        if c in out:
            raise ValueError(f"{path}, line {n}: class id {c} already named on line {id_line[c]}")
        if name in name_line:
            raise ValueError(f"{path}, line {n}: name {name!r} already used on line {name_line[name]}")
        out[c], id_line[c], name_line[name] = name, n, n
    if not out:
        raise ValueError(f"{path}: the file names no classes (expected 'id<TAB>name' lines)")
    return out


@dataclass(frozen=True)
class _ClassRule:
    """Which class ids the files may use and how they become indices (rules 1-3 of the docstring)."""

    names: dict[int, str] | None  # rule 1: the names file's {id: name}
    names_path: Path | None
    n_classes: int | None  # rule 2: ids are indices in [0, n_classes)

    def problem(self, c: int) -> str | None:
        """Why class id ``c`` (>= 0) cannot be read, or None."""
        if self.names is not None and c not in self.names:
            return (
                f"class {c} is not in {self.names_path} (ids {sorted(self.names)}): add it there, "
                "or fix the label"
            )
        if self.names is None and self.n_classes is not None and c >= self.n_classes:
            return (
                f"class {c} is outside [0, {self.n_classes}) (n_classes): with n_classes the ids are the "
                "class indices; leave n_classes out to number the ids in ascending order"
            )
        return None

    def ids(self, bag_ids: list[int], inst: np.ndarray | None) -> list[int]:
        """The C class ids, in class order."""
        if self.names is not None:
            return sorted(self.names)
        if self.n_classes is not None:
            return list(range(self.n_classes))
        seen = set(bag_ids) | (set() if inst is None else set(inst.tolist()))
        return sorted(seen - {UNLABELLED})

    def names_for(self, class_ids: list[int]) -> list[str] | None:
        if self.names is not None:
            return [self.names[c] for c in class_ids]
        if self.n_classes is not None or not class_ids:
            return None  # MIMLData's default names "0".."C-1"
        return [str(c) for c in class_ids]


def _class_rule(
    lpath: Path, class_names: str | Path | Literal[False] | None, n_classes: int | None
) -> _ClassRule:
    npath = _names_file(lpath, class_names)
    if npath is None:
        return _ClassRule(None, None, n_classes)
    names = read_class_names(npath)
    if n_classes is not None and n_classes != len(names):
        raise ValueError(
            f"{npath}: names {len(names)} classes, but n_classes={n_classes}: leave n_classes out, "
            "or pass class_names=False to read without this file"
        )
    return _ClassRule(names, npath, None)


def _names_file(lpath: Path, class_names: str | Path | Literal[False] | None) -> Path | None:
    """The class-names file: given, or ``<prefix>class_names.txt`` beside ``<prefix>[bag_]labels.*``."""
    if class_names is False:
        return None
    if class_names is not None:
        return existing_file(class_names)
    for tag in ("bag_labels", "labels"):
        if tag in lpath.name:
            found = lpath.with_name(lpath.name[: lpath.name.rindex(tag)] + "class_names.txt")
            return found if found.is_file() else None
    return None


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
    # A header names or describes columns: no field after the bag-id column reads as a number
    # (empty fields aside: "bag_id,[labels]," is still a header, "12," a bag with no labels).
    rest = [v for v in first[1:] if v]
    if rest and not any(is_number(v) for v in rest):
        while first and not first[-1]:
            first = first[:-1]
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
    # A header of another width describes the columns ("bag_id, [segment features]"): no names.
    names = None if header is None or len(header) != width else header[1:]
    return names, x, [f[0] for _, f in rows], [line for line, _ in rows]


def _label(path: Path, line: int, j: int, v: str, classes: _ClassRule, unlabelled: bool = False) -> int:
    """Field ``j`` of ``line`` as a class id (-1 too, with ``unlabelled``), checked against ``classes``."""
    try:
        c = int(v)
    except ValueError:
        raise ValueError(f"{path}, line {line}: field {j} {v!r} is not an integer class index") from None
    if unlabelled and c == UNLABELLED:
        return c
    if c < 0:
        fix = (
            f"use {UNLABELLED} for an unlabelled instance"
            if unlabelled
            else f"class ids are >= 0 ({UNLABELLED} marks unlabelled instances in the instance labels)"
        )
        raise ValueError(f"{path}, line {line}: field {j}: class {c} is negative; {fix}")
    problem = classes.problem(c)
    if problem:
        raise ValueError(f"{path}, line {line}: field {j}: {problem}")
    return c


def _read_bag_labels(path: Path, classes: _ClassRule) -> dict[str, tuple[int, list[int]]]:
    """bag id -> (line, class ids as written), in file order."""
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
        labels[bag] = (line, [_label(path, line, j, v, classes) for j, v in enumerate(values, start=2)])
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
    path: Path, fpath: Path, ids: list[str], flines: list[int], classes: _ClassRule
) -> np.ndarray:
    """(n,) class ids as written, -1 unlabelled; row k must name the bag of instance k of the features."""
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
        out[k] = _label(path, line, 2, fields[1], classes, unlabelled=True)
    if len(rows) < len(ids):
        raise ValueError(
            f"{path}: {len(rows)} rows, but {fpath} has {len(ids)} instances (the first without a label is "
            f"on line {flines[len(rows)]} of {fpath})"
        )
    return out
