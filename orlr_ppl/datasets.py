"""Datasets that need no download."""

from __future__ import annotations

from typing import NamedTuple

import numpy as np
from sklearn.datasets import load_digits


class MIMLDataset(NamedTuple):
    """Bags with bag-level label sets; instance labels kept for evaluation.

    Attributes:
        bags: B arrays (n_b, d) of instance features.
        label_sets: B sorted int arrays, the classes present in each bag.
        instance_labels: B int arrays (n_b,), the hidden instance labels.
        n_classes: number of classes.
    """

    bags: list[np.ndarray]
    label_sets: list[np.ndarray]
    instance_labels: list[np.ndarray]
    n_classes: int


def make_miml_digits(n_bags: int = 300, min_size: int = 2, max_size: int = 8, seed: int = 0) -> MIMLDataset:
    """MIML digits: random digit strings built from scikit-learn's digits.

    Each bag is a string of ``min_size``..``max_size`` handwritten digits drawn
    at random (with replacement) from ``sklearn.datasets.load_digits`` (1,797
    8x8 images); each digit is an instance with 64 features scaled to [0, 1],
    and the bag's label set is the set of digits present.
    """
    if not 1 <= min_size <= max_size:
        raise ValueError(f"need 1 <= min_size <= max_size, got {min_size}, {max_size}")
    digits = load_digits()
    x = digits.data / 16.0
    rng = np.random.default_rng(seed)
    bags, sets, inst = [], [], []
    for _ in range(n_bags):
        idx = rng.integers(0, len(x), size=rng.integers(min_size, max_size + 1))
        bags.append(x[idx])
        inst.append(digits.target[idx].astype(np.int64))
        sets.append(np.unique(inst[-1]))
    return MIMLDataset(bags, sets, inst, 10)
