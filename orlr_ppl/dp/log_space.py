"""The subset DP's passes in log space, the fallback near underflow.

They run only for bags whose probability-space pass came near underflow, so
they are written for a small program rather than for speed: every slot at
once through (K, 2**K) index tables, not one unrolled bit view per slot.
Unrolled, they doubled the DP's compile time. Shapes as in ``subset_dp``:
states (2**K, B), log slot probabilities (K, B) a step, log padding (B,).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

Array = jax.Array


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
