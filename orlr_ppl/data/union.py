"""Bags that break the union assumption: what ``MIMLData.validate`` reports.

Under the ORed-logistic (union) model a bag's label set is exactly the set
of its instances' labels. A bag that cannot satisfy that has likelihood
zero, or (seen only with instance labels) contradicts its own annotation.
These bags are reported, never dropped silently.

Unlabelled instances (instance label -1, as in the HJA birdsong data) are
not checked against their bag's set, and each may carry one of the bag's
labels: a bag label that no labelled instance carries is a violation only
when the bag has fewer unlabelled instances than such labels (with none
unlabelled, the plain rule: every bag label needs an instance).
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence
from typing import NamedTuple

import numpy as np

from ..dp.validation import zero_likelihood_reason
from ._labels import UNLABELLED, bag_name


class BagProblem(NamedTuple):
    """One bag that breaks the union assumption.

    Attributes:
        index: the bag's position in the data.
        bag_id: the bag's original id.
        kind: "zero_likelihood" (empty bag, empty label set, or fewer
            instances than labels: impossible whatever the weights),
            "label_without_instance" (bag labels no labelled instance carries,
            more than the bag's unlabelled instances could carry) or
            "instance_label_outside" (an instance label missing from the
            bag's set); the last two are visible only with instance labels.
        message: a sentence naming the bag and what is wrong.
    """

    index: int
    bag_id: Hashable
    kind: str
    message: str


def union_problems(
    bags: Sequence[np.ndarray],
    label_sets: Sequence[list[int]],
    instance_labels: Sequence[np.ndarray] | None,
    bag_ids: Sequence[Hashable],
    leak: bool = False,
    novel: bool = False,
) -> list[BagProblem]:
    """Every union violation, in bag order, one entry per problem.

    Args:
        bags: B arrays (n_b, d); only their lengths matter.
        label_sets: B sorted lists of class indices.
        instance_labels: B int arrays (n_b,), -1 for an unlabelled instance,
            or None (then only zero-likelihood bags can be seen).
        bag_ids: B ids, for the messages.
        leak, novel: the model's relaxations (``ORLR(leak=, novel_class=)``):
            bags they make possible are not "zero_likelihood".
    """
    out = []
    for b, (x, s) in enumerate(zip(bags, label_sets)):
        name = bag_name(b, bag_ids)
        why = zero_likelihood_reason(len(s), len(x), leak, novel)
        if why:
            out.append(BagProblem(b, bag_ids[b], "zero_likelihood", f"bag {name} {why}"))
        if instance_labels is None:
            continue
        y = np.asarray(instance_labels[b])
        present = set(y[y != UNLABELLED].tolist())
        n_unlabelled = int(np.sum(y == UNLABELLED))
        absent = sorted(set(s) - present)
        # Each unlabelled instance carries one label: it can account for one absent label.
        if len(absent) > n_unlabelled:
            message = f"bag {name} has label(s) {absent} that none of its instances carries"
            if n_unlabelled:
                message = (
                    f"bag {name} has label(s) {absent} that none of its labelled instances carries, and only "
                    f"{n_unlabelled} unlabelled instance(s) to carry them"
                )
            out.append(BagProblem(b, bag_ids[b], "label_without_instance", message))
        extra = sorted(present - set(s))
        if extra:
            message = f"bag {name} has instances labelled {extra}, not in its label set {s}"
            out.append(BagProblem(b, bag_ids[b], "instance_label_outside", message))
    return out
