"""The subset DP on one bucket given batch-major, differentiable in the logits.

This is the interface the NumPyro distribution ``BagLabelSet`` uses: logits
(B, N, C) of ``B`` bags padded to ``N`` instances, and each bag's label slots
(B, K). The gradient comes from the DP's backward pass (``posterior -
softmax``), not from differentiating through the scan.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import NamedTuple

import jax
import jax.numpy as jnp
from jax import lax

from .slots import spread_slots
from .subset_dp import BucketInputs, DPResult, buckets_dp, buckets_dp_unchecked

Array = jax.Array


def bucket_dp(
    slot_log_probs: Array, mask: Array, label_mask: Array, with_posteriors: bool = True
) -> DPResult:
    """``buckets_dp`` on one bucket given batch-major.

    Args:
        slot_log_probs: (B, N, K); mask: (B, N); label_mask: (B, K) (see
            ``BucketInputs`` for their meaning).
    Returns:
        ``DPResult`` with ``log_likelihood`` (B,) and ``posteriors`` (B, N, K).
    """
    inputs = BucketInputs(jnp.transpose(slot_log_probs, (1, 2, 0)), mask.T, label_mask.T)
    res = buckets_dp([inputs], with_posteriors)[0]
    return DPResult(res.log_likelihood, jnp.transpose(res.posteriors, (2, 0, 1)))


def _padded_inputs(
    logits: Array,
    mask: Array,
    labels: Array,
    label_mask: Array,
    log_leak: Array | None = None,
    optional: Array | None = None,
    known: Array | None = None,
):
    log_probs = jax.nn.log_softmax(logits, axis=-1)
    # A gather batched over bags, not one into the flattened (B * N * C) array: with the bag
    # axis sharded over devices (model.sharding), GSPMD keeps a batched gather local, where the
    # flat one made every device all-gather the whole bucket's log-probabilities.
    slots = jnp.take_along_axis(log_probs, labels[:, None, :], axis=-1)  # (B, N, K)
    if known is not None:  # a known label leaves its instance one slot: the joint p(Y, y_known)
        free = (known[..., None] < 0) | (known[..., None] == jnp.arange(labels.shape[-1]))
        slots = jnp.where(free, slots, -jnp.inf)
    inputs = BucketInputs(
        jnp.transpose(slots, (1, 2, 0)),
        mask.T,
        label_mask.T,
        None if log_leak is None else log_leak.T,
        None if optional is None else optional.T,
    )
    return log_probs, inputs


@jax.custom_vjp
def bucket_log_likelihood(
    logits: Array,
    mask: Array,
    labels: Array,
    label_mask: Array,
    log_leak: Array | None = None,
    optional: Array | None = None,
    known: Array | None = None,
) -> Array:
    """Bag log-likelihoods of a bucket, differentiable in ``logits`` and ``log_leak``.

    Args:
        logits: (B, N, C) instance class scores (``W x + beta``).
        mask: (B, N) bool, real instances.
        labels: (B, K) int, class of each label slot (any class where padded).
        label_mask: (B, K) bool, real slots, packed first.
        log_leak: (B, K) ``log eps`` of each slot's leak (``-inf``: none), or
            None (``dp.variants``): the start states of a noisy-OR union.
        optional: (B, K) bool, slots the bag may reach without naming them
            (a novel class), or None.
        known: (B, N) int, the slot of each instance's known label, -1 where
            unknown, or None: the likelihood is then the joint ``p(Y, y_known)``.
    Returns:
        (B,) ``log p(Y_b | X_b)``. The gradient w.r.t. ``logits`` is
        ``posterior - softmax`` on real instances, from the DP's backward pass
        rather than from differentiating through the scan; w.r.t. ``log_leak``
        it is ``(E[leaked] - eps) / (1 - eps)`` on real slots.
    """
    _, inputs = _padded_inputs(logits, mask, labels, label_mask, log_leak, optional, known)
    return buckets_dp([inputs], with_posteriors=False)[0].log_likelihood


def buckets_posteriors(
    buckets: Sequence[tuple[Array, Array, Array, Array]], fallback: bool = True
) -> tuple[list[DPResult], Array]:
    """``bucket_posteriors`` of several buckets in one DP call.

    The buckets share scans (by length) and one underflow fallback, so the
    compiled program is about as small as one bucket's: per-bucket calls
    would compile a scan and a fallback each.

    Args:
        buckets: per bucket ``(logits, mask, labels, label_mask[, log_leak,
            optional, known])`` as ``bucket_log_likelihood`` takes them.
        fallback: rerun bags near underflow in log space (exact). False runs
            probability space only (``buckets_dp_unchecked``): a smaller
            program, exact wherever the returned flag is True.
    Returns:
        Per bucket, ``DPResult`` with (B,) log-likelihoods, (B, N, C)
        posteriors and, with a leak, (B, K) each slot's chance of having
        leaked; and () whether every bag was resolved in probability
        space (always True with ``fallback``).
    """
    inputs = [_padded_inputs(*b)[1] for b in buckets]
    if fallback:
        results, resolved = buckets_dp(inputs, with_posteriors=True), jnp.asarray(True)
    else:
        results, resolved = buckets_dp_unchecked(inputs, with_posteriors=True)
    out = []
    for (logits, _, labels, label_mask, *_), res in zip(buckets, results):
        post = spread_slots(res.posteriors, labels.T, label_mask.T, logits.shape[-1])
        leaked = None if res.leak_posteriors is None else res.leak_posteriors.T
        out.append(DPResult(res.log_likelihood, jnp.swapaxes(post, 0, 1), leaked))
    return out, resolved


def bucket_posteriors(
    logits: Array,
    mask: Array,
    labels: Array,
    label_mask: Array,
    log_leak: Array | None = None,
    optional: Array | None = None,
    known: Array | None = None,
) -> DPResult:
    """Log-likelihoods (B,) and class posteriors (B, N, C) of a bucket.

    Arguments as ``bucket_log_likelihood``. ``posteriors[b, i, c]`` is
    ``p(y_bi = c | Y_b, X_b)``: zero for ``c`` outside ``Y_b`` and on padding.
    """
    return buckets_posteriors([(logits, mask, labels, label_mask, log_leak, optional, known)])[0][0]


def _bll_fwd(logits, mask, labels, label_mask, log_leak=None, optional=None, known=None):
    res = bucket_posteriors(logits, mask, labels, label_mask, log_leak, optional, known)
    score = jnp.where(mask[..., None], res.posteriors - jax.nn.softmax(logits, axis=-1), 0.0)
    leak_score = None
    if log_leak is not None:
        eps = jnp.exp(log_leak)
        leak_score = jnp.where(label_mask & (eps > 0), (res.leak_posteriors - eps) / (1.0 - eps), 0.0)
    return res.log_likelihood, (score, leak_score)


def _bll_bwd(saved: tuple[Array, Array | None], g: Array):
    score, leak_score = saved
    d_leak = None if leak_score is None else g[:, None] * leak_score
    return (g[:, None, None] * score, None, None, None, d_leak, None, None)


bucket_log_likelihood.defvjp(_bll_fwd, _bll_bwd)


class PairPosteriors(NamedTuple):
    """One instance position's pairwise slot posteriors in a bucket (``buckets_pair_posteriors``).

    Attributes:
        marginals: (B, N, K) ``p(y_m = slot l | Y_b, X_b)``, every instance's (zero on
            padding and padded slots).
        weights: (B, K) ``p(y_i = slot j | Y_b, X_b)`` for the position ``i`` asked for
            (zero where ``i`` is past the bucket's instances or a padded one).
        conditional: (B, K, N, K) ``p(y_m = slot l | y_i = slot j, Y_b, X_b)``, zero
            where the weight is zero (a slot instance ``i`` cannot take).
    """

    marginals: Array
    weights: Array
    conditional: Array


def _clamped(inputs: BucketInputs, instance: Array) -> BucketInputs:
    """``K + 1`` copies of each bag, bag-minor: copy 0 as given, copy ``j + 1`` with instance
    ``instance`` allowed slot ``j`` alone (a known label: its other slots at probability zero).

    Where the instance cannot take slot ``j`` (a padded slot, or another known label) copy
    ``j + 1`` is left as given: its weight is zero, and a bag of probability zero would
    read as one near underflow.
    """
    n, k, b = inputs.slot_log_probs.shape
    i = jnp.minimum(instance, n - 1)
    copies = k + 1
    row = lax.dynamic_index_in_dim(inputs.slot_log_probs, i, keepdims=False)  # (K, B)
    possible = inputs.label_mask & jnp.isfinite(row)  # (K, B)
    only = jnp.eye(k, dtype=bool)[:, :, None] | ~possible[:, None, :]  # (copy - 1, K, B)
    allowed = jnp.concatenate([jnp.ones((1, k, b), bool), only])  # (copy, K, B)
    rows = jnp.where(allowed, row[None], -jnp.inf)  # (copy, K, B)
    tiled = jnp.broadcast_to(inputs.slot_log_probs[:, :, None, :], (n, k, copies, b))
    at_i = jnp.arange(n)[:, None, None, None] == i
    slot_lp = jnp.where(at_i, jnp.transpose(rows, (1, 0, 2))[None], tiled).reshape(n, k, copies * b)

    def tile(a: Array | None) -> Array | None:
        return (
            None
            if a is None
            else jnp.broadcast_to(a[:, None, :], a.shape[:1] + (copies, b)).reshape(a.shape[0], copies * b)
        )

    return BucketInputs(
        slot_lp, tile(inputs.mask), tile(inputs.label_mask), tile(inputs.leak), tile(inputs.optional)
    )


def buckets_pair_posteriors(
    buckets: Sequence[tuple[Array, ...]], instance: Array, fallback: bool = True
) -> tuple[list[PairPosteriors], Array]:
    """Instance position ``instance``'s pairwise slot posteriors in every bag of several buckets.

    ``p(y_i = j, y_m = l | Y) = p(y_i = j | Y) p(y_m = l | y_i = j, Y)``: each bag runs
    the DP once as given and once for each slot ``j`` with instance ``i`` held at it
    (a known label), all buckets in one call (shared scans, as ``buckets_posteriors``).
    The Hessian of the log-likelihood needs these: the covariance of two instances'
    labels given the bag's label set (``model.curvature``). Cost: ``K + 1`` DPs a bag.

    Args:
        buckets: per bucket ``(logits, mask, labels, label_mask[, log_leak, optional,
            known])`` as ``bucket_log_likelihood`` takes them.
        instance: () int, the position ``i`` (past a bucket's ``N``: zero weights there).
        fallback: as ``buckets_posteriors``.
    Returns:
        Per bucket ``PairPosteriors``, and () whether every bag was resolved in
        probability space (always True with ``fallback``).
    """
    inputs = [_padded_inputs(*b)[1] for b in buckets]
    clamped = [_clamped(x, instance) for x in inputs]
    if fallback:
        results, resolved = buckets_dp(clamped, with_posteriors=True), jnp.asarray(True)
    else:
        results, resolved = buckets_dp_unchecked(clamped, with_posteriors=True)
    out = []
    for x, res in zip(inputs, results):
        n, k, b = x.slot_log_probs.shape
        post = jnp.transpose(res.posteriors.reshape(n, k, k + 1, b), (3, 2, 0, 1))  # (B, copy, N, K)
        marginals = post[:, 0]
        i = jnp.minimum(instance, n - 1)
        weights = jnp.where(instance < n, lax.dynamic_index_in_dim(marginals, i, axis=1, keepdims=False), 0.0)
        conditional = jnp.where(weights[:, :, None, None] > 0, post[:, 1:], 0.0)
        out.append(PairPosteriors(marginals, weights, conditional))
    return out, resolved
