"""Ragged bags in, packed buckets for the subset DP out.

Bags are grouped by label-set size ``K`` (the DP's state count is ``2**K``) and,
inside a size, by instance count, so that the total work is
``sum_b n_b * K_b * 2**K_b`` up to a bounded padding factor, never
``2**max K``. Packing happens once, on the host; the jitted functions below
take a ``PackedBags`` pytree and do no Python work per bag, and recompile only
when the bucket shapes change.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from .subset_dp import BucketInputs, buckets_dp, slot_log_probs, spread_slots

Array = jax.Array

DEFAULT_MAX_LABELS = 16
"""Largest label set accepted by default: the DP holds ``2**K`` states a bag."""

PAD_FACTOR = 2.0
"""Neighbouring instance-count groups inside a label-set size merge while that
at most multiplies their padded cells by this factor. Groups start as powers
of two, so a bucket never holds more than ~4x its real cells, and one very
long bag never pads the short ones."""

SMALL_BUCKET_CELLS = 1 << 14
"""Merge groups anyway while a bucket's padded work (cells * K * 2**K) stays
under this: a separate scan costs more than that much padding."""


class Bucket(NamedTuple):
    """Bags with one label-set size, padded to one instance count.

    Time-major and bag-minor, as the DP core wants them.

    Attributes:
        rows: (N_k, B_k) int32, row of each instance in the flat instance
            array (0 on padding).
        mask: (N_k, B_k) bool, real instances.
        labels: (K, B_k) int32, each bag's sorted label set.
        label_mask: (K, B_k) bool, all True (kept for the DP's general form).
        bag_ids: (B_k,) int32, the bags' positions in the input.
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


def check_label_sets(
    label_sets: Sequence[Iterable[int]],
    n_instances: Sequence[int],
    n_classes: int,
    max_labels: int = DEFAULT_MAX_LABELS,
) -> list[np.ndarray]:
    """Validate label sets; return each as a sorted unique int array.

    Raises:
        ValueError: naming the bag, for an empty bag, an empty label set, a
            non-integer label, a label outside ``[0, n_classes)``, more labels
            than instances (likelihood exactly zero) or more than
            ``max_labels`` labels.
    """
    if len(label_sets) != len(n_instances):
        raise ValueError(
            f"got {len(n_instances)} bags but {len(label_sets)} label sets: "
            "give exactly one label set per bag"
        )
    out, impossible = [], []
    for b, (raw, n_b) in enumerate(zip(label_sets, n_instances)):
        arr = parse_label_set(raw, str(b))
        bad = arr[(arr < 0) | (arr >= n_classes)]
        if bad.size:
            raise ValueError(
                f"bag {b} has label(s) {bad.tolist()} outside [0, {n_classes}): "
                f"use class indices 0..{n_classes - 1} or raise n_classes"
            )
        problem = zero_likelihood_reason(arr.size, n_b)
        if problem:
            impossible.append((b, problem))
        elif arr.size > max_labels:
            raise ValueError(
                f"bag {b} has {arr.size} labels, above max_labels={max_labels} (the DP holds "
                f"2**{arr.size} states for it): raise max_labels if memory allows, or split the bag"
            )
        out.append(arr)
    if impossible:
        raise ValueError(_impossible_message(impossible))
    return out


def parse_label_set(raw: Iterable[int], bag: str) -> np.ndarray:
    """One bag's labels as a sorted unique int64 array (possibly empty); ``bag`` names it in errors."""
    if isinstance(raw, (str, bytes)) or np.ndim(raw) > 1:
        raise ValueError(f"label set of bag {bag} must be a flat iterable of class indices")
    arr = np.asarray(list(raw) if not isinstance(raw, np.ndarray) else raw)
    if arr.size and not (np.issubdtype(arr.dtype, np.integer) or np.issubdtype(arr.dtype, np.bool_)):
        if not (np.issubdtype(arr.dtype, np.floating) and np.all(arr == np.round(arr))):
            raise ValueError(f"bag {bag} has non-integer labels {arr.tolist()}: use class indices")
    return np.unique(arr.astype(np.int64))


def zero_likelihood_reason(n_labels: int, n_instances: int) -> str | None:
    """Why a bag has likelihood exactly zero under the union model, or None."""
    if n_instances == 0:
        return "is empty: every bag needs at least one instance"
    if n_labels == 0:
        return "has an empty label set: under the ORed-logistic model every bag has at least one label"
    if n_labels > n_instances:
        return (
            f"has {n_labels} labels but only {n_instances} instance(s): its likelihood is exactly "
            "zero under the union model (each instance carries one label)"
        )
    return None


def _impossible_message(impossible: list[tuple[int, str]], shown: int = 20) -> str:
    fix = "fix their label sets or remove them (MIMLData.drop_impossible() does, and reports which)"
    if len(impossible) == 1:
        b, why = impossible[0]
        return f"bag {b} {why}; remove it or fix its label set"
    listed = "; ".join(f"bag {b} {why}" for b, why in impossible[:shown])
    more = f"; and {len(impossible) - shown} more" if len(impossible) > shown else ""
    ids = [b for b, _ in impossible]
    return f"{len(impossible)} bags are impossible under the union model ({ids}): {listed}{more}. {fix}"


def check_ragged(
    arrays: Sequence[np.ndarray], kind: str, column: str, width: int | None = None
) -> tuple[list[np.ndarray], int]:
    """Validate a ragged list of (n_b, width) float arrays, one per bag.

    Args:
        arrays: one 2-D array per bag.
        kind: what the arrays hold, for messages ("logits", "features").
        column: what a column is, for messages ("classes", "features").
        width: the required column count; default: bag 0's.
    Returns:
        The arrays as floating arrays, and the column count.
    Raises:
        ValueError: naming the bag, for a non-2-D array, an empty bag, a
            column count that differs, or NaN/infinite entries (naming the
            instances).
    """
    if isinstance(arrays, np.ndarray) and arrays.ndim == 2:
        raise ValueError(f"{kind} must be a list of (n_b, {column}) arrays, one per bag, not one 2-D array")
    out = []
    for b, a in enumerate(arrays):
        a = np.asarray(a)
        if a.ndim != 2:
            raise ValueError(f"{kind} of bag {b} have shape {a.shape}: expected (n_instances, {column})")
        if a.shape[0] == 0:
            raise ValueError(f"bag {b} is empty: every bag needs at least one instance; remove it")
        if width is None:
            width = a.shape[1]
        elif a.shape[1] != width:
            raise ValueError(f"bag {b} has {a.shape[1]} {column}, expected {width}")
        if not np.issubdtype(a.dtype, np.floating):
            a = a.astype(np.float64)
        if not np.all(np.isfinite(a)):
            rows = np.flatnonzero(~np.all(np.isfinite(a), axis=1)).tolist()
            raise ValueError(
                f"bag {b} has NaN or infinite {kind} in instance(s) {rows}: impute or remove "
                "them (or the bag) before fitting"
            )
        out.append(a)
    if width is None:
        raise ValueError("no bags given")
    return out, width


def check_logits(logits: Sequence[np.ndarray]) -> tuple[list[np.ndarray], int]:
    """``check_ragged`` for logits: returns the arrays and the class count."""
    return check_ragged(logits, "logits", "classes")


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


def pack_bags(n_instances: Sequence[int], label_sets: Sequence[np.ndarray] | None) -> PackedBags:
    """Pack bags for the DP. Instances are rows of one flat array, bag by bag.

    Args:
        n_instances: (B,) instance count of each bag.
        label_sets: (B,) validated label sets (see ``check_label_sets``), or
            None to bucket by instance count alone (for simulation and
            prediction, where labels are unknown; buckets then have K = 0).
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
            width = int(lengths[ids].max())
            pos = np.arange(width)[:, None]
            mask = pos < lengths[ids][None, :]
            index = np.where(mask, starts[ids][None, :] + pos, 0)
            slots = n_slots_done + np.arange(mask.size).reshape(mask.shape)
            instance_slot[index[mask]] = slots[mask]
            bag_slot[ids] = n_rows_done + np.arange(len(ids))
            labels = np.stack([label_sets[i] for i in ids], axis=1).astype(np.int32).reshape(k, len(ids))
            buckets.append(
                Bucket(
                    jnp.asarray(index, dtype=jnp.int32),
                    jnp.asarray(mask),
                    jnp.asarray(labels),
                    jnp.ones(labels.shape, dtype=bool),
                    jnp.asarray(ids, dtype=jnp.int32),
                )
            )
            n_slots_done += mask.size
            n_rows_done += len(ids)
    return PackedBags(
        tuple(buckets),
        jnp.asarray(instance_slot, dtype=jnp.int32),
        jnp.asarray(np.repeat(np.arange(len(lengths)), lengths), dtype=jnp.int32),
        jnp.asarray(bag_slot, dtype=jnp.int32),
    )


def _slot_inputs(log_probs: Array, packed: PackedBags) -> list[BucketInputs]:
    return [
        BucketInputs(slot_log_probs(log_probs, b.rows, b.labels), b.mask, b.label_mask)
        for b in packed.buckets
    ]


def _posteriors_and_ll(log_probs: Array, packed: PackedBags) -> tuple[Array, Array]:
    results = buckets_dp(_slot_inputs(log_probs, packed), with_posteriors=True)
    n_classes = log_probs.shape[1]
    post = jnp.concatenate(
        [
            spread_slots(r.posteriors, b.labels, b.label_mask, n_classes).reshape(-1, n_classes)
            for r, b in zip(results, packed.buckets)
        ]
    )[packed.instance_slot]
    ll = jnp.concatenate([r.log_likelihood for r in results])[packed.bag_slot]
    return ll, post


@jax.custom_vjp
def _packed_ll(logits: Array, packed: PackedBags) -> Array:
    log_probs = jax.nn.log_softmax(logits, axis=-1)
    results = buckets_dp(_slot_inputs(log_probs, packed), with_posteriors=False)
    return jnp.concatenate([r.log_likelihood for r in results])[packed.bag_slot]


def _packed_ll_fwd(logits: Array, packed: PackedBags):
    log_probs = jax.nn.log_softmax(logits, axis=-1)
    ll, post = _posteriors_and_ll(log_probs, packed)
    return ll, (post - jnp.exp(log_probs), packed.instance_bag)


def _packed_ll_bwd(residuals: tuple[Array, Array], g: Array):
    score, instance_bag = residuals
    # d log p(Y_b) / d z_bi = p(y_bi | Y_b, X_b) - softmax(z_bi): the E-step.
    return g[instance_bag][:, None] * score, None


_packed_ll.defvjp(_packed_ll_fwd, _packed_ll_bwd)


@jax.jit
def packed_log_likelihood(logits: Array, packed: PackedBags) -> Array:
    """Per-bag log-likelihood of packed bags.

    Args:
        logits: (n_instances, C) instance scores, bags laid end to end.
        packed: from ``pack_bags``.
    Returns:
        (B,) ``log p(Y_b | X_b)`` in input bag order. Differentiable in
        ``logits``: the gradient ``posterior - softmax`` comes from the DP's
        backward pass, not from differentiating through the scan.
    """
    return _packed_ll(logits, packed)


@jax.jit
def packed_posteriors(logits: Array, packed: PackedBags) -> tuple[Array, Array]:
    """Per-bag log-likelihood (B,) and instance posteriors (n_instances, C)."""
    return _posteriors_and_ll(jax.nn.log_softmax(logits, axis=-1), packed)


def _prepare_ragged(
    logits: Sequence[np.ndarray], label_sets: Sequence[Iterable[int]], max_labels: int
) -> tuple[Array, PackedBags, list[int]]:
    arrays, n_classes = check_logits(logits)
    n_inst = [a.shape[0] for a in arrays]
    sets = check_label_sets(label_sets, n_inst, n_classes, max_labels)
    # float64 input stays float64 under ``jax_enable_x64``, else becomes float32.
    flat = jnp.asarray(np.concatenate(arrays, axis=0))
    return flat, pack_bags(n_inst, sets), n_inst


def bag_log_likelihood(
    logits: Sequence[np.ndarray],
    label_sets: Sequence[Iterable[int]],
    max_labels: int = DEFAULT_MAX_LABELS,
) -> np.ndarray:
    """Exact ``log p(Y_b | X_b)`` of each bag under the ORed-logistic model.

    Args:
        logits: B arrays of shape (n_b, C): class scores of each instance.
        label_sets: B iterables of class indices in ``[0, C)``.
        max_labels: largest label set accepted (the DP holds ``2**K`` states).
    Returns:
        (B,) log-likelihoods, float32 (float64 with ``jax_enable_x64``).
    Raises:
        ValueError: for bad input, naming the bag (see ``check_logits``,
            ``check_label_sets``).
    """
    flat, packed, _ = _prepare_ragged(logits, label_sets, max_labels)
    return np.asarray(packed_log_likelihood(flat, packed))


def instance_posteriors(
    logits: Sequence[np.ndarray],
    label_sets: Sequence[Iterable[int]],
    max_labels: int = DEFAULT_MAX_LABELS,
) -> list[np.ndarray]:
    """Posterior ``p(y_bi = c | Y_b, X_b)`` of every instance.

    Args: as ``bag_log_likelihood``.
    Returns:
        B arrays of shape (n_b, C); rows sum to one and are zero off ``Y_b``.
    """
    flat, packed, n_inst = _prepare_ragged(logits, label_sets, max_labels)
    _, post = packed_posteriors(flat, packed)
    return np.split(np.asarray(post), np.cumsum(n_inst)[:-1])
