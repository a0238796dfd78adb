"""Instance labels given by hand: the file ``orlr-ppl query`` writes, with its ``label`` column filled in.

Format: a CSV file whose header names at least ``bag_id``, ``instance`` and ``label``
(other columns, such as ``query``'s ``score`` and ``class_1``, are read past). One row per
labelled instance:

* ``bag_id``: a bag id of the data, as ``predict`` and ``query`` write it;
* ``instance``: the instance's position in its bag, from 0;
* ``label``: a class name of the data, or empty or ``-1`` for not labelled (yet).

An instance without a row is not labelled. The same instance may appear twice only with the
same label. A label must be in its bag's label set, where the data have label sets: the
model could not give the bag its labels otherwise. For a model with a novel class
(``ORLR(novel_class=True)``), its name (``query`` writes it, ``"novel"``) marks an instance
of none of the named classes, in any bag.
"""

from __future__ import annotations

import csv
from pathlib import Path

import numpy as np

from ..container import MIMLData
from ._text import existing_file, read_text

COLUMNS = ("bag_id", "instance", "label")
UNLABELLED = ("", "-1")


def read_annotations(path: str | Path, data: MIMLData, novel: str | None = None) -> list[np.ndarray]:
    """B arrays (n_b,) of class indices for ``data``'s bags, -1 where the file gives no label.

    ``novel``: the name of a novel-class model's extra class, read as index ``C`` (the data's
    class count) and allowed outside the bag's label set; None: no such class.

    Raises:
        ValueError: naming the file and line, for a missing column, an unknown bag id, an
            instance index outside its bag, an unknown class name, two different labels for
            one instance, or a label outside its bag's label set (naming bag and instance).
    """
    path = existing_file(path)
    rows = list(csv.reader(read_text(path).splitlines()))
    if not rows:
        raise ValueError(f"{path}: empty; write a header with {', '.join(COLUMNS)} and one row per label")
    header = [h.strip() for h in rows[0]]
    missing = [c for c in COLUMNS if c not in header]
    if missing:
        raise ValueError(
            f"{path}, line 1: no {', '.join(missing)} column(s) in the header {header}: an annotation file "
            f"names {', '.join(COLUMNS)} (the file `orlr-ppl query` writes, with labels filled in)"
        )
    col = {c: header.index(c) for c in COLUMNS}
    bag_of = {str(b): k for k, b in enumerate(data.bag_ids)}
    class_of = {str(name): c for c, name in enumerate(data.class_names)}
    if novel is not None and novel in class_of:
        raise ValueError(f"the novel class's name {novel!r} is also a class of the data: rename that class")
    names = list(data.class_names) + ([] if novel is None else [novel])
    if novel is not None:
        class_of[novel] = len(data.class_names)
    labels = [np.full(len(x), -1, np.int64) for x in data.bags]
    first_line: dict[tuple[int, int], int] = {}
    for lineno, row in enumerate(rows[1:], start=2):
        if not any(cell.strip() for cell in row):
            continue
        if len(row) < len(header):
            raise ValueError(f"{path}, line {lineno}: {len(row)} fields, the header has {len(header)}")
        bag_id, inst, label = (row[col[c]].strip() for c in COLUMNS)
        if label in UNLABELLED:
            continue
        if bag_id not in bag_of:
            raise ValueError(f"{path}, line {lineno}: bag_id {bag_id!r} is not a bag of the data")
        b = bag_of[bag_id]
        if not inst.isdigit() or int(inst) >= len(labels[b]):
            raise ValueError(
                f"{path}, line {lineno}: instance {inst!r} of bag {bag_id}: give its position in the bag, "
                f"0 to {len(labels[b]) - 1}"
            )
        i = int(inst)
        if label not in class_of:
            raise ValueError(
                f"{path}, line {lineno}: label {label!r} is not a class of the data ({list(class_of)}); "
                "leave it empty (or -1) for an instance not labelled"
            )
        c = class_of[label]
        if labels[b][i] >= 0 and labels[b][i] != c:
            raise ValueError(
                f"{path}, line {lineno}: bag {bag_id}, instance {i} is labelled "
                f"{names[labels[b][i]]!r} on line {first_line[b, i]} and {label!r} here"
            )
        outside = data.label_sets is not None and c not in np.asarray(data.label_sets[b])
        if outside and label != novel:
            tags = [data.class_names[k] for k in np.asarray(data.label_sets[b])]
            raise ValueError(
                f"{path}, line {lineno}: bag {bag_id}, instance {i} is labelled {label!r}, not in the bag's "
                f"label set {tags}: fix the label (or the bag's labels)"
            )
        labels[b][i] = c
        first_line.setdefault((b, i), lineno)
    return labels
