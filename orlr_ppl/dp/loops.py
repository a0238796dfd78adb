"""How the subset DP's passes loop: over instances (one ``lax.scan``), and buckets grouped into scans."""

from __future__ import annotations

from collections.abc import Callable, Sequence

import jax
import jax.numpy as jnp
from jax import lax

Array = jax.Array


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
