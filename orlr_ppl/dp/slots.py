"""Gather and scatter between classes and a bucket's label slots.

A bucket's DP works on slots ``0..K-1`` (each bag's own labels); these move
log-probabilities from class columns into slots and posteriors back out.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

Array = jax.Array


def slot_log_probs(log_probs: Array, rows: Array, labels: Array) -> Array:
    """Gather time-major slot log-probabilities from flat instance rows.

    Args:
        log_probs: (n_rows, C) log-softmax of every instance.
        rows: (N, B) row of each padded instance (any valid row on padding).
        labels: (K, B) class of each label slot (any valid class on padding).
    Returns:
        (N, K, B) ``log_probs[rows[i, b], labels[j, b]]``.
    """
    n_classes = log_probs.shape[1]
    return log_probs.reshape(-1)[rows[:, None, :] * n_classes + labels[None, :, :]]


def spread_slots(slot_values: Array, labels: Array, label_mask: Array, n_classes: int) -> Array:
    """(N, K, B) slot values -> (N, B, C) class values, zero off the labels."""
    out = jnp.zeros(slot_values.shape[:1] + slot_values.shape[2:] + (n_classes,), slot_values.dtype)
    classes = jnp.arange(n_classes)
    for j in range(slot_values.shape[1]):
        hit = (labels[j][:, None] == classes) & label_mask[j][:, None]  # (B, C)
        out = out + jnp.where(hit, slot_values[:, j, :, None], 0.0)
    return out
