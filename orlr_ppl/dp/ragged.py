"""The exact bag likelihood and instance posteriors of ragged logits.

Logits laid end to end (bags one after another) are gathered into the
``pack_bags`` buckets, run through the subset DP, and scattered back. The
jitted functions take a ``PackedBags`` pytree and do no Python work per bag,
and recompile only when the bucket shapes change.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence

import jax
import jax.numpy as jnp
import numpy as np

from .packing import Layout, PackedBags, canonical_layout, pack_bags
from .slots import slot_log_probs, spread_slots
from .subset_dp import BucketInputs, buckets_dp, buckets_dp_unchecked
from .validation import DEFAULT_MAX_LABELS, check_label_sets, check_logits

Array = jax.Array


def _slot_inputs(log_probs: Array, packed: PackedBags) -> list[BucketInputs]:
    return [
        BucketInputs(slot_log_probs(log_probs, b.rows, b.labels), b.mask, b.label_mask)
        for b in packed.buckets
    ]


def _gather(results, packed: PackedBags, n_classes: int) -> tuple[Array, Array]:
    """Bag-order (B,) log-likelihoods and instance-order (n_instances, C) posteriors from bucket results."""
    post = jnp.concatenate(
        [
            spread_slots(r.posteriors, b.labels, b.label_mask, n_classes).reshape(-1, n_classes)
            for r, b in zip(results, packed.buckets)
        ]
    )[packed.instance_slot]
    ll = jnp.concatenate([r.log_likelihood for r in results])[packed.bag_slot]
    return ll, post


def _posteriors_and_ll(log_probs: Array, packed: PackedBags) -> tuple[Array, Array]:
    results = buckets_dp(_slot_inputs(log_probs, packed), with_posteriors=True)
    return _gather(results, packed, log_probs.shape[1])


def _posteriors_and_ll_unchecked(log_probs: Array, packed: PackedBags) -> tuple[Array, Array, Array]:
    """``_posteriors_and_ll`` in probability space only, and () whether every bag was resolved there."""
    results, resolved = buckets_dp_unchecked(_slot_inputs(log_probs, packed), with_posteriors=True)
    return *_gather(results, packed, log_probs.shape[1]), resolved


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
    logits: Sequence[np.ndarray],
    label_sets: Sequence[Iterable[int]],
    max_labels: int,
    canonical: bool = False,
) -> tuple[Array, PackedBags, list[int]]:
    """Flat logits and their packing, and the bags' sizes; with ``canonical``, padded (``pack_canonical``).

    One-off calls (a fold's transductive predictions, a user's check) are
    mostly compiling: canonical shapes let calls on similar bags share a program.
    """
    arrays, n_classes = check_logits(logits)
    n_inst = [a.shape[0] for a in arrays]
    sets = check_label_sets(label_sets, n_inst, n_classes, max_labels)
    flat = np.concatenate(arrays, axis=0)  # jnp.asarray keeps float64 under ``jax_enable_x64`` only
    if not canonical:
        return jnp.asarray(flat), pack_bags(n_inst, sets), n_inst
    flat, packed = pack_canonical(flat, n_inst, sets)
    return jnp.asarray(flat), packed, n_inst


def pack_canonical(
    flat: np.ndarray,
    n_instances: Sequence[int],
    label_sets: Sequence[np.ndarray],
    layout: Layout | None = None,
) -> tuple[np.ndarray, PackedBags]:
    """Rows (n_instances, ...) laid bag after bag and their packing, both padded to canonical shapes.

    The buckets are ``layout``'s (``packing.shared_layout``, e.g. of a
    cross-validation's folds; a ValueError if the bags do not fit it), or
    else ``packing.canonical_layout``'s, and the rows and the flat instance
    and bag arrays pad to its cell and row counts, so that calls on other
    bags it covers share one program. The padded rows belong to no
    bucket, and the padded entries of ``instance_slot`` and ``bag_slot`` read
    slot 0: keep the first ``n_instances`` rows and ``B`` bags only.
    ``label_sets`` as ``check_label_sets`` returns them.
    """
    if layout is None:
        layout = canonical_layout(n_instances, [len(y) for y in label_sets])
    packed = pack_bags(n_instances, label_sets, canonical=True, layout=layout)
    rows, bags = int(np.sum(layout.n_rows * layout.width)), int(np.sum(layout.n_rows))
    flat = np.pad(flat, ((0, rows - flat.shape[0]),) + ((0, 0),) * (flat.ndim - 1))
    return flat, packed._replace(
        # bag_ids' length is the real bag count, which would select a program of its own.
        buckets=tuple(b._replace(bag_ids=None) for b in packed.buckets),
        instance_slot=np.pad(packed.instance_slot, (0, rows - len(packed.instance_slot))),
        instance_bag=np.pad(packed.instance_bag, (0, rows - len(packed.instance_bag))),
        bag_slot=np.pad(packed.bag_slot, (0, bags - len(packed.bag_slot))),
    )


@jax.jit
def linear_posteriors(features: Array, weights: Array, intercepts: Array, packed: PackedBags) -> Array:
    """(n_instances, C) ``packed_posteriors`` of the logits ``features @ weights + intercepts``.

    Args:
        features: (n_instances, d), bags laid end to end as ``packed`` packs them.
        weights: (d, C); intercepts: (C,): one draw of a linear model.

    One program for the logits and the DP, called once per posterior draw
    (a ``lax.map`` over the draws ran each draw's DP ~8x slower on the CPU).
    """
    return _posteriors_and_ll(jax.nn.log_softmax(features @ weights + intercepts, axis=-1), packed)[1]


@jax.jit
def _linear_posteriors_unchecked(
    features: Array, weights: Array, intercepts: Array, packed: PackedBags
) -> tuple[Array, Array]:
    logits = features @ weights + intercepts
    _, post, resolved = _posteriors_and_ll_unchecked(jax.nn.log_softmax(logits, axis=-1), packed)
    return post, resolved


@jax.jit
def _packed_posteriors_unchecked(logits: Array, packed: PackedBags) -> tuple[Array, Array, Array]:
    return _posteriors_and_ll_unchecked(jax.nn.log_softmax(logits, axis=-1), packed)


@jax.jit
def _packed_log_likelihood_unchecked(logits: Array, packed: PackedBags) -> tuple[Array, Array]:
    inputs = _slot_inputs(jax.nn.log_softmax(logits, axis=-1), packed)
    results, resolved = buckets_dp_unchecked(inputs, with_posteriors=False)
    return jnp.concatenate([r.log_likelihood for r in results])[packed.bag_slot], resolved


def draw_posteriors_on_host(
    features: Array,
    weights: Sequence[Array],
    intercepts: Sequence[Array],
    packed: PackedBags,
    block: int = 16,
) -> Iterator[Array]:
    """``linear_posteriors`` of each draw (``weights`` S x (d, C), ``intercepts`` S x (C,)), in turn.

    For callers on the host (predictions): each draw runs in probability space
    first, a program half the size of ``linear_posteriors``, whose log-space
    fallback compiles only if some draw leaves a bag near underflow; that draw
    is then redone with it. Draws are dispatched ``block`` at a time before
    their flags are read, so they still run back to back, and memory holds
    ``block`` draws' posteriors, not S.
    """
    for start in range(0, len(weights), block):
        draws = list(zip(weights[start : start + block], intercepts[start : start + block]))
        fast = [_linear_posteriors_unchecked(features, w, b, packed) for w, b in draws]
        for (post, resolved), (w, b) in zip(fast, draws):
            yield post if bool(resolved) else linear_posteriors(features, w, b, packed)


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
    flat, packed, n_inst = _prepare_ragged(logits, label_sets, max_labels, canonical=True)
    # Probability space first (half the program); the exact one only for bags near underflow.
    ll, resolved = _packed_log_likelihood_unchecked(flat, packed)
    if not bool(resolved):
        ll = packed_log_likelihood(flat, packed)
    return np.asarray(ll)[: len(n_inst)]


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
    flat, packed, n_inst = _prepare_ragged(logits, label_sets, max_labels, canonical=True)
    _, post, resolved = _packed_posteriors_unchecked(flat, packed)
    if not bool(resolved):
        _, post = packed_posteriors(flat, packed)
    return np.split(np.asarray(post)[: sum(n_inst)], np.cumsum(n_inst)[:-1])
