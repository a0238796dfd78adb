"""Datasets: MIML digits (embedded), Letter Frost (UCI file) and HJA birdsong (``hja``), from paths."""

from __future__ import annotations

from pathlib import Path
from typing import Literal, NamedTuple

import numpy as np
from sklearn.datasets import load_digits

from .container import MIMLData
from .hja import PUBLISHED_HJA, hja_version, load_hja

__all__ = [
    "DigitPools",
    "PUBLISHED_HJA",
    "PUBLISHED_LETTER_FROST",
    "hja_version",
    "load_hja",
    "load_letter_frost",
    "make_miml_digits",
    "published_figures",
    "read_uci_letters",
    "split_pools",
]

DIGITS_SPLIT_SEED = 8
"""Seed of the one fixed split of the digit images into train and test pools (never ``seed``)."""
DIGITS_TRAIN_FRACTION = 0.7
"""Share of each digit's images in the train pool; the rest form the test pool."""


class DigitPools(NamedTuple):
    """Disjoint row indices into ``load_digits()`` images: the train and test pools.

    Attributes:
        train: (n_train,) sorted int indices, about ``DIGITS_TRAIN_FRACTION`` of each digit's images.
        test: (n_test,) sorted int indices, the remaining images.
    """

    train: np.ndarray
    test: np.ndarray


def split_pools(
    target: np.ndarray, train_fraction: float = DIGITS_TRAIN_FRACTION, seed: int = DIGITS_SPLIT_SEED
) -> DigitPools:
    """Stratified split of images into disjoint train and test pools.

    Args:
        target: (n,) int class of each image.
        train_fraction: share of each class that goes to the train pool, in (0, 1).
        seed: seed of the per-class permutation.
    Returns:
        ``DigitPools``; every class with at least two images has images in both pools.
    """
    if not 0 < train_fraction < 1:
        raise ValueError(f"train_fraction must be in (0, 1), got {train_fraction}")
    rng = np.random.default_rng(seed)
    train, test = [], []
    for c in np.unique(target):
        members = rng.permutation(np.flatnonzero(target == c))
        # At least one image on each side, so both pools hold every class.
        n_train = min(max(round(train_fraction * len(members)), 1), len(members) - 1)
        train.append(members[:n_train])
        test.append(members[n_train:])
    return DigitPools(np.sort(np.concatenate(train)), np.sort(np.concatenate(test)))


def make_miml_digits(
    n_bags: int = 300,
    min_size: int = 2,
    max_size: int = 8,
    seed: int = 0,
    split: Literal["train", "test", "all"] = "all",
) -> MIMLData:
    """MIML digits: random digit strings built from scikit-learn's digits.

    Each bag is a string of ``min_size``..``max_size`` handwritten digits drawn
    at random (with replacement) from ``sklearn.datasets.load_digits`` (1,797
    8x8 images); each digit is an instance with 64 features scaled to [0, 1],
    and the bag's label set is the set of digits present.

    Returns a ``MIMLData``: ``n_bags`` bags (n_b, 64), their label sets, the
    digits as instance labels (n_b,), 10 classes named "0".."9", ``bag_ids``
    0..n_bags-1.

    ``split`` picks the images drawn from. The images are split once into a
    train pool (70 % of each digit's images, 1,258 images) and a test pool
    (the other 539) by a fixed seeded permutation (``split_pools`` with
    ``DIGITS_SPLIT_SEED``) that does not depend on ``seed``; ``"train"`` and
    ``"test"`` draw only from their pool, so a training set and a test set
    built with them share no image, whatever their seeds. ``"all"`` draws from
    all 1,797 images: two ``"all"`` draws share many images, so do not use
    them as a train/test pair. Each pool holds every digit.
    """
    if not 1 <= min_size <= max_size:
        raise ValueError(f"need 1 <= min_size <= max_size, got {min_size}, {max_size}")
    if split not in ("train", "test", "all"):
        raise ValueError(f"split must be 'train', 'test' or 'all', got {split!r}")
    digits = load_digits()
    x = digits.data / 16.0
    pool = np.arange(len(x)) if split == "all" else getattr(split_pools(digits.target), split)
    rng = np.random.default_rng(seed)
    bags, sets, inst = [], [], []
    for _ in range(n_bags):
        # Indexing a pool keeps split="all" (pool = every row) identical to earlier versions' draws.
        idx = pool[rng.integers(0, len(pool), size=rng.integers(min_size, max_size + 1))]
        bags.append(x[idx])
        inst.append(digits.target[idx].astype(np.int64))
        sets.append(np.unique(inst[-1]).tolist())
    return MIMLData(bags, sets, inst, class_names=[str(c) for c in range(10)], n_classes=10)


UCI_LETTER_ROWS = 20_000
UCI_LETTER_HEADER = "Letter," + ",".join(str(j) for j in range(1, 17))


def read_uci_letters(uci_path: str | Path) -> tuple[np.ndarray, np.ndarray]:
    """The UCI Letter Recognition file: (20000,) capital letters and (20000, 16) int features.

    Accepts the UCI file as distributed (no header) or with the header line
    ``Letter,1,...,16``. Raises a ValueError naming the file (and line) when
    it is missing, has another header, or is not 20,000 rows of a capital
    letter and 16 integers.
    """
    path = Path(uci_path)
    if not path.is_file():
        raise ValueError(
            f"{path}: no such file. Letter Frost needs the UCI Letter Recognition data "
            "(letter-recognition.data, https://archive.ics.uci.edu/dataset/59); pass its path"
        )
    lines = path.read_text().splitlines()
    if lines and lines[0].replace(" ", "").lower().startswith("letter"):
        if lines[0].replace(" ", "") != UCI_LETTER_HEADER:
            raise ValueError(f"{path}, line 1: header {lines[0]!r}, expected {UCI_LETTER_HEADER!r}")
        start = 1
    else:
        start = 0
    rows = [(n, line) for n, line in enumerate(lines[start:], start + 1) if line.strip()]
    if len(rows) != UCI_LETTER_ROWS:
        raise ValueError(
            f"{path}: {len(rows)} data rows, expected the UCI file's {UCI_LETTER_ROWS}: is it "
            "letter-recognition.data, complete?"
        )
    letters = np.empty(len(rows), dtype="<U1")
    feats = np.empty((len(rows), 16), dtype=np.int64)
    for r, (n, line) in enumerate(rows):
        fields = line.split(",")
        if len(fields) != 17 or len(fields[0]) != 1 or not ("A" <= fields[0] <= "Z"):
            raise ValueError(f"{path}, line {n}: expected a capital letter and 16 integers, got {line!r}")
        try:
            feats[r] = [int(v) for v in fields[1:]]
        except ValueError as err:
            raise ValueError(f"{path}, line {n}: non-integer feature in {line!r}") from err
        letters[r] = fields[0]
    return letters, feats


def load_letter_frost(uci_path: str | Path, seed: int = 0) -> MIMLData:
    """Letter Frost (Briggs, Fern, Raich & Lou, 2013): one bag per word of "The Road Not Taken".

    Each of the poem's 144 words (shipped with the package) is a bag; each of
    its letters an instance whose 16 features are a UCI Letter Recognition
    example of that letter, drawn without replacement (seeded), so no UCI
    row appears twice. The bag's label set is its distinct letters; the
    instance labels are the letters. 565 instances, 24 classes (the letters
    the poem uses: no x, no z), class names "a".."y".

    Args:
        uci_path: path of ``letter-recognition.data`` (not shipped; UCI, CC BY 4.0).
        seed: which UCI examples are drawn.
    Returns:
        ``MIMLData`` with ``bag_ids`` "<word index>:<word>".
    """
    from ._frost_words import ROAD_NOT_TAKEN

    letters, feats = read_uci_letters(uci_path)
    alphabet = sorted(set("".join(ROAD_NOT_TAKEN)))
    rng = np.random.default_rng(seed)
    # One shuffled queue of UCI rows per letter; popping from it draws without replacement.
    queues = {a: list(rng.permutation(np.flatnonzero(letters == a.upper()))) for a in alphabet}
    bags, inst = [], []
    for word in ROAD_NOT_TAKEN:
        rows = [queues[a].pop() for a in word]
        bags.append(feats[rows].astype(np.float64))
        inst.append(np.array([alphabet.index(a) for a in word], dtype=np.int64))
    return MIMLData(
        bags=bags,
        label_sets=[sorted(set(y.tolist())) for y in inst],
        instance_labels=inst,
        class_names=alphabet,
        feature_names=[
            "x-box",
            "y-box",
            "width",
            "high",
            "onpix",
            "x-bar",
            "y-bar",
            "x2bar",
            "y2bar",
            "xybar",
            "x2ybr",
            "xy2br",
            "x-ege",
            "xegvy",
            "y-ege",
            "yegvx",
        ],  # fmt: skip
        n_classes=len(alphabet),
        bag_ids=[f"{i}:{w}" for i, w in enumerate(ROAD_NOT_TAKEN)],
    )


PUBLISHED_LETTER_FROST = {
    "inductive": {
        "ORLR-EM": "71.3 ± 7.6",
        "SIM": "58.1 ± 5.7",
        "SoftmaxRegression": "72.7 ± 4.0",
        "MajorityClass": "9.3 ± 2.4",
    },
    "transductive": {"ORLR-EM": "91.5"},
}
"""Instance accuracy (%) on Letter Frost, 10-fold (Pham, Raich & Fern; Briggs et al. 2013)."""


def published_figures(dataset: str | None, protocol: str) -> dict[str, str]:
    """Published instance accuracies for a named dataset ("letter-frost", "hja", "hja-union") and protocol.

    {} for a dataset or protocol without published figures.
    """
    table = {"letter-frost": PUBLISHED_LETTER_FROST, **PUBLISHED_HJA}.get(dataset or "", {})
    return dict(table.get(protocol, {}))
