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


def _labelling_mass(logits, label_set, optional=(), leak=None, known=None) -> tuple[np.ndarray, np.ndarray]:
    """Every labelling of the instances (L, n) and each one's probability times the chance that it, with
    some leak pattern, makes ``label_set`` (L,): the enumeration ``brute_force_variants`` and
    ``brute_force_pairs`` share (arguments as theirs)."""
    logits = np.asarray(logits, dtype=np.float64)
    n, c = logits.shape
    target, extra = [int(y) for y in label_set], set(int(o) for o in optional)
    eps = dict(zip(target, [0.0] * len(target) if leak is None else [float(e) for e in leak]))
    lp = log_softmax(logits, axis=1)
    known = [-1] * n if known is None else [int(k) for k in known]
    choices = [range(c) if k < 0 else [k] for k in known]
    labellings = np.array(list(itertools.product(*choices)))
    weights = lp[np.arange(n), labellings].sum(axis=1)
    mass = np.zeros(len(labellings))
    for on in itertools.product([False, True], repeat=len(target)):
        leaked = {y for y, o in zip(target, on) if o}
        p_leak = np.prod([eps[y] if o else 1.0 - eps[y] for y, o in zip(target, on)])
        if p_leak == 0.0:
            continue
        hit = np.array([(set(row.tolist()) - extra) | leaked == set(target) for row in labellings])
        mass += p_leak * hit
    with np.errstate(divide="ignore"):
        return labellings, weights + np.log(mass)


def brute_force_variants(logits, label_set, optional=(), leak=None, known=None) -> tuple[float, np.ndarray]:
    """Enumerate labellings and leak patterns of the relaxed union: (log p, (n, C) posteriors), float64.

    ``optional``: classes the instances may take without the bag naming them
    (a novel class). ``leak``: per class of ``label_set``, the probability
    that a leak, not an instance, switches it on (only the leak pattern on
    ``label_set`` counts: the factor for the other classes is the caller's).
    ``known``: per instance a class, or -1; a known instance takes its class
    (the likelihood is then the joint one of the label set and those labels).
    """
    n, c = np.shape(logits)
    labellings, log_w = _labelling_mass(logits, label_set, optional, leak, known)
    if not np.any(np.isfinite(log_w)):
        return -np.inf, np.full((n, c), np.nan)
    ll = logsumexp(log_w)
    share = np.exp(log_w - ll)
    post = np.stack([np.bincount(labellings[:, i], share, minlength=c) for i in range(n)])
    return float(ll), post


def brute_force_variants_jax(logits, label_set, optional, log_leak, known):
    """``brute_force_variants``' log p as a jax function of (logits (n, C), log_leak (|Y|,) or None).

    Written with ``jax.numpy`` so that ``jax.grad`` gives the reference
    gradients; the enumeration is over every labelling and leak pattern.
    """
    import jax.numpy as jnp
    from jax.scipy.special import logsumexp as jlogsumexp

    n, c = logits.shape
    target, extra = [int(y) for y in label_set], set(int(o) for o in optional)
    choices = [range(c) if k < 0 else [int(k)] for k in known]
    labellings = np.array(list(itertools.product(*choices)))
    lp = logits - jlogsumexp(logits, axis=1, keepdims=True)
    weights = lp[np.arange(n), labellings].sum(axis=1)
    terms = []
    for on in itertools.product([False, True], repeat=len(target)):
        if log_leak is None and any(on):
            continue
        leaked = {y for y, o in zip(target, on) if o}
        hit = np.array([(set(row.tolist()) - extra) | leaked == set(target) for row in labellings])
        if not hit.any():
            continue
        log_p = 0.0
        if log_leak is not None:
            off = jnp.log1p(-jnp.exp(log_leak))
            log_p = sum(log_leak[j] if o else off[j] for j, o in enumerate(on))
        terms.append(jlogsumexp(weights[hit]) + log_p)
    return jlogsumexp(jnp.stack(terms)) if terms else jnp.asarray(-jnp.inf)


def brute_force_pairs(logits, label_set, optional=(), leak=None, known=None) -> np.ndarray:
    """(n, C, n, C) joint posteriors ``p(y_i = c, y_m = c' | Y)`` by enumeration, as
    ``brute_force_variants`` (the same labellings and leak patterns), float64."""
    c = np.shape(logits)[1]
    labellings, log_w = _labelling_mass(logits, label_set, optional, leak, known)
    w = np.exp(log_w - logsumexp(log_w))
    onehot = np.eye(c)[labellings]  # (L, n, C)
    return np.einsum("l,lia,lmb->iamb", w, onehot, onehot)
