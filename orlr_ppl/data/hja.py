"""The HJA birdsong data (Briggs et al. 2012) in the two versions of Pham, Raich & Fern (JMLR).

``load_hja`` reads the four published files, unchanged, from a folder the
user gives (they are not shipped): 548 recordings (bags), 10,232 segments
(instances) with 38 features, 13 species (classes 0..12 for species ids
1..13, ``class_ids`` keeps the ids) and an instance label per segment, -1
for the 5,234 unlabelled ones. ``PUBLISHED_HJA``: the paper's accuracies.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Literal

import numpy as np

from ._labels import UNLABELLED
from .container import MIMLData
from .io.bag_csv import read_bag_csv

HJA_FILES = {
    "features": "hja_birdsong_features.txt",
    "bag_labels": "hja_birdsong_bag_labels.txt",
    "instance_labels": "hja_birdsong_instance_labels.txt",
    "class_names": "hja_birdsong_class_names.txt",
}
"""The published files, as named in the MIL survey repository (macarbonneau/MILSurvey, Datasets/Birds)."""

HJA_UNION_CHANGED = 62
"""Bags whose published label set is larger than the union of their labelled segments' labels."""

VERSIONS = ("union", "original")
SEGMENTS = ("labelled", "all")


def load_hja(
    folder: str | Path,
    version: Literal["original", "union"] = "original",
    segments: Literal["labelled", "all"] = "labelled",
) -> MIMLData:
    """The HJA birdsong data set, as the JMLR paper uses it.

    Args:
        folder: the folder holding the four published files (``HJA_FILES``).
        version: which bag label sets:

            * ``"original"`` (default, as ``orlr-ppl --dataset hja``): the
              published ones (the paper's "HJA");
            * ``"union"``: each bag's set is the union of its labelled
              segments' species (the paper's "HJA union"). The two differ in
              62 bags (``HJA_UNION_CHANGED``), in each of which the published
              set is larger: a species was heard but none of its segments
              labelled. No bag has a labelled segment outside its published
              set. Mean set size: 2.14 (original), 2.02 (union).
        segments: which instances:

            * ``"labelled"``: only the segments with a species label, as in
              the paper: 548 bags, 4,998 segments (9.1 a bag);
            * ``"all"``: all 10,232 segments, the 5,234 unlabelled ones with
              instance label -1 (ignored by the metrics; see ``union``).

    Returns:
        ``MIMLData``: 548 bags (ids "1".."548") of (n_b, 38) features, 13
        classes named as in the names file ("BRCR - Brown Creeper", ...;
        ``class_ids`` 1..13), features "x0".."x37" (the published header
        names none), and instance labels (class indices, -1 unlabelled).

    With ``version="union"`` no bag breaks the union assumption
    (``validate()`` is empty). With ``"original"``, ``validate()`` reports
    the 62 bags with ``segments="labelled"`` (``label_without_instance``;
    recording "219" also ``zero_likelihood``: 3 species, 2 labelled
    segments), and with ``segments="all"`` the 5 of them with fewer
    unlabelled segments than unexplained species. Fitting refuses only
    impossible bags (``check_fittable``): recording "219" of
    ``("original", "labelled")``, which ``drop_impossible()`` removes.

    A bag without a single labelled segment (the published files have none)
    cannot be kept with ``segments="labelled"`` (it would be empty) nor
    relabelled with ``version="union"`` (its set would be empty): it raises
    a ValueError naming the bags, never dropping them; ``version="original",
    segments="all"`` reads such files as they are.

    Raises:
        ValueError: an argument outside its choices, a missing folder or
            file, or malformed content (naming the file and line).
    """
    if version not in VERSIONS:
        raise ValueError(f"version={version!r}: choose 'union' (the paper's HJA union) or 'original'")
    if segments not in SEGMENTS:
        raise ValueError(f"segments={segments!r}: choose 'labelled' (the paper's 4,998 segments) or 'all'")
    root = Path(folder)
    paths = {part: root / name for part, name in HJA_FILES.items()}
    missing = [p.name for p in paths.values() if not p.is_file()]
    if missing:
        where = "is not a folder" if not root.is_dir() else f"has no {missing}"
        raise ValueError(
            f"{root} {where}: load_hja needs the published HJA birdsong files {list(HJA_FILES.values())} "
            "(MIL survey repository macarbonneau/MILSurvey, Datasets/Birds); pass the folder holding them"
        )
    data = read_bag_csv(
        paths["features"], paths["bag_labels"], paths["instance_labels"], class_names=paths["class_names"]
    )
    return hja_version(data, version, segments, str(paths["instance_labels"]))


def hja_version(
    data: MIMLData,
    version: Literal["union", "original"],
    segments: Literal["labelled", "all"],
    source: str = "the data",
) -> MIMLData:
    """``data`` (every segment, the published sets) in one of ``load_hja``'s versions.

    Args:
        data: bags with instance labels, -1 for unlabelled instances.
        version, segments: see ``load_hja``.
        source: names the data in errors (the instance-labels file).
    """
    if data.instance_labels is None:
        raise ValueError(f"{source}: the HJA versions need instance labels")
    labelled = [y != UNLABELLED for y in data.instance_labels]
    if version == "original" and segments == "all":
        return data
    bare = [data.bag_ids[b] for b, m in enumerate(labelled) if not m.any()]
    if bare:
        raise ValueError(
            f"{source}: bag(s) {bare[:20]} have no labelled segment, so segments='labelled' would leave "
            "them empty and version='union' would give them an empty label set (the published files have "
            "no such bag: are these the published files?). Read them with version='original', "
            "segments='all'"
        )
    sets = data.label_sets
    if version == "union":
        sets = [np.unique(y[m]).tolist() for y, m in zip(data.instance_labels, labelled)]
    if segments == "all":
        return replace(data, label_sets=sets)
    return replace(
        data,
        bags=[x[m] for x, m in zip(data.bags, labelled)],
        label_sets=sets,
        instance_labels=[y[m] for y, m in zip(data.instance_labels, labelled)],
    )


PUBLISHED_HJA = {
    "hja": {
        "inductive": {
            "ORLR-EM": "69.1 ± 4.7",
            "SIM": "61.9",
            "SoftmaxRegression": "74.6",
            "MajorityClass": "12.1",
        },
        "transductive": {"ORLR-EM": "80.8"},
    },
    "hja-union": {
        "inductive": {
            "ORLR-EM": "72.3 ± 3.8",
            "SIM": "62.7",
            "SoftmaxRegression": "74.6",
            "MajorityClass": "12.1",
        },
        "transductive": {"ORLR-EM": "88.0"},
    },
}
"""Instance accuracy (%) on the 4,998 labelled segments, 10-fold (Pham, Raich & Fern, JMLR)."""
