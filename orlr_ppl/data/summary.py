"""``DataSummary``: what a ``MIMLData`` holds, as counts and distributions for a report.

``MIMLData.summary()`` builds one (this module knows nothing of the container);
``str()`` of it (``lines()``) is the readable report ``orlr-ppl info`` prints,
and ``to_json()`` the same numbers for machines. It works for data with or
without label sets and instance labels: what is absent is None and reported
as absent.
"""

from __future__ import annotations

from collections.abc import Hashable
from typing import Any, NamedTuple

from ._labels import UNLABELLED

MAX_CLASS_LINES = 40
"""Classes listed one a line in ``lines()``; the rest are counted."""


class Spread(NamedTuple):
    """Smallest, median and largest value of a count over bags."""

    min: int
    median: float
    max: int


class DataSummary(NamedTuple):
    """Counts and distributions of one ``MIMLData``.

    Attributes:
        n_bags, n_instances, n_features, n_classes: B, n, d, C.
        class_names: C names; class_ids: the C ids of the source files.
        instances_per_bag: ``Spread`` of the bag sizes n_b.
        label_set_sizes: label-set size -> number of bags, sizes ascending;
            None without label sets.
        bags_per_class: (C,) number of bags whose set holds each class; None
            without label sets.
        n_unlabelled_instances: instances labelled -1; None without instance labels.
        n_bags_with_problems: bags ``validate()`` reports; None without label sets.
        problems_by_kind: ``BagProblem.kind`` -> number of bags with it
            (empty without label sets).
    """

    n_bags: int
    n_instances: int
    n_features: int
    n_classes: int
    class_names: list[str]
    class_ids: list[Hashable]
    instances_per_bag: Spread
    label_set_sizes: dict[int, int] | None
    bags_per_class: list[int] | None
    n_unlabelled_instances: int | None
    n_bags_with_problems: int | None
    problems_by_kind: dict[str, int]

    def lines(self) -> list[str]:
        """The report, one line a string (no trailing newlines)."""
        spread = self.instances_per_bag
        out = [
            f"{self.n_bags} bags, {self.n_instances} instances, {self.n_features} features, "
            f"{self.n_classes} classes",
            f"instances per bag: min {spread.min}, median {spread.median:g}, max {spread.max}",
        ]
        if self.label_set_sizes is None:
            out.append("label sets: none (bags to predict, not to fit)")
        else:
            sizes = ", ".join(f"{k}: {n}" for k, n in self.label_set_sizes.items())
            out.append(f"label-set sizes (labels: bags): {sizes}")
        out.append("classes:" if self.bags_per_class is None else "classes (bags holding each):")
        out.extend(self._class_lines())
        if self.n_unlabelled_instances is None:
            out.append("instance labels: none")
        else:
            labelled = self.n_instances - self.n_unlabelled_instances
            out.append(
                f"instance labels: {labelled} labelled, {self.n_unlabelled_instances} unlabelled "
                f"({UNLABELLED})"
            )
        if self.n_bags_with_problems is not None:
            kinds = ", ".join(f"{n} {kind}" for kind, n in self.problems_by_kind.items())
            out.append(
                f"union assumption: {self.n_bags_with_problems} bag(s) break it"
                + (f" ({kinds}; validate() lists them)" if kinds else "")
            )
        return out

    def _class_lines(self) -> list[str]:
        ids = [str(c) for c in self.class_ids]
        width = max(len(i) for i in ids)
        rows = []
        for k, (cid, name) in enumerate(zip(ids, self.class_names)):
            # The id is shown only when it says something the name does not (e.g. HJA's 1..13).
            label = name if cid == name else f"{cid:>{width}}  {name}"
            count = "" if self.bags_per_class is None else f": {self.bags_per_class[k]}"
            rows.append(f"  {label}{count}")
        if len(rows) > MAX_CLASS_LINES:
            rows = [*rows[:MAX_CLASS_LINES], f"  ... and {len(rows) - MAX_CLASS_LINES} more classes"]
        return rows

    def __str__(self) -> str:
        return "\n".join(self.lines())

    def to_json(self) -> dict[str, Any]:
        """The fields as JSON-ready values (dict keys as strings)."""
        out = self._asdict()
        out["instances_per_bag"] = self.instances_per_bag._asdict()
        if self.label_set_sizes is not None:
            out["label_set_sizes"] = {str(k): n for k, n in self.label_set_sizes.items()}
        out["class_ids"] = [c if isinstance(c, (int, float, str)) else str(c) for c in self.class_ids]
        return out
