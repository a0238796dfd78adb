"""Ragged bags in, packed buckets for the subset DP out.

Bags are grouped by label-set size ``K`` (the DP's state count is ``2**K``) and,
inside a size, by instance count, so that the total work is
``sum_b n_b * K_b * 2**K_b`` up to a bounded padding factor, never
``2**max K``. Packing happens once, on the host. This is the package's one
layout of bags: the NumPyro model's ``ModelData`` pads features into these
buckets, and ``dp.ragged`` pads logits into them.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import NamedTuple

import numpy as np

Array = np.ndarray  # host arrays; traced when a jitted function takes a PackedBags

PAD_FACTOR = 2.0
"""Neighbouring instance-count groups inside a label-set size merge while that
at most multiplies their padded cells by this factor. Groups start as powers
of two, so a bucket never holds more than ~4x its real cells, and one very
long bag never pads the short ones."""

SMALL_BUCKET_CELLS = 1 << 14
"""Merge groups anyway while a bucket's padded work (cells * K * 2**K) stays
under this: a separate scan costs more than that much padding."""

CANONICAL_FLOOR = 4
CANONICAL_FLOOR_WORK = 1 << 16
"""With canonical shapes, a bucket's bag and instance counts are also raised to
at least ``CANONICAL_FLOOR`` while its padded work stays under this: a few
thousand DP cells cost microseconds, a new shape family a compile of seconds."""


def canonical_size(n: int) -> int:
    """The smallest of 1, 2, 3, 4, 6, 8, 12, 16, 24, ... (two steps an octave) that is >= n.

    Padding a count up to it costs at most 1.5x, and folds or datasets of
    similar size land on the same value, so they share compiled programs.
    """
    if n <= 4:
        return max(int(n), 0)
    top = 1 << (int(n - 1).bit_length() - 1)  # the largest power of two below n
    return top * 3 // 2 if n <= top * 3 // 2 else 2 * top


def dp_work(n_instances: Sequence[int], n_labels: Sequence[int]) -> np.ndarray:
    """(B,) the subset DP's work on each bag: ``n_b * |Y_b| * 2**|Y_b|`` (float, so it cannot overflow).

    What bucketing keeps the total cost to, and what pruning ranks bags by.
    """
    n = np.asarray(n_instances, dtype=np.float64)
    k = np.asarray(n_labels, dtype=np.float64)
    return n * k * np.exp2(k)


def _canonical_shape(n_bags: int, width: int, n_slots: int) -> tuple[int, int]:
    """(bags, instances) of a bucket padded to canonical sizes; see ``CANONICAL_FLOOR_WORK``."""
    bags, width = canonical_size(n_bags), canonical_size(width)
    floored = max(bags, CANONICAL_FLOOR), max(width, CANONICAL_FLOOR)
    if floored[0] * floored[1] * max(n_slots, 1) * 2**n_slots <= CANONICAL_FLOOR_WORK:
        return floored
    return bags, width


class Bucket(NamedTuple):
    """Bags with one label-set size, padded to one instance count.

    Time-major and bag-minor, as the DP core wants them.

    Attributes:
        rows: (N_k, B_k) int32, row of each instance in the flat instance
            array (0 on padding).
        mask: (N_k, B_k) bool, real instances.
        labels: (K, B_k) int32, each bag's sorted label set.
        label_mask: (K, B_k) bool, real label slots: all True for real bags,
            all False for padding bags.
        bag_ids: (R_k,) int32, the input positions of the bucket's first
            ``R_k <= B_k`` bags. Bags past them are padding (canonical
            shapes): no instances and an empty label set, so their likelihood
            is one and their posteriors are zero.
    """

    rows: Array
    mask: Array
    labels: Array
    label_mask: Array
    bag_ids: Array


class PackedBags(NamedTuple):
    """A bag collection packed for the DP (a pytree of arrays).

    Attributes:
        buckets: the buckets, in increasing label-set size.
        instance_slot: (n_instances,) int32, the slot each instance occupies
            in the buckets' (N_k, B_k) layouts flattened and laid end to end.
        instance_bag: (n_instances,) int32, the bag of each instance.
        bag_slot: (n_bags,) int32, each bag's position among the buckets' rows.
    """

    buckets: tuple[Bucket, ...]
    instance_slot: Array
    instance_bag: Array
    bag_slot: Array

    @property
    def n_bags(self) -> int:
        return int(self.bag_slot.shape[0])

    @property
    def n_instances(self) -> int:
        return int(self.instance_slot.shape[0])


def _length_groups(lengths: np.ndarray, n_slots: int) -> list[np.ndarray]:
    """Split positions of bags (sorted by length) into padding-bounded groups."""
    order = np.argsort(lengths, kind="stable")
    sorted_len = lengths[order]
    # Geometric length classes bound the padding of each class by 2x ...
    cls = np.ceil(np.log2(np.maximum(sorted_len, 1))).astype(int)
    groups = [order[cls == c] for c in np.unique(cls)]

    # ... then neighbours merge while padding stays cheap.
    def padded(idx: np.ndarray) -> int:
        return len(idx) * int(lengths[idx].max())

    merged = [groups[0]]
    cost = max(n_slots, 1) * 2**n_slots
    for g in groups[1:]:
        cand = np.concatenate([merged[-1], g])
        apart = padded(merged[-1]) + padded(g)
        if padded(cand) <= PAD_FACTOR * apart or padded(cand) * cost <= SMALL_BUCKET_CELLS:
            merged[-1] = cand
        else:
            merged.append(g)
    return merged


def pack_bags(
    n_instances: Sequence[int], label_sets: Sequence[np.ndarray] | None, canonical: bool = False
) -> PackedBags:
    """Pack bags for the DP. Instances are rows of one flat array, bag by bag.

    Args:
        n_instances: (B,) instance count of each bag.
        label_sets: (B,) validated label sets (see ``check_label_sets``), or
            None to bucket by instance count alone (for simulation and
            prediction, where labels are unknown; buckets then have K = 0).
        canonical: pad each bucket's bag and instance counts up to
            ``canonical_size`` (with padding bags that change no result), so
            that other folds and datasets of similar shape share compiled
            programs: for fits whose cost is mostly compiling (EM, MAP).
    """
    lengths = np.asarray(n_instances, dtype=np.int64)
    if label_sets is None:
        label_sets = [np.zeros(0, np.int32)] * len(lengths)
    sizes = np.array([len(y) for y in label_sets])
    starts = np.concatenate([[0], np.cumsum(lengths)[:-1]])
    buckets = []
    instance_slot = np.empty(lengths.sum(), dtype=np.int64)
    bag_slot = np.empty(len(lengths), dtype=np.int64)
    n_slots_done = n_rows_done = 0
    for k in np.unique(sizes):
        in_k = np.flatnonzero(sizes == k)
        for group in _length_groups(lengths[in_k], int(k)):
            ids = in_k[group]
            width, n_rows = int(lengths[ids].max()), len(ids)
            if canonical:
                n_rows, width = _canonical_shape(n_rows, width, int(k))
            real = np.arange(n_rows) < len(ids)
            n_real = np.zeros(n_rows, np.int64)
            n_real[: len(ids)] = lengths[ids]
            first = np.zeros(n_rows, np.int64)
            first[: len(ids)] = starts[ids]
            pos = np.arange(width)[:, None]
            mask = pos < n_real[None, :]
            index = np.where(mask, first[None, :] + pos, 0)
            slots = n_slots_done + np.arange(mask.size).reshape(mask.shape)
            instance_slot[index[mask]] = slots[mask]
            bag_slot[ids] = n_rows_done + np.arange(len(ids))
            labels = np.zeros((int(k), n_rows), np.int32)
            if k:
                labels[:, : len(ids)] = np.stack([label_sets[i] for i in ids], axis=1)
            label_mask = np.broadcast_to(real[None, :], labels.shape).copy()
            buckets.append(Bucket(index.astype(np.int32), mask, labels, label_mask, ids.astype(np.int32)))
            n_slots_done += mask.size
            n_rows_done += n_rows
    # Host arrays: a jitted function takes them as arguments, and the model's layout reads
    # them on the host; building device arrays here cost a small compile per bucket and field.
    return PackedBags(
        tuple(buckets),
        instance_slot.astype(np.int32),
        np.repeat(np.arange(len(lengths)), lengths).astype(np.int32),
        bag_slot.astype(np.int32),
    )
