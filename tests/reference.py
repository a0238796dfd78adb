"""Independent reference computations for the DP tests (float64 / mpmath)."""

from __future__ import annotations

import itertools

import mpmath
import numpy as np
from scipy.special import log_softmax, logsumexp


def brute_force(logits: np.ndarray, label_set) -> tuple[float, np.ndarray]:
    """Enumerate all C**n labellings: (log p(Y), (n, C) posteriors), float64."""
    logits = np.asarray(logits, dtype=np.float64)
    n, c = logits.shape
    target = set(int(y) for y in label_set)
    lp = log_softmax(logits, axis=1)
    labellings = np.array(list(itertools.product(range(c), repeat=n)))
    weights = lp[np.arange(n), labellings].sum(axis=1)
    covers = np.array([set(row.tolist()) == target for row in labellings])
    if not covers.any():
        return -np.inf, np.full((n, c), np.nan)
    ll = logsumexp(weights[covers])
    share = np.exp(weights[covers] - ll)  # p(labelling | Y)
    post = np.stack([np.bincount(labellings[covers, i], share, minlength=c) for i in range(n)])
    return float(ll), post


def inclusion_exclusion_mp(logits: np.ndarray, label_set, dps: int = 60) -> float:
    """log p(Y) by inclusion-exclusion in mpmath at ``dps`` digits.

    ``p(Y) = sum_{S subset Y} (-1)^{|Y|-|S|} prod_i P(y_i in S)``: a different
    algorithm from the DP, exact given enough digits for the cancellation.
    """
    logits = np.asarray(logits, dtype=np.float64)
    labels = sorted(set(int(y) for y in label_set))
    with mpmath.workdps(dps):
        probs = []
        for row in logits:
            e = [mpmath.exp(mpmath.mpf(float(z))) for z in row]
            tot = mpmath.fsum(e)
            probs.append([e[k] / tot for k in labels])
        k = len(labels)
        total = mpmath.mpf(0)
        for mask in range(1, 1 << k):
            members = [j for j in range(k) if mask >> j & 1]
            log_term = mpmath.fsum(mpmath.log(mpmath.fsum(p[j] for j in members)) for p in probs)
            sign = -1 if (k - len(members)) % 2 else 1
            total += sign * mpmath.exp(log_term)
        return float(mpmath.log(total))
