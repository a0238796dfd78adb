"""Start and end states of the subset DP for models that break the plain union (issue 12).

The plain DP starts from the empty set and ends at the bag's full label set
``Y``. Two relaxations keep it exact with the same passes:

- **Leaky labels** (noisy-OR): a label of ``Y`` may be switched on by a leak,
  with probability ``eps_j``, instead of by an instance. The leaks are
  independent of the instances, so they set the *start* state: the
  distribution over which slots are on before any instance,

      alpha_0(S) = prod_{j in S} eps_j * prod_{j not in S} (1 - eps_j).

  The leak's chance of switching on a class outside ``Y`` is no part of the
  DP: the caller adds ``sum_{c not in Y} log(1 - eps_c)``.
- **Optional slots** (a novel or background class): a slot the instances may
  take but the bag does not name. The DP then *ends* at every set that holds
  every required slot and any optional ones, and the likelihood sums those
  final states::

      p(Y | X) = prod_i Q_i * sum_{S : req ⊆ S ⊆ req ∪ opt} alpha_N(S).

The backward pass starts from the same indicator, ``beta_N(S) = [S is an end
state]``, so the posteriors need no other change. Shapes as in ``subset_dp``:
(K, B) per-slot inputs, (2**K, B) states, bag-minor.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

Array = jax.Array


def _bits(n_slots: int, j: int, dtype) -> Array:
    """(2**K, 1) one where slot ``j`` is in S."""
    return jnp.asarray(((np.arange(1 << n_slots) >> j) & 1)[:, None], dtype)


def log_leak_start(log_leak: Array, label_mask: Array) -> Array:
    """(2**K, B) ``log alpha_0(S)``: each real slot on with its leak probability, independently.

    Args:
        log_leak: (K, B) ``log eps_j`` (``-inf``: the slot never leaks).
        label_mask: (K, B) bool, real slots; padding slots never leak.
    """
    dtype = log_leak.dtype
    log_leak = jnp.where(label_mask, log_leak, -jnp.inf)
    log_off = jnp.log1p(-jnp.exp(log_leak))  # log(1 - eps), exact for small eps
    n_slots = log_leak.shape[0]
    out = jnp.zeros((1 << n_slots, log_leak.shape[1]), dtype)
    for j in range(n_slots):
        on = _bits(n_slots, j, dtype) > 0
        out = out + jnp.where(on, log_leak[j], log_off[j])
    return out


def end_states(label_mask: Array, optional: Array) -> Array:
    """(2**K, B) bool: the sets S with every required slot and no padding slot.

    Args:
        label_mask: (K, B) bool, real slots.
        optional: (K, B) bool, real slots a bag need not reach.
    """
    n_slots = label_mask.shape[0]
    required = label_mask & ~optional
    ok = jnp.ones((1 << n_slots, label_mask.shape[1]), bool)
    for j in range(n_slots):
        on = _bits(n_slots, j, jnp.int32) > 0
        ok = ok & jnp.where(on, label_mask[j], ~required[j])
    return ok


def slot_totals(states: Array) -> Array:
    """(2**K, B) weights of the subsets -> (K, B) the total weight of the sets holding each slot.

    Applied to the start states' posterior, the chance that each slot leaked.
    """
    n_slots = int(states.shape[0]).bit_length() - 1
    bits = (np.arange(1 << n_slots)[None, :] >> np.arange(n_slots)[:, None]) & 1  # (K, 2**K)
    return jnp.asarray(bits, states.dtype) @ states
