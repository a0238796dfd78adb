"""Active annotation: which instances a person should label next (``ORLR.query``).

An instance's label is scored by how uncertain the model still is about it *after*
its bag's labels: the DP's transductive posterior ``q_s(c) = p(y_bi = c | Y_b, X_b,
theta_s)`` at each kept draw ``theta_s`` (one draw for EM/MAP), which also conditions on
the instance labels given so far. With ``p(c) = mean_s q_s(c)``:

* ``entropy``: ``H[p] = -sum_c p(c) log p(c)``, the total uncertainty (any fit);
* ``bald``: ``H[p] - mean_s H[q_s]``, the mutual information between the label and the
  weights (Houlsby et al. 2011): what labelling the instance would teach the weights.
  Only a posterior has it; a point fit's is zero;
* ``margin``: ``1 - (p_(1) - p_(2))``, one minus the gap between the two likeliest classes;
* ``random``: uniform scores, the baseline every strategy must beat.

A bag whose label set has one class leaves nothing uncertain (every score is 0 but
``random``'s), and an instance of a two-label bag is resolved once its bag-mate is
labelled, because the known label enters the DP. The batch takes **one instance per bag
first** (``diverse_order``): instances of one bag share its label set, so labelling one
moves its bag-mates' posteriors (in a two-label bag, fully), and the second-best
instance of a bag is mostly worth less than the best instance of another. Only once
every bag with a candidate has given one does a bag give a second.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal

import numpy as np
import pandas as pd

Strategy = Literal["bald", "entropy", "margin", "random"]
STRATEGIES: tuple[str, ...] = ("bald", "entropy", "margin", "random")
TOP_CLASSES = 3
"""``query``'s table lists each queried instance's likeliest classes, this many."""
KNOWN_LOGIT = -1e4
"""Logit of every other class of an instance with a known label: ``exp`` of it is exactly 0 in
float32 and float64, so the DP sees a point mass on the known class."""


def check_query(n: int, strategy: str) -> None:
    """A ValueError for a batch size that is not a positive whole number, or an unknown strategy."""
    if isinstance(n, bool) or not isinstance(n, int | np.integer) or n < 1:
        raise ValueError(f"n={n!r}: ask for a positive whole number of instances")
    if strategy not in STRATEGIES:
        raise ValueError(f"strategy={strategy!r}: choose one of {', '.join(STRATEGIES)}")


def entropy(p: np.ndarray, axis: int = -1) -> np.ndarray:
    """Shannon entropy (nats) along ``axis``, with ``0 log 0 = 0``."""
    p = np.asarray(p, np.float64)
    return -np.sum(np.where(p > 0, p * np.log(np.where(p > 0, p, 1.0)), 0.0), axis=axis)


def acquisition_scores(per_draw: np.ndarray, strategy: str, rng: np.random.Generator) -> np.ndarray:
    """(n,) scores of n instances from their (S, n, C) per-draw class probabilities; larger first.

    Args:
        per_draw: ``q_s(c)`` for S draws (S = 1 for a point fit), n instances, C classes.
        strategy: one of ``STRATEGIES`` (see the module docstring).
        rng: the uniform scores of ``random``.
    """
    if strategy == "random":
        return rng.random(per_draw.shape[1])
    mean = np.asarray(per_draw, np.float64).mean(axis=0)
    if strategy == "entropy":
        return entropy(mean)
    if strategy == "bald":
        return np.maximum(entropy(mean) - entropy(per_draw).mean(axis=0), 0.0)
    if strategy == "margin":
        top2 = np.sort(mean, axis=-1)[:, -2:] if mean.shape[-1] > 1 else np.c_[np.zeros(len(mean)), mean]
        return 1.0 - (top2[:, 1] - top2[:, 0])
    raise ValueError(f"strategy={strategy!r}: choose one of {', '.join(STRATEGIES)}")


def diverse_order(scores: np.ndarray, bag_index: np.ndarray) -> np.ndarray:
    """Indices of ``scores`` in query order: each bag's best first, then each bag's second, ...

    Within one round (the k-th instance of every bag), larger scores come first; ties keep
    their input order. ``bag_index`` (n,) gives each candidate's bag.
    """
    scores, bag_index = np.asarray(scores, np.float64), np.asarray(bag_index)
    by_score = np.lexsort((-scores, bag_index))  # bag by bag, best first within each
    rank = np.empty(len(scores), np.int64)
    sorted_bags = bag_index[by_score]
    starts = np.r_[0, np.flatnonzero(np.diff(sorted_bags)) + 1]
    first_of_bag = np.repeat(starts, np.diff(np.r_[starts, len(scores)]))
    rank[by_score] = np.arange(len(scores)) - first_of_bag
    return np.lexsort((np.arange(len(scores)), -scores, rank))


def with_known_labels(logits: np.ndarray, known: np.ndarray) -> np.ndarray:
    """(..., n, C) logits in which each instance with a known label (``known`` (n,), -1 unknown)
    puts all its mass on that label: the DP posterior is then conditional on it."""
    out = np.array(logits, copy=True)
    rows = np.flatnonzero(known >= 0)
    if rows.size:
        point = np.full((rows.size, out.shape[-1]), KNOWN_LOGIT, out.dtype)
        point[np.arange(rows.size), known[rows]] = 0.0
        out[..., rows, :] = point
    return out


def query_table(
    per_draw: Sequence[np.ndarray],
    known: Sequence[np.ndarray] | None,
    n: int,
    strategy: str,
    rng: np.random.Generator,
    bag_ids: Sequence[object],
    class_names: Sequence[str],
) -> pd.DataFrame:
    """The n unlabelled instances to label next, as ``ORLR.query`` returns them.

    Args:
        per_draw: B arrays (S, n_b, C) of per-draw class probabilities (given the bags'
            label sets and the known labels, where there are).
        known: B arrays (n_b,) of known labels (-1 unknown), or None: their instances are
            never queried.
        n: how many to return (fewer if fewer instances are unlabelled).
        strategy, rng: as ``acquisition_scores``.
        bag_ids: B ids written in the ``bag_id`` column.
        class_names: C names for the ``class_k`` columns.
    Returns:
        One row per queried instance, in query order: ``bag_id``, ``instance`` (index in
        its bag), ``score``, and ``class_1``, ``p_1``, ... the likeliest ``TOP_CLASSES``
        classes with their probabilities ``mean_s q_s(c)`` now.
    """
    sizes = [p.shape[1] for p in per_draw]
    bag_index = np.repeat(np.arange(len(per_draw)), sizes)
    instance = np.concatenate([np.arange(s) for s in sizes])
    stacked = np.concatenate([np.asarray(p, np.float64) for p in per_draw], axis=1)  # (S, N, C)
    free = np.ones(len(bag_index), bool) if known is None else np.concatenate(known) < 0
    scores = acquisition_scores(stacked[:, free], strategy, rng)
    candidates = np.flatnonzero(free)
    chosen = candidates[diverse_order(scores, bag_index[free])[:n]]
    mean = stacked[:, chosen].mean(axis=0)
    top = np.argsort(-mean, axis=1, kind="stable")[:, : min(TOP_CLASSES, mean.shape[1])]
    table = pd.DataFrame(
        {
            "bag_id": [bag_ids[b] for b in bag_index[chosen]],
            "instance": instance[chosen],
            "score": scores[np.searchsorted(candidates, chosen)],
        }
    )
    for k in range(top.shape[1]):
        table[f"class_{k + 1}"] = [class_names[c] for c in top[:, k]]
        table[f"p_{k + 1}"] = mean[np.arange(len(chosen)), top[:, k]]
    return table
