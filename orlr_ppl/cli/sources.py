"""Where the command line's data come from: a file or folder in a known format, or a named dataset.

``--data PATH`` is read by what it is, never guessed:

* ``*.arff``: a MIML relational ARFF; its Mulan XML label file is ``--xml``,
  or the file beside it with the same stem (``birds.arff`` -> ``birds.xml``);
* a folder holding ``<prefix>_features.txt`` and ``<prefix>_bag_labels.txt``
  (and optionally ``<prefix>_instance_labels.txt`` and
  ``<prefix>_class_names.txt``): the HJA birdsong distribution's layout, as
  published; any one of those files names the same set;
* ``*.npz``: a bag archive (``orlr_ppl.io.read_bag_npz``).

Relative paths are from the current directory. ``--dataset`` names one
instead: ``digits`` (embedded), ``letter-frost`` (the UCI letters file) or
``hja`` (the published folder); their files are looked for where
``shared_data_candidates`` says, and an error lists every path tried.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # the data layer loads on first use, so --help stays fast
    from ..data import MIMLData

DATA_ENV = "ORLR_PPL_DATA"
"""A folder holding ``letter-recognition.data`` and ``hja/``; looked in first."""

HJA_PARTS = ("features", "bag_labels", "instance_labels", "class_names")


def shared_data_candidates(name: str) -> list[Path]:
    """Where a named dataset's file ``name`` may be, in the order tried.

    ``$ORLR_PPL_DATA/name``; the ``shared/data`` folder beside a source
    checkout of the package (``<checkout>/../shared/data/name``); and
    ``../shared/data/name`` from the current directory.
    """
    out = []
    if os.environ.get(DATA_ENV):
        out.append(Path(os.environ[DATA_ENV]).expanduser() / name)
    out.append(Path(__file__).resolve().parents[3] / "shared" / "data" / name)
    out.append(Path.cwd().parent / "shared" / "data" / name)
    return list(dict.fromkeys(p.resolve() for p in out))


def find_shared(name: str, given: str | None, option: str) -> Path:
    """``given`` (checked), else the first existing candidate; the error lists every path tried."""
    if given:
        return existing(given, option)
    tried = shared_data_candidates(name)
    for path in tried:
        if path.exists():
            return path
    listed = ", ".join(str(p) for p in tried)
    raise ValueError(f"cannot find {name}: tried {listed}; pass {option} PATH or set ${DATA_ENV}")


def existing(path: str | Path, what: str) -> Path:
    """``path`` if it exists; else an error naming the absolute path tried."""
    p = Path(path).expanduser()
    if not p.exists():
        raise ValueError(
            f"{what} {path}: no such file or folder (looked for {p.absolute()}; relative paths are "
            "taken from the current directory)"
        )
    return p


def read_data(path: str | Path, xml: str | Path | None = None) -> MIMLData:
    """Read ``path`` by its format (module docstring); a path of no known format is refused, naming them."""
    p = existing(path, "--data")
    if xml is not None and p.suffix.lower() != ".arff":
        raise ValueError(f"--xml goes with an ARFF file; {path} is not one")
    if p.is_dir() or _hja_part(p) is not None:
        return read_hja_files(p)
    suffix = p.suffix.lower()
    if suffix == ".arff":
        from ..data.io import read_miml_arff

        beside = p.with_suffix(".xml")
        label_file = existing(xml, "--xml") if xml is not None else beside if beside.is_file() else None
        return read_miml_arff(p, label_file)
    if suffix == ".npz":
        from ..data.io import read_bag_npz

        return read_bag_npz(p)
    raise ValueError(
        f"{path}: unknown data format. Give a MIML relational ARFF (.arff, with its Mulan .xml beside it "
        "or --xml), a folder (or one file) of the HJA layout <prefix>_features.txt + "
        "<prefix>_bag_labels.txt, or a bag archive (.npz)"
    )


def _hja_part(path: Path) -> tuple[str, str] | None:
    """``(prefix, part)`` if ``path`` is named like one file of the HJA layout."""
    for part in HJA_PARTS:
        if path.stem.endswith("_" + part):
            return path.stem[: -len(part) - 1], part
    return None


def hja_files(path: Path) -> dict[str, Path]:
    """The HJA layout's files named by a folder or by one of them: ``{part: path}`` (two required)."""
    if path.is_dir():
        found = sorted(path.glob("*_features.*"))
        if len(found) != 1:
            names = [f.name for f in found] or "none"
            raise ValueError(
                f"{path}: a data folder needs exactly one <prefix>_features.txt file (found {names})"
            )
        path = found[0]
    prefix, _ = _hja_part(path) or ("", "")
    files = {}
    for part in HJA_PARTS:
        candidates = sorted(path.parent.glob(f"{prefix}_{part}.*"))
        if candidates:
            files[part] = candidates[0]
    for part in ("features", "bag_labels"):
        if part not in files:
            raise ValueError(f"{path}: the HJA layout needs {prefix}_{part}.txt beside it in {path.parent}")
    return files


def read_hja_files(path: Path) -> MIMLData:
    """The files of the HJA layout, as published: every segment, the published bag labels."""
    from ..data.io import read_bag_csv

    files = hja_files(path)
    return read_bag_csv(
        files["features"],
        files["bag_labels"],
        files.get("instance_labels"),
        class_names=files.get("class_names"),
    )


def load_dataset(args: argparse.Namespace, split: str = "train") -> MIMLData:
    """``--data`` as read, or ``--dataset``'s bags, less the ``--drop-features`` (comma-separated names)."""
    data = _read_source(args, split)
    names = [s.strip() for s in (getattr(args, "drop_features", None) or "").split(",") if s.strip()]
    return data.drop_features(names) if names else data


def _read_source(args: argparse.Namespace, split: str) -> MIMLData:
    """``--data`` as read, or ``--dataset``'s bags.

    Digits: ``--n-bags`` bags from the train image pool (``split="train"``) or
    from the disjoint test pool, so a model that ``fit`` trained is never
    scored by ``predict``/``evaluate`` on an image it saw.
    """
    if getattr(args, "data", None) and getattr(args, "dataset", None):
        raise ValueError("give --data or --dataset, not both")
    if getattr(args, "data", None):
        return _hja_protocol(read_data(args.data, getattr(args, "xml", None)), args)
    dataset = getattr(args, "dataset", None)
    if dataset == "digits":
        from ..data.datasets import make_miml_digits

        if args.n_bags < 1:
            raise ValueError(f"--n-bags {args.n_bags}: need at least one bag")
        seed = args.seed + (0 if split == "train" else 1)
        return make_miml_digits(args.n_bags, seed=seed, split=split)
    if dataset == "letter-frost":
        from ..data.datasets import load_letter_frost

        return load_letter_frost(
            find_shared("letter-recognition.data", args.uci_path, "--uci-path"), seed=args.seed
        )
    if dataset == "hja":
        from ..data.datasets import load_hja

        folder = find_shared("hja", args.hja_path, "--hja-path")
        return load_hja(folder, version=args.version or "original", segments=args.segments or "labelled")
    raise ValueError("give --data PATH (an .arff, an HJA folder or an .npz) or --dataset NAME")


def _hja_protocol(data: MIMLData, args: argparse.Namespace) -> MIMLData:
    """``--data``'s bags in the ``--version`` and ``--segments`` asked for (``data.hja.hja_version``).

    Neither asked: every instance as read, and, for files in the HJA layout, a warning line when
    some are unlabelled, since the HJA papers fit the labelled segments only (as ``--dataset hja``).
    """
    version, segments = getattr(args, "version", None), getattr(args, "segments", None)
    if version is None and segments is None:
        path = Path(args.data)
        if not (path.is_dir() or _hja_part(path)):  # unlabelled instances elsewhere are the user's own
            return data
        labels = data.instance_labels
        unlabelled = 0 if labels is None else sum(int((y < 0).sum()) for y in labels)
        if unlabelled:
            print(
                f"warning: {args.data}: {unlabelled} of {data.n_instances} instances are unlabelled (-1) "
                "and are fitted as instances of their bags; --segments labelled keeps the labelled ones "
                "only, as --dataset hja and the HJA papers do",
                file=sys.stderr,
            )
        return data
    from ..data.hja import hja_version

    return hja_version(data, version or "original", segments or "all", f"--data {args.data}")
