"""Buckets laid side by side for the log-space fallback, so that it compiles as fewer DPs.

The fallback (``subset_dp.buckets_dp``) runs only when some bag of a batch
comes near underflow, so its run time matters less than its compiled size:
every bucket is a DP of its own in the program, about half a second of compile
each on a 2-core CPU, and the fallback sits in every program that takes a
gradient of the likelihood. Before it runs, buckets with neighbouring slot
counts are padded to one instance count ``N`` and slot count ``K`` and laid
side by side along the bag axis, while the merged bucket's padded work
``N * K * 2**K * B`` stays within ``MERGE_FACTOR`` times the work of the
buckets apart, or under ``SMALL_WORK``. Padding is exact (padded instances are
identity steps, padded slots have probability zero, and the extra states they
add are never reached), so no bag's values change.

The inputs are the DP's prepared buckets (``subset_dp._Prepared``): log
normaliser (B,), log slot probabilities (N, K, B), padding (N, B), target
subset (B,), log start states (2**K, B) or None, end states (2**K, B) or None.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import jax
import jax.numpy as jnp

Array = jax.Array

MERGE_FACTOR = 4
"""A fallback bucket may hold up to this many times its buckets' own work."""

SMALL_WORK = 1 << 16
"""Buckets merge anyway while the merged work stays under this many cells."""


def _work(n_steps: int, n_slots: int, n_bags: int) -> int:
    return n_steps * max(n_slots, 1) * (1 << n_slots) * n_bags


def merge_plan(shapes: Sequence[tuple[int, int, int]]) -> list[list[int]]:
    """Indices of buckets to merge, given each bucket's (N, K, B).

    Buckets are taken in order of ``K`` (then ``N``), and each joins the group
    before it while the group's padded work stays within ``MERGE_FACTOR``
    times its own buckets' work, or under ``SMALL_WORK``.
    """
    order = sorted(range(len(shapes)), key=lambda k: (shapes[k][1], shapes[k][0]))
    groups: list[list[int]] = []
    for k in order:
        if groups:
            members = groups[-1] + [k]
            apart = sum(_work(*shapes[m]) for m in members)
            merged = _work(
                max(shapes[m][0] for m in members),
                max(shapes[m][1] for m in members),
                sum(shapes[m][2] for m in members),
            )
            if merged <= MERGE_FACTOR * apart or merged <= SMALL_WORK:
                groups[-1] = members
                continue
        groups.append([k])
    return groups


def _states(states: Array | None, fill: Any, default: Callable[[], Array], n_states: int) -> Array:
    """(2**K, B) states padded with ``fill`` to (n_states, B); ``default()`` where None."""
    states = default() if states is None else states
    return jnp.pad(states, ((0, n_states - states.shape[0]), (0, 0)), constant_values=fill)


def merge(preps: Sequence[Any]) -> Any:
    """One prepared bucket holding ``preps``' bags side by side, in order.

    Start states are the empty set for a bucket without them (no leak), and
    end states its target alone for a bucket without them (no optional slot).
    """
    n_steps = max(p.log_q.shape[0] for p in preps)
    n_slots = max(p.log_q.shape[1] for p in preps)
    n_states = 1 << n_slots
    log_q = [
        jnp.pad(
            p.log_q,
            ((0, n_steps - p.log_q.shape[0]), (0, n_slots - p.log_q.shape[1]), (0, 0)),
            constant_values=-jnp.inf,
        )
        for p in preps
    ]
    pad = [jnp.pad(p.pad, ((0, n_steps - p.pad.shape[0]), (0, 0)), constant_values=1.0) for p in preps]
    log_start = ends = None
    if any(p.log_start is not None for p in preps):
        log_start = jnp.concatenate(
            [
                _states(
                    p.log_start,
                    -jnp.inf,
                    lambda p=p: jnp.log(_one_hot(jnp.zeros_like(p.target), p)),
                    n_states,
                )
                for p in preps
            ],
            axis=1,
        )
    if any(p.ends is not None for p in preps):
        ends = jnp.concatenate(
            [_states(p.ends, False, lambda p=p: _one_hot(p.target, p) > 0, n_states) for p in preps], axis=1
        )
    return type(preps[0])(
        jnp.concatenate([p.log_norm for p in preps]),
        jnp.concatenate(log_q, axis=2),
        jnp.concatenate(pad, axis=1),
        jnp.concatenate([p.target for p in preps]),
        log_start,
        ends,
    )


def _one_hot(index: Array, prep: Any) -> Array:
    """(2**K, B) one at each bag's ``index``, in ``prep``'s dtype."""
    return jax.nn.one_hot(index, 1 << prep.log_q.shape[1], dtype=prep.log_q.dtype).T


def split(merged: Any, preps: Sequence[Any]) -> list[Any]:
    """A merged bucket's ``DPResult`` cut back into one per bucket of ``preps``, in their shapes."""
    out, start = [], 0
    for p in preps:
        n_steps, n_slots, n_bags = p.log_q.shape
        cols = slice(start, start + n_bags)
        leaked = merged.leak_posteriors
        out.append(
            type(merged)(
                merged.log_likelihood[cols],
                merged.posteriors[:n_steps, :n_slots, cols],
                None if leaked is None or p.log_start is None else leaked[:n_slots, cols],
            )
        )
        start += n_bags
    return out
