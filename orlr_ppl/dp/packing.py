"""Ragged bags in, packed buckets for the subset DP out.

Bags are grouped by label-set size ``K`` (the DP's state count is ``2**K``) and,
inside a size, by instance count, so that the total work is
``sum_b n_b * K_b * 2**K_b`` up to a bounded padding factor, never
``2**max K``; only buckets of small work merge across sizes, because a bucket
costs every compiled program a DP of its own (``CANONICAL_MERGE_WORK``).
Packing happens once, on the host. This is the package's one
layout of bags: the NumPyro model's ``ModelData`` pads features into these
buckets, and ``dp.ragged`` pads logits into them.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
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

CANONICAL_MERGE_WORK = 1 << 18
"""With canonical shapes, neighbouring buckets merge, across label-set sizes
too, while the merged bucket's padded work (bags * instances * K * 2**K)
stays under this. Each bucket is a DP of its own in every compiled program,
costly to compile, and EM or MAP runs the DP a few hundred times, so a few
hundred thousand padded cells cost them little. Without
canonical shapes (NUTS and SVI, which run it ~10**5 times) buckets merge
across sizes only under ``SMALL_BUCKET_CELLS``. A bag in a bucket of larger
``K`` has its extra slots masked (``Bucket.label_mask``): no result changes."""

CANONICAL_FLOOR = 4
CANONICAL_FLOOR_WORK = 1 << 16
"""With canonical shapes, a bucket's bag and instance counts are also raised to
at least ``CANONICAL_FLOOR`` while its padded work stays under this: a few
thousand DP cells cost microseconds, a new shape family a compile of seconds."""


def canonical_size(n: int, steps: int = 2) -> int:
    """The smallest of 1, 2, 3, 4, 6, 8, 12, 16, 24, ... (``steps`` steps an octave) that is >= n.

    With two steps an octave, padding a count up to it costs at most 1.5x,
    and folds or datasets of similar size land on the same value, so they
    share compiled programs. More steps pad less and share less.
    """
    if n <= 4:
        return max(int(n), 0)
    top = 1 << (int(n - 1).bit_length() - 1)  # the largest power of two below n
    step = max(top // steps, 1)
    return -(-int(n) // step) * step


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
    """Bags padded to one instance count and ``K`` label slots, most often of one label-set size.

    Time-major and bag-minor, as the DP core wants them.

    Attributes:
        rows: (N_k, B_k) int32, row of each instance in the flat instance
            array (0 on padding).
        mask: (N_k, B_k) bool, real instances.
        labels: (K, B_k) int32, each bag's sorted label set in its first
            slots (0 in the rest).
        label_mask: (K, B_k) bool, real label slots: the first ``|Y_b|`` of a
            real bag (all ``K`` but where buckets of small work merged across
            label-set sizes, ``CANONICAL_MERGE_WORK``), none of a padding bag.
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
    n_instances: Sequence[int],
    label_sets: Sequence[np.ndarray] | None,
    canonical: bool = False,
    layout: Layout | None = None,
) -> PackedBags:
    """Pack bags for the DP. Instances are rows of one flat array, bag by bag.

    Args:
        n_instances: (B,) instance count of each bag.
        label_sets: (B,) validated label sets (see ``check_label_sets``), or
            None to bucket by instance count alone (for simulation and
            prediction, where labels are unknown; buckets then have K = 0).
        canonical: pad each bucket's bag and instance counts up to
            ``canonical_size`` (with padding bags that change no result), in
            a layout this process used before where the bags fit it
            (``canonical_layout``), so that other folds and datasets of
            similar shape share compiled programs: for fits whose cost is
            mostly compiling (EM, MAP).
        layout: pack labelled bags into exactly these buckets (``shared_layout``),
            so that every collection it covers shares the programs; a ValueError
            if the bags do not fit it.
    """
    if label_sets is None:
        return _pack(np.asarray(n_instances, np.int64), np.zeros(len(n_instances), np.int64), None, canonical)
    sizes = np.array([len(y) for y in label_sets], np.int64)

    def _labels(ids: np.ndarray, k: int) -> np.ndarray:
        return np.stack([label_sets[i] for i in ids], axis=1)

    return _pack(np.asarray(n_instances, np.int64), sizes, _labels, canonical or layout is not None, layout)


class Layout(NamedTuple):
    """Fixed bucket shapes, for a stream of minibatches that must all pack alike (one compiled step).

    A bag with ``k`` labels goes to the first bucket with at least ``k``
    label slots whose ``max_length`` is at least its instance count.

    Attributes:
        n_labels: (G,) label slots ``K`` of each bucket, nondecreasing.
        max_length: (G,) the longest bag each bucket takes.
        n_rows: (G,) bags each bucket holds, real and padding.
        width: (G,) instances each bucket pads a bag to.
        max_instances: the most instances any collection it was planned for
            holds (``shared_layout``; 0 where unknown), so that arrays of
            instances too can have one size for all of them.
    """

    n_labels: np.ndarray
    max_length: np.ndarray
    n_rows: np.ndarray
    width: np.ndarray
    max_instances: int = 0


def length_plan(
    n_instances: np.ndarray, n_labels: np.ndarray, thin: int = 1, merge_work: int = SMALL_BUCKET_CELLS
) -> tuple[np.ndarray, np.ndarray]:
    """``pack_bags``' buckets for these bags, as (G,) slot counts ``K`` and (G,) longest bag of each.

    ``thin``: plan on every ``thin``-th bag of each size (ranked by length),
    so that the merging of small buckets sees a minibatch's counts rather
    than the whole collection's; the last bucket of a size still takes its
    longest bag. Neighbouring buckets then merge, across sizes too, while
    their work stays under ``merge_work`` (``CANONICAL_MERGE_WORK``).
    """
    lengths, sizes = np.asarray(n_instances, np.int64), np.asarray(n_labels, np.int64)
    plan = []  # (K, bags of the sample, longest bag)
    for k in np.unique(sizes):
        of_k = np.sort(lengths[sizes == k])
        sample = of_k[:: max(int(thin), 1)]
        groups = sorted((int(sample[g].max()), len(g)) for g in _length_groups(sample, int(k)))
        groups[-1] = (int(of_k[-1]), groups[-1][1])  # the last bucket takes the longest bag, sampled or not
        plan += [(int(k), count, top) for top, count in groups]
    merged = plan[:1]
    for k, count, top in plan[1:]:
        _, count0, top0 = merged[-1]
        if _work(count0 + count, max(top0, top), k) <= merge_work:
            merged[-1] = (k, count0 + count, max(top0, top))
        else:
            merged.append((k, count, top))
    return np.array([m[0] for m in merged], np.int64), np.array([m[2] for m in merged], np.int64)


def layout_groups(
    n_instances: np.ndarray, n_labels: np.ndarray, plan: tuple[np.ndarray, np.ndarray]
) -> np.ndarray:
    """(B,) the bucket of ``plan`` (``length_plan``) each bag goes to; -1 where none takes it.

    A bag goes to the first bucket with at least its label count and length.
    """
    lengths, sizes = np.asarray(n_instances, np.int64), np.asarray(n_labels, np.int64)
    ks, bounds = (np.asarray(v, np.int64) for v in plan)
    found = np.full(len(lengths), -1, np.int64)
    step = 1 << 16  # bags at a time: a (bags, buckets) table, not one for millions of bags
    for start in range(0, len(lengths), step):
        part = slice(start, start + step)
        fits = (ks[None, :] >= sizes[part, None]) & (bounds[None, :] >= lengths[part, None])
        found[part] = np.where(fits.any(axis=1), fits.argmax(axis=1), -1)
    return found


def fixed_layout(plan: tuple[np.ndarray, np.ndarray], n_rows: np.ndarray) -> Layout:
    """``plan`` with bag counts ``n_rows`` (G,), both padded to canonical sizes (``canonical_size``)."""
    ks, bounds = plan
    shapes = [_canonical_shape(int(r), int(w), int(k)) for k, w, r in zip(ks, bounds, n_rows)]
    rows, width = (np.array(v, np.int64).reshape(-1) for v in zip(*shapes)) if shapes else (ks, ks)
    return Layout(ks, bounds, rows, width)


def stream_layout(
    shapes: Sequence[tuple[np.ndarray, np.ndarray]], batch_bags: int
) -> tuple[Layout, tuple[np.ndarray, ...]]:
    """One layout for every minibatch of ``batch_bags`` bags drawn shard by shard, and each bag's bucket.

    The buckets are ``pack_bags``' for a minibatch-sized sample of all the
    bags (``length_plan``). Dealing each bucket's bags of a shard evenly over
    the shard's ``ceil(n_s / batch_bags)`` minibatches gives a minibatch at
    most ``ceil(count / n_batches)`` of them: a bucket's rows are the most
    over the shards, padded to a canonical size.

    Args:
        shapes: per shard, (n_s,) instance counts and (n_s,) label-set sizes.
        batch_bags: bags a minibatch holds at most.
    Returns:
        The ``Layout`` and, per shard, (n_s,) each bag's bucket in it.
    """
    per_shard = [-(-len(n) // int(batch_bags)) for n, _ in shapes]
    lengths, sizes = (np.concatenate(v) for v in zip(*shapes))
    plan = length_plan(lengths, sizes, sum(per_shard))
    groups = tuple(layout_groups(n, k, plan) for n, k in shapes)
    rows = np.zeros(len(plan[0]), np.int64)
    for g, n_batches in zip(groups, per_shard):
        rows = np.maximum(rows, -(-np.bincount(g, minlength=len(rows)) // n_batches))
    return fixed_layout(plan, rows), groups


def shared_layout(collections: Sequence[tuple[np.ndarray, np.ndarray]]) -> Layout:
    """One ``Layout`` that every one of several bag collections packs into, e.g. a cross-validation's folds.

    The buckets are ``pack_bags``' for all the bags together (``length_plan``),
    each with as many rows as the most any collection puts in it, padded to
    canonical sizes; a collection with no bag of some label-set size gets
    that bucket empty (padding bags, which change no result). Every fit on
    one of the collections then has the same shapes, and compiles once.

    Args:
        collections: per collection, (n,) instance counts and (n,) label-set sizes.
    """
    lengths, sizes = (np.concatenate([np.asarray(c[i], np.int64) for c in collections]) for i in (0, 1))
    plan = length_plan(lengths, sizes, merge_work=CANONICAL_MERGE_WORK)
    rows = np.zeros(len(plan[0]), np.int64)
    for n, k in collections:
        rows = np.maximum(rows, np.bincount(layout_groups(n, k, plan), minlength=len(rows)))
    most = max(int(np.sum(n)) for n, _ in collections)
    return fixed_layout(plan, rows)._replace(max_instances=most)


RECALL_PAD_FACTOR = 2.0
"""``canonical_layout`` reuses a layout seen before while its padded DP work
stays within this factor of the bags' own canonical layout's."""

INSTANCE_HEADROOM = 1.125
"""A layout ``canonical_layout`` plans sizes instance arrays (``Layout.max_instances``)
for this many times its bags' instances, so that a later fold up to an eighth larger shares them."""

RECALLED_LAYOUTS = 32
"""How many layouts ``canonical_layout`` remembers, the most recently used first."""

_recalled: list[Layout] = []


def canonical_layout(n_instances: Sequence[int], n_labels: Sequence[int]) -> Layout:
    """The ``Layout`` a canonical packing of these bags uses: one used before in this process, if they fit it.

    Cross-validation folds, bootstrap resamples and refits of one dataset each
    differ a little in their bags: a fold may lack the one bag of ten labels,
    or hold a few more instances. Packed alone, each would get buckets of its
    own and compile every program again (EM's or MAP's is a few seconds, its
    fit a tenth of one). So each bag collection first tries the layouts
    this process used before, most recent first: the first that takes every
    bag (``layout_groups``), its instances (``Layout.max_instances``), and
    costs at most ``RECALL_PAD_FACTOR`` times the DP work of the bags' own
    layout is used again. Otherwise the bags' own layout (``shared_layout`` of
    them alone, each bucket taking any bag up to its padded width, and
    instance arrays sized ``INSTANCE_HEADROOM`` times theirs) is remembered
    and returned.

    Padding bags and slots change no result, so the layout a collection gets
    changes its fit's values only at float round-off (the sums' order), and
    not at all where it was packed into the same layout before.

    Args:
        n_instances: (B,) instance count of each bag.
        n_labels: (B,) label-set size of each bag.
    """
    lengths, sizes = np.asarray(n_instances, np.int64), np.asarray(n_labels, np.int64)
    own = _own_layout(lengths, sizes)
    budget = RECALL_PAD_FACTOR * _layout_work(own)
    for i, layout in enumerate(_recalled):
        if _layout_work(layout) <= budget and _fits(layout, lengths, sizes):
            _recalled.insert(0, _recalled.pop(i))
            return layout
    _recalled.insert(0, own)
    del _recalled[RECALLED_LAYOUTS:]
    return own


def _own_layout(lengths: np.ndarray, sizes: np.ndarray) -> Layout:
    """These bags' own canonical buckets, as a ``Layout`` whose buckets take any bag up to their width.

    Each bag goes to the first bucket with enough label slots and width, its
    own in the canonical plan or an earlier one; a bucket left empty is dropped.
    """
    plan = _plan(lengths, sizes, True, None)
    ks = np.array([k for k, _, _ in plan], np.int64)
    widths = np.array([width for _, _, (_, width) in plan], np.int64)
    counts = np.bincount(layout_groups(lengths, sizes, (ks, widths)), minlength=len(ks))
    used = counts > 0
    layout = fixed_layout((ks[used], widths[used]), counts[used])
    return layout._replace(max_instances=int(np.ceil(INSTANCE_HEADROOM * lengths.sum())))


def _fits(layout: Layout, lengths: np.ndarray, sizes: np.ndarray) -> bool:
    """Whether ``pack_bags(..., layout=layout)`` takes these bags, and their instances fit its arrays."""
    group = layout_groups(lengths, sizes, (layout.n_labels, layout.max_length))
    if np.any(group < 0) or lengths.sum() > max(layout.max_instances, 0):
        return False
    return bool(np.all(np.bincount(group, minlength=len(layout.n_labels)) <= layout.n_rows))


def _layout_work(layout: Layout) -> float:
    """A layout's padded DP work: its buckets' cells times ``K * 2**K``."""
    k = np.asarray(layout.n_labels, np.float64)
    return float(np.sum(layout.n_rows * layout.width * np.maximum(k, 1) * np.exp2(k)))


def pack_label_matrix(
    n_instances: np.ndarray,
    label_matrix: np.ndarray | None,
    canonical: bool = False,
    layout: Layout | None = None,
) -> PackedBags:
    """``pack_bags`` with the label sets as a (B, C) 0/1 matrix, with no Python loop over bags.

    For collections of millions of bags held as flat arrays (``data.store``).
    The matrix is taken as validated (``validation.check_flat_bags``); None
    packs by instance count alone, as ``pack_bags(..., None)``. With
    ``layout``, the buckets are exactly its (empty ones included), whatever
    the bags; a ValueError if they do not fit it.
    """
    lengths = np.asarray(n_instances, np.int64)
    if label_matrix is None:
        return _pack(lengths, np.zeros(len(lengths), np.int64), None, canonical, layout)
    present = np.asarray(label_matrix) != 0

    def _labels(ids: np.ndarray, k: int) -> np.ndarray:
        # Row-major nonzero lists each bag's classes in increasing order, k per bag.
        return np.nonzero(present[ids])[1].reshape(len(ids), k).T

    return _pack(lengths, present.sum(axis=1), _labels, canonical, layout)


def _plan(lengths: np.ndarray, sizes: np.ndarray, canonical: bool, layout: Layout | None):
    """Each bucket's (label-set size, bag positions, (rows, width))."""
    if layout is not None:
        group = layout_groups(lengths, sizes, (layout.n_labels, layout.max_length))
        counts = np.bincount(group[group >= 0], minlength=len(layout.n_labels))
        if np.any(group < 0) or np.any(counts > layout.n_rows):
            raise ValueError(
                "bags do not fit the fixed layout (more labels or instances than any bucket takes, or more "
                "bags than a bucket's rows): plan the layout from every bag it will pack "
                "(shared_layout, stream_layout)"
            )
        order = np.argsort(group, kind="stable")
        parts = np.split(order, np.cumsum(counts)[:-1])
        return [
            (int(k), ids, (int(r), int(w)))
            for k, ids, r, w in zip(layout.n_labels, parts, layout.n_rows, layout.width)
        ]
    plan = []
    for k in np.unique(sizes):
        in_k = np.flatnonzero(sizes == k)
        for group in _length_groups(lengths[in_k], int(k)):
            ids = in_k[group]
            shape = len(ids), int(lengths[ids].max())
            plan.append((int(k), ids, _canonical_shape(*shape, int(k)) if canonical else shape))
    return _merge_small(plan, lengths, canonical)


def _work(n_rows: int, width: int, n_slots: int) -> int:
    """A bucket's padded DP work: cells times ``K * 2**K``."""
    return n_rows * width * max(n_slots, 1) * 2**n_slots


def _merge_small(
    plan: list[tuple[int, np.ndarray, tuple[int, int]]], lengths: np.ndarray, canonical: bool
) -> list[tuple[int, np.ndarray, tuple[int, int]]]:
    """Neighbouring buckets of ``plan`` (in increasing size) merged while their work stays small.

    See ``CANONICAL_MERGE_WORK``; the merged bucket has the larger ``K``.
    """
    limit = CANONICAL_MERGE_WORK if canonical else SMALL_BUCKET_CELLS
    out = plan[:1]
    for k, ids, shape in plan[1:]:
        k0, ids0, _ = out[-1]
        both = np.concatenate([ids0, ids])
        merged = len(both), int(lengths[both].max())
        merged = _canonical_shape(*merged, k) if canonical else merged
        if _work(*merged, k) <= limit:
            out[-1] = (k, both, merged)
        else:
            out.append((k, ids, shape))
    return out


def _pack(
    lengths: np.ndarray,
    sizes: np.ndarray,
    labels_of: Callable[[np.ndarray, int], np.ndarray] | None,
    canonical: bool,
    layout: Layout | None = None,
) -> PackedBags:
    """``pack_bags`` given (B,) label-set sizes and ``labels_of(ids, k)``, the (k, len(ids)) sorted labels."""
    if canonical and layout is None and labels_of is not None:
        layout = canonical_layout(lengths, sizes)
    starts = np.concatenate([[0], np.cumsum(lengths)[:-1]])
    buckets = []
    instance_slot = np.empty(lengths.sum(), dtype=np.int64)
    bag_slot = np.empty(len(lengths), dtype=np.int64)
    n_slots_done = n_rows_done = 0
    for k, ids, (n_rows, width) in _plan(lengths, sizes, canonical, layout):
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
        label_mask = np.zeros((int(k), n_rows), bool)
        of_ids = sizes[ids]
        for size in np.unique(of_ids[of_ids > 0]):  # a merged bucket holds several sizes
            cols = np.flatnonzero(of_ids == size)
            labels[:size, cols] = labels_of(ids[cols], int(size))
            label_mask[:size, cols] = True
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
