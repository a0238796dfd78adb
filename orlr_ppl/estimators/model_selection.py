"""Choosing ORLR's hyperparameters inside ``fit`` by bag-level cross-validation, from bag labels only.

No instance label is used (the paper's protocol, and the situation of every
user): each candidate is fitted on the training folds' bags and scored by the
mean held-out log-likelihood of the other bags' label sets,
``mean_b log p(Y_b | X_b)``, the exact DP. Folds split bags, never instances
of one bag. The candidate with the highest mean over folds wins; ties go to
the earlier candidate in the grid (the stronger prior, see ``ORLR``).
"""

from __future__ import annotations

import warnings
from collections.abc import Callable, Sequence
from typing import Any, NamedTuple

import numpy as np
from sklearn.base import clone

from ..dp.ragged import bag_log_likelihood

PRIOR_SCALES = (0.1, 0.3, 1.0, 3.0, 10.0)
"""``prior_scale="auto"``: the candidates, strongest prior first."""
GAMMA_FACTORS = (0.25, 1.0, 4.0, 16.0)
"""``gamma="auto"``: the candidates, as multiples of the median heuristic (``data.kernel.median_gamma``)."""


class Selection(NamedTuple):
    """The outcome of ``select_by_bag_cv``.

    Attributes:
        best: the winning candidate's parameters.
        table: one row per candidate: its parameters, ``mean_log_likelihood``
            (per held-out bag, averaged over folds) and ``sd`` over folds.
    """

    best: dict[str, Any]
    table: list[dict[str, Any]]


def bag_folds(n_bags: int, n_folds: int, seed: int) -> list[np.ndarray]:
    """``n_folds`` disjoint sorted arrays of bag indices, a seeded shuffle split as evenly as possible."""
    if not 2 <= int(n_folds) <= n_bags:
        raise ValueError(f"cv_folds={n_folds}: need 2 <= cv_folds <= the {n_bags} training bags")
    order = np.random.default_rng(seed).permutation(n_bags)
    return [np.sort(part) for part in np.array_split(order, int(n_folds))]


def held_out_log_likelihood(model: Any, feats: list[np.ndarray], sets: list[Any]) -> float:
    """Mean over bags of ``log p(Y_b | X_b)`` under a fitted ORLR (features already standardised)."""
    logits = model._logits(model._map_features(feats))
    return float(np.mean(bag_log_likelihood(logits, sets, model.max_labels)))


def select_by_bag_cv(
    estimator: Any,
    feats: Sequence[np.ndarray],
    label_sets: Sequence[Any],
    n_classes: int,
    grid: Sequence[dict[str, Any]],
    n_folds: int,
    seed: int = 0,
) -> Selection:
    """The grid's best parameters for ``estimator`` by ``n_folds``-fold bag-level CV.

    Args:
        estimator: an unfitted ORLR whose other parameters every candidate
            keeps; each is fitted as a point estimate (its EM, or MAP for a
            posterior method), on the standardised ``feats`` as they are.
        feats: B standardised (n_b, d) bags. label_sets: B class-index lists.
        grid: candidate parameter dicts (``set_params`` names).
    """
    method = estimator.method if estimator.method in ("em", "map") else "map"
    fixed = {
        "method": method,
        "standardize": False,  # the features are the outer fit's, standardised once
        "n_classes": n_classes,
        "canonical_shapes": True,  # the folds' fits share compiled programs
        "progress_bar": False,
    }
    if estimator.prior == "group_horseshoe":  # no MAP: candidates are scored under the Normal of the slab
        fixed["prior"] = "normal"

    def score(params: dict[str, Any], train: np.ndarray, test: np.ndarray) -> float:
        model = clone(estimator).set_params(**fixed, **params)
        model._fit_silently([feats[i] for i in train], [label_sets[i] for i in train])
        return held_out_log_likelihood(model, [feats[i] for i in test], [label_sets[i] for i in test])

    return select_by_cv(score, len(feats), grid, n_folds, seed)


def select_by_cv(
    score: Callable[[dict[str, Any], np.ndarray, np.ndarray], float],
    n_bags: int,
    grid: Sequence[dict[str, Any]],
    n_folds: int,
    seed: int = 0,
) -> Selection:
    """The grid's candidate with the best mean held-out score over ``n_folds`` folds of bags.

    Args:
        score: ``score(params, train_bags, test_bags)``, higher is better:
            fit a candidate on the training bags (sorted index arrays), score
            it on the test bags. Candidates run fold by fold, in grid order,
            so a ``score`` may cache what one fold's candidates share.
        n_bags: B; the folds split ``range(B)`` (``bag_folds``).

    A winner at the edge of a grid of more than two values warns (UserWarning).
    """
    folds = bag_folds(n_bags, n_folds, seed)
    scores = np.zeros((len(grid), len(folds)))
    for f, test in enumerate(folds):
        train = np.setdiff1d(np.arange(n_bags), test)
        for g, params in enumerate(grid):
            scores[g, f] = score(params, train, test)
    mean = scores.mean(axis=1)
    table = [
        {**params, "mean_log_likelihood": float(m), "sd": float(s)}
        for params, m, s in zip(grid, mean, scores.std(axis=1))
    ]
    best = dict(grid[int(np.argmax(mean))])
    for name, value in best.items():
        values = sorted({p[name] for p in grid})
        if len(values) > 2 and value in (values[0], values[-1]):
            shown = ", ".join(f"{v:.4g}" for v in values)
            warnings.warn(
                f"CV chose {name}={value:.4g}, at the edge of its grid [{shown}]: "
                f"the best value may lie beyond it; give {name} explicitly to look further (see cv_results_)",
                UserWarning,
                stacklevel=5,
            )
    return Selection(best, table)
