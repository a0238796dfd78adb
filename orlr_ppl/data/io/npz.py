"""Reader for MIML bags in one NumPy ``.npz`` archive (the command line's data files).

**Bag archive** (``read_bag_npz``), written for instance with
``np.savez(path, features=x, bag_ids=ids, bag_labels=y, instance_labels=z)``
and read without pickle::

    features          (n, d) numbers  one row per instance
    bag_ids           (n,)   int/str  the bag of each instance; a bag's rows
                                      need not be contiguous
    bag_labels        (B, C) 0/1      optional: row b is the label set of the
                                      b-th bag in order of first appearance
    instance_labels   (n,)   int      optional: hidden instance labels, in
                                      [0, C) or -1 (unlabelled), for
                                      evaluation only

Bags are taken in order of first appearance in ``bag_ids``, whose values
become the bags' ids. Without ``bag_labels`` the bags have no label sets
(``label_sets is None``): enough to predict, not to fit.
"""

from __future__ import annotations

import zipfile
from pathlib import Path

import numpy as np

from ..container import MIMLData
from ._text import existing_file

__all__ = ["read_bag_npz"]

REQUIRED = ("features", "bag_ids")
OPTIONAL = ("bag_labels", "instance_labels")


def read_bag_npz(path: str | Path) -> MIMLData:
    """Read a bag archive (format: see the module docstring).

    Args:
        path: the ``.npz`` file.

    Returns:
        ``MIMLData`` with B bags of shape (n_b, d) in order of first
        appearance in ``bag_ids`` (``bag_ids`` = those values), C =
        ``bag_labels.shape[1]`` classes and their label sets (None without
        ``bag_labels``), and B int arrays (n_b,) of instance labels (None
        without ``instance_labels``).

    Raises:
        ValueError: a missing or unreadable file, a missing array, or an
            array of the wrong shape or values, naming the file and the array.
    """
    p = existing_file(path)
    arrays = _load(p)
    for key in REQUIRED:
        if key not in arrays:
            raise ValueError(
                f"{p}: missing array '{key}' (a bag archive holds 'features' (n, d) and 'bag_ids' (n,); "
                f"it has {sorted(arrays)})"
            )
    x = _features(p, arrays["features"])
    ids = arrays["bag_ids"]
    if ids.shape != (len(x),):
        raise ValueError(
            f"{p}: array 'bag_ids' has shape {ids.shape}, expected ({len(x)},): "
            "one bag id per row of 'features''"
        )
    y = None if "bag_labels" not in arrays else _bag_labels(p, arrays["bag_labels"], len(np.unique(ids)))
    n_classes = None if y is None else y.shape[1]
    inst = None if "instance_labels" not in arrays else _instance_labels(p, arrays["instance_labels"], len(x))
    if inst is not None and n_classes is not None and inst.size and inst.max() >= n_classes:
        raise ValueError(
            f"{p}: array 'instance_labels' holds class {int(inst.max())}, outside the {n_classes} classes "
            "of 'bag_labels' (its columns)"
        )
    try:
        return MIMLData.from_arrays(x, y, bag_ids=ids, instance_labels=inst, n_classes=n_classes)
    except ValueError as e:  # the arrays passed every check above: say which file still broke
        raise ValueError(f"{p}: {e}") from e


def _load(path: Path) -> dict[str, np.ndarray]:
    """Every array of the archive, read without pickle; errors name the file (and the array)."""
    try:
        archive = np.load(path, allow_pickle=False)
    except (OSError, ValueError, EOFError, zipfile.BadZipFile) as err:
        raise ValueError(f"{path}: not a readable .npz archive ({err})") from err
    if not isinstance(archive, np.lib.npyio.NpzFile):
        # np.load also reads a lone .npy array: it has no names to find the arrays by
        raise ValueError(
            f"{path}: not a readable .npz archive (it holds one unnamed array): write the arrays by name, "
            "np.savez(path, features=..., bag_ids=...)"
        )
    arrays = {}
    with archive:
        for key in archive.files:
            try:
                arrays[key] = np.asarray(archive[key])
            except ValueError as err:  # object arrays need pickle, which is never loaded
                raise ValueError(
                    f"{path}: array '{key}' is not a readable array ({err}); store plain numbers or "
                    "strings, not Python objects"
                ) from err
            except (OSError, EOFError, zipfile.BadZipFile) as err:
                raise ValueError(f"{path}: not a readable .npz archive (array '{key}': {err})") from err
    return arrays


def _features(path: Path, x: np.ndarray) -> np.ndarray:
    """(n, d) float64 features, n >= 1, all finite."""
    if x.ndim != 2:
        raise ValueError(f"{path}: array 'features' has shape {x.shape}, expected (n_instances, n_features)")
    if not (np.issubdtype(x.dtype, np.number) or np.issubdtype(x.dtype, np.bool_)):
        raise ValueError(f"{path}: array 'features' holds {x.dtype} values, expected numbers")
    if len(x) == 0:
        raise ValueError(f"{path}: array 'features' holds no instances")
    bad = np.flatnonzero(~np.all(np.isfinite(x), axis=1))
    if bad.size:
        raise ValueError(
            f"{path}: array 'features' has NaN or infinite values in row(s) {bad[:10].tolist()}: "
            "impute or remove those instances"
        )
    return x.astype(np.float64)


def _bag_labels(path: Path, y: np.ndarray, n_bags: int) -> np.ndarray:
    """(B, C) int64 0/1 label matrix, one row per bag."""
    if y.ndim != 2 or len(y) != n_bags:
        raise ValueError(
            f"{path}: array 'bag_labels' has shape {y.shape}, expected ({n_bags}, C): one row per bag "
            "(in order of first appearance in 'bag_ids'), one column per class"
        )
    if (
        not (np.issubdtype(y.dtype, np.number) or np.issubdtype(y.dtype, np.bool_))
        or not np.isin(y, (0, 1)).all()
    ):
        found = np.unique(y[~np.isin(y, (0, 1))]) if np.issubdtype(y.dtype, np.number) else y.dtype
        raise ValueError(
            f"{path}: array 'bag_labels' must hold only 0 and 1 (found {found}): "
            "entry (b, c) is 1 when class c is in bag b's label set"
        )
    return y.astype(np.int64)


def _instance_labels(path: Path, lab: np.ndarray, n: int) -> np.ndarray:
    """(n,) int64 instance labels, each a class index >= 0 or -1 (an unlabelled instance)."""
    if lab.shape != (n,):
        raise ValueError(
            f"{path}: array 'instance_labels' has shape {lab.shape}, expected ({n},): one label per row "
            "of 'features'"
        )
    whole = np.issubdtype(lab.dtype, np.integer) or (
        np.issubdtype(lab.dtype, np.floating) and np.all(lab == np.round(lab))
    )
    if not whole:
        raise ValueError(f"{path}: array 'instance_labels' must hold integer class indices, got {lab.dtype}")
    if lab.size and lab.min() < -1:
        raise ValueError(
            f"{path}: array 'instance_labels' holds class {int(lab.min())}: use class indices >= 0, "
            "or -1 for an unlabelled instance"
        )
    return lab.astype(np.int64)
