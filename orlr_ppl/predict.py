"""Instance predictions from fitted weights."""

from __future__ import annotations

from collections.abc import Iterable, Sequence

import numpy as np
from scipy.special import softmax

from .bags import DEFAULT_MAX_LABELS, instance_posteriors
from .model import check_features


def instance_logits(W: np.ndarray, beta: np.ndarray, bags: Sequence[np.ndarray]) -> list[np.ndarray]:
    """B arrays (n_b, C) of class scores ``x W + beta``."""
    feats = check_features(bags, W.shape[0])
    return [x @ W + beta for x in feats]


def predict_proba_inductive(W: np.ndarray, beta: np.ndarray, bags: Sequence[np.ndarray]) -> list[np.ndarray]:
    """``p(y = c | x)`` for every instance: B arrays (n_b, C)."""
    return [softmax(z, axis=1) for z in instance_logits(W, beta, bags)]


def predict_proba_transductive(
    W: np.ndarray,
    beta: np.ndarray,
    bags: Sequence[np.ndarray],
    label_sets: Sequence[Iterable[int]],
    max_labels: int = DEFAULT_MAX_LABELS,
) -> list[np.ndarray]:
    """``p(y = c | Y_b, X_b)`` given each bag's label set (the DP posterior)."""
    return instance_posteriors(instance_logits(W, beta, bags), label_sets, max_labels)
