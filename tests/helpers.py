"""Small helpers the test modules share: writing a dataset to the file formats the CLI reads."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np


def write_npz(path: Path, ds: Any) -> None:
    """``ds`` (a ``MIMLData`` with instance labels) as the npz layout ``read_bag_npz`` reads, bag ids 100+."""
    bag_ids = np.concatenate([np.full(len(b), 100 + i) for i, b in enumerate(ds.bags)])
    labels = np.zeros((len(ds.bags), ds.n_classes), int)
    for i, s in enumerate(ds.label_sets):
        labels[i, s] = 1
    np.savez(
        path,
        features=np.concatenate(ds.bags),
        bag_ids=bag_ids,
        bag_labels=labels,
        instance_labels=np.concatenate(ds.instance_labels),
    )
