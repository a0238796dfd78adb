"""Exact subset dynamic program for the ORed-logistic bag likelihood.

A bag holds ``N`` instances, each with a hidden label drawn independently from
its own categorical distribution; the bag's label set ``Y`` is the union of the
instance labels. Let the bag's own labels be the slots ``0..K-1``. The DP state
after ``i`` instances is the distribution, over the ``2**K`` subsets ``S`` of
the slots, of the union of the first ``i`` labels *given that every one of
them lies in Y*::

    alpha_i(S) = sum_{j in S} q_ij * (alpha_{i-1}(S) + alpha_{i-1}(S \\ {j}))

with ``q_ij = p(y_i = Y[j]) / Q_i`` and ``Q_i = sum_j p(y_i = Y[j])``. Because
``q_i`` is normalised, every step is a stochastic map: ``alpha_i`` stays a
probability vector, and the per-step log-normaliser is ``log Q_i``, known
before the scan starts, so it is summed outside it::

    log p(Y | X) = sum_i log Q_i + log alpha_N(Y).

The backward pass ``beta_{i-1}(S) = sum_j q_ij beta_i(S | {j})`` with
``beta_N = [S == Y]`` gives every instance posterior in one more linear pass::

    p(y_i = Y[j] | Y, X) = q_ij * sum_S alpha_{i-1}(S) beta_i(S | {j}) / alpha_N(Y).

Both passes cost ``O(N K 2**K)`` per bag. They run in probability space,
which is cheap; when ``alpha_N(Y)`` comes near the float's underflow range (a
label of ``Y`` that the model finds astronomically unlikely) the buckets are
recomputed in log space, which is exact for any finite logits.

Layout. The passes work on *buckets* of ``B`` bags padded to ``N`` instances
and ``K`` label slots, time-major and bag-minor: slot probabilities are
(N, K, B) and DP states (2**K, B). Keeping the bag axis minor turns every
reduction over slots or subsets into a loop over a major axis, which XLA fuses
with its neighbours. Padded instances (``mask`` False) are identity steps and
padded slots (``label_mask`` False) have probability zero: neither changes a
result.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from .merging import merge, merge_plan, split
from .variants import end_states, log_leak_start, slot_totals

Array = jax.Array


# -- the passes in log space, the fallback near underflow --
#
# They run only for bags whose probability-space pass came near underflow, so
# they are written for a small program rather than for speed: every slot at
# once through (K, 2**K) index tables, not one unrolled bit view per slot.
# Unrolled, they doubled the DP's compile time. Shapes as in the passes below:
# states (2**K, B), log slot probabilities (K, B) a step, log padding (B,).


def _log_plus(a: Array, b: Array) -> Array:
    # Plain logaddexp: these passes are never differentiated (the VJP is
    # written by hand), so jnp.logaddexp's gradient guards only cost compile time.
    top = jnp.maximum(a, b)
    safe = jnp.where(jnp.isneginf(top), 0.0, top)
    return safe + jnp.log(jnp.exp(a - safe) + jnp.exp(b - safe))


def _slot_tables(n_slots: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(K, 2**K) constants: whether slot ``j`` is in S, ``S ^ {j}`` and ``S | {j}``."""
    subsets, bits = np.arange(1 << n_slots)[None, :], (1 << np.arange(n_slots))[:, None]
    return (subsets & bits) > 0, subsets ^ bits, subsets | bits


def _lse(x: Array, axis: int) -> Array:
    """``log sum exp`` over ``axis`` with XLA's reduce ops, compact to compile."""
    top = jnp.max(x, axis=axis, keepdims=True)
    safe = jnp.where(jnp.isneginf(top), 0.0, top)
    return jnp.squeeze(safe, axis) + jnp.log(jnp.sum(jnp.exp(x - safe), axis=axis))


def _log_forward_step(alpha: Array, q_i: Array, pad_i: Array) -> Array:
    """``_forward_step`` in log space: (2**K, B) states, (K, B) log slot probabilities, (B,) log padding."""
    has, flip, _ = _slot_tables(q_i.shape[0])
    lq = jnp.where(has[..., None], q_i[:, None, :], -jnp.inf)  # (K, 2**K, B)
    stay = _log_plus(_lse(lq, axis=0), pad_i)
    return _log_plus(alpha + stay, _lse(lq + alpha[flip], axis=0))


def _log_backward_step(beta: Array, q_i: Array, pad_i: Array) -> Array:
    """``_backward_step`` in log space."""
    _, _, union = _slot_tables(q_i.shape[0])
    return _log_plus(pad_i + beta, _lse(q_i[:, None, :] + beta[union], axis=0))


def _log_joint(log_q: Array, alpha: Array, beta: Array) -> Array:
    """Log of ``q_ij sum_S alpha_{i-1}(S) beta_i(S | {j})``, (N, K, B), one slot at a time."""
    _, _, union = _slot_tables(log_q.shape[1])

    def _slot(j: Array) -> Array:
        return _lse(alpha[:-1] + jnp.take(beta[1:], jnp.asarray(union)[j], axis=1), axis=1)  # (N, B)

    return log_q + jnp.moveaxis(lax.map(_slot, jnp.arange(log_q.shape[1])), 0, 1)


class DPResult(NamedTuple):
    """Output of the subset DP on a bucket.

    Attributes:
        log_likelihood: (B,) ``log p(Y_b | X_b)``.
        posteriors: ``p(y_bi = Y_b[j] | Y_b, X_b)``, (N, K, B) from
            ``buckets_dp`` and (B, N, K) from ``bucket_dp``; slots of a real
            instance sum to one, padded instances and slots are zero.
        leak_posteriors: (K, B) ``p(slot j leaked | Y_b, X_b)`` with a leak
            (``BucketInputs.leak``) and posteriors; else None.
    """

    log_likelihood: Array
    posteriors: Array
    leak_posteriors: Array | None = None


class BucketInputs(NamedTuple):
    """One bucket's DP inputs, time-major and bag-minor.

    Attributes:
        slot_log_probs: (N, K, B) ``log p(y_bi = Y_b[j] | x_bi)``: the
            log-softmax of each instance at each of its bag's labels. It is not
            normalised over the slots: the mass outside ``Y_b`` is what makes
            ``p(Y_b)`` small.
        mask: (N, B) bool, True for real instances.
        label_mask: (K, B) bool, True for the bag's real label slots, packed
            first (slot ``j`` real implies slot ``j - 1`` real).
        leak: (K, B) ``log eps_j``, the chance that a leak rather than an
            instance switches slot ``j`` on (``-inf``: never), or None for
            no leak (``variants.log_leak_start``).
        optional: (K, B) bool, real slots the instances may take but the bag
            need not reach (a novel class), or None (``variants.end_states``).
    """

    slot_log_probs: Array
    mask: Array
    label_mask: Array
    leak: Array | None = None
    optional: Array | None = None


class _Semiring(NamedTuple):
    """The (plus, times) pair a pass runs in: probabilities or their logs."""

    times: Callable[[Array, Array], Array]
    plus: Callable[[Array, Array], Array]
    total: Callable[..., Array]  # plus-reduction over an axis
    embed: Callable[[Array], Array]  # a probability into this semiring


_UNROLL_REDUCE = 16
"""Axes up to this long are reduced as a chain of slices, which XLA fuses into
the producer's loop; a reduce op on CPU costs a separate, slow kernel."""


def _reduce(op: Callable[[Array, Array], Array], x: Array, axis: int, fallback: Callable) -> Array:
    # Longer even axes (the 2**K subsets) are first halved pairwise: the halves'
    # sums fuse too, whereas XLA's CPU reduce kernel on the subset axis took
    # two thirds of a gradient on Letter Frost (K = 10, a 1024-long axis).
    while x.shape[axis] > _UNROLL_REDUCE and x.shape[axis] % 2 == 0:
        half = x.shape[axis] // 2
        x = op(lax.slice_in_dim(x, 0, half, axis=axis), lax.slice_in_dim(x, half, 2 * half, axis=axis))
    if x.shape[axis] > _UNROLL_REDUCE:
        return fallback(x, axis=axis)
    parts = [lax.index_in_dim(x, i, axis, keepdims=False) for i in range(x.shape[axis])]
    out = parts[0]
    for part in parts[1:]:
        out = op(out, part)
    return out


def _sum(x: Array, axis: int) -> Array:
    return _reduce(jnp.add, x, axis, jnp.sum)


def _log_total(x: Array, axis: int) -> Array:
    top = jnp.expand_dims(_reduce(jnp.maximum, x, axis, jnp.max), axis)
    safe = jnp.where(jnp.isneginf(top), 0.0, top)
    return jnp.squeeze(safe, axis) + jnp.log(_sum(jnp.exp(x - safe), axis))


_PROB = _Semiring(jnp.multiply, jnp.add, _sum, lambda p: p)
_LOG = _Semiring(jnp.add, _log_plus, _log_total, jnp.log)


def _bit_view(states: Array, j: int) -> Array:
    """View (..., 2**K, B) states as (..., 2**(K-1-j), 2, 2**j, B).

    Axis -3 of the view is slot ``j``'s bit. Static slices of this view stand
    in for index gathers, so XLA fuses a whole DP step into one loop.
    """
    *lead, n_states, n_bags = states.shape
    return states.reshape(*lead, n_states >> (j + 1), 2, 1 << j, n_bags)


def _slot_bits(n_states: int, j: int, dtype) -> Array:
    """(2**K, 1) constant: one where slot ``j`` is in S, zero elsewhere."""
    return jnp.asarray(((np.arange(n_states) >> j) & 1)[:, None], dtype)


def _without(sr: _Semiring, states: Array, j: int) -> Array:
    """``states[S \\ {j}]`` where ``j in S``; the semiring's zero elsewhere.

    Flipping the size-2 bit axis maps S to S ^ {j}; a constant mask then
    zeroes the sets without j. Both fuse into the step's loop (a concatenate
    would not).
    """
    flipped = jnp.flip(_bit_view(states, j), axis=-3).reshape(states.shape)
    return sr.times(flipped, sr.embed(_slot_bits(states.shape[-2], j, states.dtype)))


def _with(states: Array, j: int) -> Array:
    """``states[S | {j}]`` for every S."""
    v = _bit_view(states, j)
    return jnp.broadcast_to(v[..., 1:, :, :], v.shape).reshape(states.shape)


def _subset_totals(sr: _Semiring, q: Array) -> Array:
    """(..., K, B) slot values -> (..., 2**K, B) their plus over each subset."""
    n_slots = q.shape[-2]
    out = None
    for j in range(n_slots):
        term = sr.times(q[..., j : j + 1, :], sr.embed(_slot_bits(1 << n_slots, j, q.dtype)))
        out = term if out is None else sr.plus(out, term)
    return out


def _forward_step(sr: _Semiring, alpha: Array, q_i: Array, pad_i: Array) -> Array:
    """One instance: (2**K, B) states, (K, B) slot probabilities, (B,) padding."""
    # Stay at S when the label is already in S (or the step is padding).
    new = sr.times(alpha, sr.plus(_subset_totals(sr, q_i[None])[0], pad_i))
    for j in range(q_i.shape[0]):
        # Reach S by adding slot j (in S) to S \ {j}.
        new = sr.plus(new, sr.times(q_i[j], _without(sr, alpha, j)))
    return new


def _backward_step(sr: _Semiring, beta: Array, q_i: Array, pad_i: Array) -> Array:
    """``beta_{i-1}(S) = sum_j q_ij beta_i(S | {j})`` (+ identity on padding)."""
    new = sr.times(pad_i, beta)
    for j in range(q_i.shape[0]):
        new = sr.plus(new, sr.times(q_i[j], _with(beta, j)))
    return new


def _forward_pass(
    sr: _Semiring,
    qs: Sequence[Array],
    pads: Sequence[Array],
    keep_history: bool,
    starts: Sequence[Array | None],
) -> list[Array]:
    """Forward recursion in semiring ``sr``, for buckets sharing one loop.

    Args:
        qs: per bucket, (N, K_k, B_k) normalised slot probabilities.
        pads: per bucket, (N, B_k) one on padded instances (identity steps).
        keep_history: return every state, not just the last.
        starts: per bucket, (2**K_k, B_k) log start states, or None for the empty set.
    Returns:
        Per bucket, (N + 1, 2**K_k, B_k) the states ``alpha_0 .. alpha_N``, or
        (1, 2**K_k, B_k) ``alpha_N`` alone without ``keep_history``.
    """
    alpha0 = [
        sr.embed(jnp.zeros((1 << q.shape[1], q.shape[2]), q.dtype).at[0].set(1.0))
        if start is None
        else (start if sr is _LOG else jnp.exp(start))
        for q, start in zip(qs, starts)
    ]
    step = _log_forward_step if sr is _LOG else functools.partial(_forward_step, sr)
    if keep_history:
        return _history_loop(step, alpha0, qs, pads, reverse=False)

    def _scan_step(alphas: list[Array], inputs: tuple[list[Array], list[Array]]):
        return [step(a, q_i, pad_i) for a, q_i, pad_i in zip(alphas, *inputs)], None

    final, _ = lax.scan(_scan_step, alpha0, (list(qs), list(pads)))
    return [f[None] for f in final]


def _backward_pass(
    sr: _Semiring,
    qs: Sequence[Array],
    pads: Sequence[Array],
    alphas: Sequence[Array],
    ends: Sequence[Array],
) -> tuple[list[Array], list[Array]]:
    """Backward recursion; returns the unnormalised joint ``p(y_i = Y[j], Y)``, and ``beta_0``.

    Args (per bucket, sharing one loop):
        qs: (N, K, B), pads: (N, B), alphas: (N + 1, 2**K, B), in semiring
        ``sr``; ends: (2**K, B) ``beta_N``, one on each bag's end states, in ``sr``.
    Returns:
        Per bucket, (N, K, B) joint ``q_ij * sum_S alpha_{i-1}(S) beta_i(S | {j})``;
        and per bucket (2**K, B) ``beta_0``, which weighs the start states.
    """
    step = _log_backward_step if sr is _LOG else functools.partial(_backward_step, sr)
    betas = _history_loop(step, list(ends), qs, pads, reverse=True)
    if sr is _LOG:
        return [_log_joint(q, alpha, beta) for q, alpha, beta in zip(qs, alphas, betas)], [
            b[0] for b in betas
        ]
    out = []
    for q, alpha, beta in zip(qs, alphas, betas):
        # The joint needs no carry, so it runs for all steps at once, off the loop.
        joint = [sr.total(sr.times(alpha[:-1], _with(beta[1:], j)), axis=1) for j in range(q.shape[1])]
        out.append(sr.times(q, jnp.stack(joint, axis=1)))
    return out, [b[0] for b in betas]


class _Prepared(NamedTuple):
    """Inputs of both passes."""

    log_norm: Array  # (B,) sum_i log Q_i
    log_q: Array  # (N, K, B) log normalised slot probabilities (-inf where absent)
    pad: Array  # (N, B) one on padded instances
    target: Array  # (B,) subset index of the full label set
    log_start: Array | None  # (2**K, B) log alpha_0 under leaks; None: the empty set
    ends: Array | None  # (2**K, B) bool end states with optional slots; None: the target alone


def _prepare(bucket: BucketInputs) -> _Prepared:
    lp, mask, label_mask = bucket.slot_log_probs, bucket.mask, bucket.label_mask
    neg_inf = jnp.asarray(-jnp.inf, lp.dtype)
    lp = jnp.where(label_mask[None], lp, neg_inf)
    log_q_tot = _log_total(lp, axis=1)  # (N, B)
    # Padded rows normalise by one so that nothing non-finite enters a pass.
    log_q_tot = jnp.where(mask, log_q_tot, 0.0)
    # An empty label set leaves Q_i = 0: keep -inf, not NaN, in the passes.
    live = mask & jnp.isfinite(log_q_tot)
    log_q = jnp.where(live[:, None], lp - log_q_tot[:, None], neg_inf)
    n_labels = _sum(label_mask.astype(jnp.int32), axis=0)
    # Slots are packed first, so the full set is the low ``n_labels`` bits.
    target = (jnp.left_shift(1, n_labels) - 1).astype(jnp.int32)
    log_start = None if bucket.leak is None else log_leak_start(bucket.leak.astype(lp.dtype), label_mask)
    ends = None if bucket.optional is None else end_states(label_mask, bucket.optional)
    return _Prepared(jnp.sum(log_q_tot, axis=0), log_q, 1.0 - mask.astype(lp.dtype), target, log_start, ends)


def _end_states(sr: _Semiring, p: _Prepared) -> Array:
    """(2**K, B) ``beta_N`` in ``sr``: one on the end states (the full label set alone, by default)."""
    n_states = 1 << p.log_q.shape[1]
    ends = jax.nn.one_hot(p.target, n_states, dtype=bool).T if p.ends is None else p.ends
    return sr.embed(ends.astype(p.log_q.dtype))


def _run(sr: _Semiring, preps: Sequence[_Prepared], with_posteriors: bool) -> list[DPResult]:
    """Both passes for buckets that share one scan of the longest one's length.

    Shorter buckets get identity steps at the end, which change nothing.
    """
    n_steps = max(p.log_q.shape[0] for p in preps)
    qs, pads = [], []
    for p in preps:
        extra = n_steps - p.log_q.shape[0]
        log_q = jnp.pad(p.log_q, ((0, extra), (0, 0), (0, 0)), constant_values=-jnp.inf)
        q = jnp.exp(log_q) if sr is _PROB else log_q
        pad = sr.embed(jnp.pad(p.pad, ((0, extra), (0, 0)), constant_values=1.0))
        qs.append(q)
        pads.append(pad)
    alphas = _forward_pass(sr, qs, pads, with_posteriors, [p.log_start for p in preps])
    finals = [
        jnp.take_along_axis(a[-1], p.target[None], axis=0)[0]
        if p.ends is None
        else sr.total(sr.times(a[-1], _end_states(sr, p)), axis=0)
        for a, p in zip(alphas, preps)
    ]
    log_finals = [f if sr is _LOG else jnp.log(f) for f in finals]
    if not with_posteriors:
        return [DPResult(p.log_norm + lf, jnp.zeros_like(p.log_q)) for p, lf in zip(preps, log_finals)]
    joints, beta0s = _backward_pass(sr, qs, pads, alphas, [_end_states(sr, p) for p in preps])
    out = []
    for p, joint, alpha, beta0, f, lf in zip(preps, joints, alphas, beta0s, finals, log_finals):
        joint = joint[: p.log_q.shape[0]]
        post = jnp.exp(joint - lf) if sr is _LOG else joint / f
        leaked = None
        if p.log_start is not None:  # the start states' posterior, alpha_0 beta_0 / p
            start = jnp.exp(alpha[0] + beta0 - lf) if sr is _LOG else alpha[0] * beta0 / f
            leaked = slot_totals(start)
        out.append(DPResult(p.log_norm + lf, post, leaked))
    return out


def _one_label(p: _Prepared) -> bool:
    """One required slot and nothing else: every instance takes it, and no DP is needed."""
    return p.log_q.shape[1] == 1 and p.ends is None and p.log_start is None


def _resolved(fast: DPResult, prep: _Prepared) -> Array:
    """(B,) whether the probability-space pass resolved each bag to ~eps.

    Values under ``tiny`` flush to zero. At most ``N * 2**K`` of them are lost,
    each weighing less than ``tiny``, so a final mass above ``N * 2**K *
    tiny / eps`` keeps its relative error within one ulp.
    """
    info = jnp.finfo(fast.log_likelihood.dtype)
    n_steps, n_slots = prep.log_q.shape[:2]
    floor = float(info.tiny) / float(info.eps) * n_steps * 2**n_slots
    return fast.log_likelihood - prep.log_norm >= np.log(floor)


def _probability_pass(
    buckets: Sequence[BucketInputs], with_posteriors: bool
) -> tuple[list[_Prepared], list[list[int]], list[DPResult], dict[int, Array]]:
    """All buckets in probability space: inputs, scan groups, results, (B_k,) resolved flags per DP bucket."""
    preps = [_prepare(b) for b in buckets]
    # One label: every instance must take it; no DP is needed.
    results: list[DPResult | None] = [
        DPResult(p.log_norm, (1.0 - p.pad)[:, None, :]) if _one_label(p) else None for p in preps
    ]
    groups = _scan_groups([p.log_q.shape[0] if r is None else 0 for p, r in zip(preps, results)])
    for group in groups:
        for k, res in zip(group, _run(_PROB, [preps[k] for k in group], with_posteriors)):
            results[k] = res
    flags = {k: _resolved(results[k], preps[k]) for group in groups for k in group}
    return preps, groups, results, flags


def buckets_dp(buckets: Sequence[BucketInputs], with_posteriors: bool = True) -> list[DPResult]:
    """Exact log-likelihoods and instance posteriors for several buckets.

    Each bucket runs in probability space. If any bag of any bucket comes near
    underflow, a single ``lax.cond`` reruns the buckets in log space (buckets
    of neighbouring sizes merged, ``dp.merging``) and takes the log-space
    values for the unresolved bags, so the common case pays one predicate for
    the whole batch.

    Args:
        buckets: ``BucketInputs`` of shapes (N_k, K_k, B_k), (N_k, B_k), (K_k, B_k).
        with_posteriors: also run the backward pass.
    Returns:
        One ``DPResult`` per bucket, ``log_likelihood`` (B_k,) and
        ``posteriors`` (N_k, K_k, B_k) (zeros without ``with_posteriors``). A
        bag with more labels than instances gets ``-inf`` and NaN posteriors.
    """
    preps, _, results, flags = _probability_pass(buckets, with_posteriors)
    if not flags:
        return results

    def _robust() -> list[DPResult]:
        # Neighbouring buckets run merged (``dp.merging``): fewer DPs to compile, on a rare path.
        dp_buckets = list(flags)
        members = [[dp_buckets[i] for i in g] for g in merge_plan([preps[k].log_q.shape for k in dp_buckets])]
        merged = [merge([preps[k] for k in m]) for m in members]
        out = list(results)
        for group in _scan_groups([m.log_q.shape[0] for m in merged]):
            for g, exact in zip(group, _run(_LOG, [merged[g] for g in group], with_posteriors)):
                for k, exact_k in zip(members[g], split(exact, [preps[k] for k in members[g]])):
                    out[k] = jax.tree.map(lambda f, e, ok=flags[k]: jnp.where(ok, f, e), results[k], exact_k)
        return out

    return lax.cond(jnp.all(jnp.concatenate(list(flags.values()))), lambda: results, _robust)


def buckets_dp_unchecked(
    buckets: Sequence[BucketInputs], with_posteriors: bool = True
) -> tuple[list[DPResult], Array]:
    """``buckets_dp`` in probability space only, and () whether every bag was resolved there.

    Where the flag is False some bag came near underflow and its results are
    inexact: rerun with ``buckets_dp``. The log-space fallback is about half of
    the compiled DP, so a loop that runs the DP many times (EM) can compile
    this one and fall back, outside its loop, only when the flag says so.
    """
    _, _, results, flags = _probability_pass(buckets, with_posteriors)
    if not flags:
        return results, jnp.asarray(True)
    return results, jnp.all(jnp.concatenate(list(flags.values())))


# -- how the passes loop: over instances (one lax.scan), and buckets grouped into scans --


def _history_loop(
    step: Callable[[Array, Array, Array], Array],
    first: Sequence[Array],
    qs: Sequence[Array],
    pads: Sequence[Array],
    reverse: bool,
) -> list[Array]:
    """Run ``step`` over the instances, writing every state into (N + 1, ...) buffers.

    The state is read back from its buffer rather than carried beside it, so
    each step is one in-place fused kernel per bucket (a scan that carries the
    state and also emits it copies it every step).
    """
    n = qs[0].shape[0]
    start = n if reverse else 0
    bufs = [jnp.zeros((n + 1,) + f.shape, f.dtype).at[start].set(f) for f in first]

    def _body(bufs: list[Array], k: Array) -> tuple[list[Array], None]:
        src = n - k if reverse else k
        dst = src - 1 if reverse else src + 1
        i = src - 1 if reverse else src  # the instance consumed
        out = []
        for buf, q, pad in zip(bufs, qs, pads):
            state = lax.dynamic_index_in_dim(buf, src, keepdims=False)
            q_i = lax.dynamic_index_in_dim(q, i, keepdims=False)
            pad_i = lax.dynamic_index_in_dim(pad, i, keepdims=False)
            out.append(lax.dynamic_update_index_in_dim(buf, step(state, q_i, pad_i), dst, 0))
        return out, None

    return lax.scan(_body, bufs, jnp.arange(n))[0]


def _scan_groups(lengths: Sequence[int]) -> list[list[int]]:
    """Indices of buckets (length > 0) grouped to share a scan.

    A bucket joins the group of the next longer one when it has at least half
    its length, so that shared scans at most double a bucket's steps while
    paying each loop's overhead once.
    """
    order = sorted((n, k) for k, n in enumerate(lengths) if n > 0)[::-1]
    groups: list[list[int]] = []
    top = 0
    for n, k in order:
        if groups and 2 * n >= top:
            groups[-1].append(k)
        else:
            groups.append([k])
            top = n
    return groups
