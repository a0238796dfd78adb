"""Synthetic bag collections shaped like HJA birdsong and Letter Frost, for the benchmarks.

NumPy only, so that a benchmark can import them while timing an older checkout of the
package (``PYTHONPATH=<old checkout>``).
"""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np

POEM = Path(__file__).resolve().parents[1] / ".." / "shared" / "data" / "road_not_taken.txt"


def bags_from_shapes(lengths, label_sets_of, n_classes, n_features, rng):
    """Instances whose labels cover each bag's label set exactly."""
    feats, sets, labels = [], [], []
    for n, labs in zip(lengths, label_sets_of):
        y = np.concatenate([labs, rng.choice(labs, n - len(labs))]) if n > len(labs) else np.array(labs)
        rng.shuffle(y)
        centres = np.linspace(-1, 1, n_classes)[y][:, None]
        x = rng.normal(size=(n, n_features)) + centres
        feats.append(np.hstack([x, np.ones((n, 1))]))  # + bias column
        sets.append(np.unique(y))
        labels.append(y)
    return feats, sets, labels


def hja_shaped(rng: np.random.Generator):
    n_bags, n_classes = 548, 13
    lengths = 1 + rng.poisson(8.1, n_bags)
    sizes = np.minimum(1 + rng.poisson(1.1, n_bags), np.minimum(lengths, n_classes))
    sets = [rng.choice(n_classes, k, replace=False) for k in sizes]
    return bags_from_shapes(lengths, sets, n_classes, 38, rng) + (n_classes,)


def letter_shaped(rng: np.random.Generator):
    if POEM.is_file():
        words = re.findall(r"[a-z]+", POEM.read_text().lower().replace("'", "").replace("-", ""))
    else:  # the shapes only: English-like word lengths
        words = ["".join(rng.choice(list("etaoinshrdlu"), int(rng.integers(1, 11)))) for _ in range(144)]
    feats, sets, labels = [], [], []
    for w in words:
        y = np.array([ord(ch) - ord("a") for ch in w])
        feats.append(np.hstack([rng.normal(size=(len(y), 16)) + y[:, None] / 13.0, np.ones((len(y), 1))]))
        sets.append(np.unique(y))
        labels.append(y)
    return feats, sets, labels, 26
