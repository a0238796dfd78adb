"""Choosing ORLR's hyperparameters by bag-level cross-validation, from bag labels only.

No instance label is used (the paper's protocol, and the situation of every
user): each candidate is fitted on the training folds' bags and scored on the
other bags' label sets. Folds split bags, never instances of one bag. Three
held-out scores are kept for every candidate (``CV_SCORINGS``), and one of
them decides:

- ``"log_likelihood"``: the mean held-out ``log p(Y_b | X_b)``, the exact DP
  (the model's own criterion; ``ORLR``'s default);
- ``"ranking_loss"``: the held-out bags' ranking loss of the bag scores
  ``max_i p(y_bi = c | x_bi)`` (Briggs et al.'s criterion, SIM's here),
  lower is better;
- ``"average_precision"``: the same scores' label-ranking average precision.

The candidate with the best mean over folds wins; ties go to the earlier
candidate in the grid (the stronger prior, see ``ORLR``).
"""

from __future__ import annotations

import warnings
from collections.abc import Callable, Mapping, Sequence
from typing import Any, NamedTuple

import numpy as np

from ..evaluation.metrics import average_precision, ranking_loss
from ..inference.checks.diagnostics import ConvergenceWarning

PRIOR_SCALES = (0.1, 0.3, 1.0, 3.0, 10.0)
"""The candidate prior scales of ``ORLRCV`` and ``SoftmaxRegression(prior_scale="auto")``, strongest first."""
GAMMA_FACTORS = (0.25, 1.0, 4.0, 16.0)
"""The candidate kernel widths, as multiples of the median heuristic (``features.median_gamma``)."""
CV_SCORINGS = {
    "log_likelihood": ("mean_log_likelihood", 1.0),
    "ranking_loss": ("ranking_loss", -1.0),
    "average_precision": ("average_precision", 1.0),
}
"""A scoring name (``ORLRCV(scoring=...)``): its column of ``cv_results_``, and +1 when higher is
better, -1 when lower."""


class Selection(NamedTuple):
    """The outcome of ``select_by_bag_cv``.

    Attributes:
        best: the winning candidate's parameters.
        table: one row per candidate: its parameters, the mean over folds of
            each held-out score (``mean_log_likelihood`` per held-out bag, and
            for bag-level fits ``ranking_loss`` and ``average_precision``), and
            ``sd``, the deciding score's sd over folds.
    """

    best: dict[str, Any]
    table: list[dict[str, Any]]


def bag_folds(n_bags: int, n_folds: int, seed: int) -> list[np.ndarray]:
    """``n_folds`` disjoint sorted arrays of bag indices, a seeded shuffle split as evenly as possible."""
    if not 2 <= int(n_folds) <= n_bags:
        raise ValueError(f"cv={n_folds}: need 2 <= cv <= the {n_bags} training bags")
    order = np.random.default_rng(seed).permutation(n_bags)
    return [np.sort(part) for part in np.array_split(order, int(n_folds))]


def check_cv_scoring(name: str) -> None:
    """Raise a ValueError naming the choices unless ``name`` is a key of ``CV_SCORINGS``."""
    if name not in CV_SCORINGS:
        raise ValueError(f"scoring={name!r}: choose one of {tuple(CV_SCORINGS)}")


def held_out_scores(model: Any, bags: Sequence[np.ndarray], label_sets: Sequence[Any]) -> dict[str, float]:
    """A fitted estimator's scores on held-out raw bags, from its public methods.

    Returns ``mean_log_likelihood`` (the mean over bags of ``model.bag_log_likelihood``,
    ``log p(Y_b | X_b)``), and ``ranking_loss`` and ``average_precision`` of the
    (B, C) bag scores of ``model.bag_scores(rule="max")``, the paper's ranking rule.
    """
    scores = model.bag_scores(bags)
    return {
        "mean_log_likelihood": float(np.mean(model.bag_log_likelihood(bags, label_sets))),
        "ranking_loss": ranking_loss(label_sets, scores),
        "average_precision": average_precision(label_sets, scores),
    }


def best_index(table: Sequence[Mapping[str, Any]], scoring: str) -> int:
    """Index of the best row of a ``Selection.table`` (or ``cv_results_``) by ``scoring``; ties: the first."""
    check_cv_scoring(scoring)
    column, sign = CV_SCORINGS[scoring]
    return int(np.argmax([sign * row[column] for row in table]))  # argmax returns the first maximum


def select_by_bag_cv(
    make: Callable[[dict[str, Any]], Any],
    bags: Sequence[np.ndarray],
    label_sets: Sequence[Any],
    grid: Sequence[dict[str, Any]],
    n_folds: int,
    seed: int = 0,
    scoring: str = "log_likelihood",
    progress_bar: bool = False,
) -> Selection:
    """The grid's best candidate by bag-level cross-validation, through the estimators' public methods.

    Each candidate ``make(params)`` is an unfitted estimator; its ``fit`` on the training
    folds' raw bags fits its feature map on those bags alone, so no held-out bag shapes
    the scaling it is scored under. It is scored by ``held_out_scores`` on the other
    bags. A candidate's convergence warnings are silenced: its budget is the outer fit's.

    Args:
        make: the candidate of one grid point, e.g. ``ORLRCV``'s point fit at a prior
            scale (and kernel width).
        bags: B raw (n_b, d) bags. label_sets: B class-index lists.
        grid: candidates, each ``{"prior_scale": ...}`` and, for a kernel, ``"gamma"``.
        scoring: the deciding held-out score, a key of ``CV_SCORINGS``.
        progress_bar: a bar over the ``n_folds * len(grid)`` fits.
    """
    check_cv_scoring(scoring)
    bar = None
    if progress_bar:  # a grid of fits on every fold: often minutes (kernel widths)
        from tqdm.auto import tqdm

        varied = [k for k in grid[0] if len({repr(p[k]) for p in grid}) > 1]
        bar = tqdm(total=n_folds * len(grid), desc=f"choosing {', '.join(varied)} by {n_folds}-fold CV")

    def score(params: dict[str, Any], train: np.ndarray, test: np.ndarray) -> dict[str, float]:
        model = make(params)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", ConvergenceWarning)
            model.fit([bags[i] for i in train], [label_sets[i] for i in train])
        scores = held_out_scores(model, [bags[i] for i in test], [label_sets[i] for i in test])
        if bar is not None:
            bar.update()
        return scores

    try:
        return select_by_cv(score, len(bags), grid, n_folds, seed, scoring)
    finally:
        if bar is not None:
            bar.close()


def select_by_cv(
    score: Callable[[dict[str, Any], np.ndarray, np.ndarray], float | Mapping[str, float]],
    n_bags: int,
    grid: Sequence[dict[str, Any]],
    n_folds: int,
    seed: int = 0,
    scoring: str = "log_likelihood",
) -> Selection:
    """The grid's candidate with the best mean held-out score over ``n_folds`` folds of bags.

    Args:
        score: ``score(params, train_bags, test_bags)``: fit a candidate on
            the training bags (sorted index arrays), score it on the test
            bags, as a float (a ``mean_log_likelihood``, higher is better) or
            a dict of named scores holding ``scoring``'s column. Candidates
            run fold by fold, in grid order, so a ``score`` may cache what one
            fold's candidates share.
        n_bags: B; the folds split ``range(B)`` (``bag_folds``).
        scoring: the deciding score, a key of ``CV_SCORINGS``.

    A winner at the edge of a grid of more than two values warns (UserWarning).
    """
    check_cv_scoring(scoring)
    column = CV_SCORINGS[scoring][0]
    folds = bag_folds(n_bags, n_folds, seed)
    results: list[list[Mapping[str, float]]] = [[] for _ in grid]
    for test in folds:
        train = np.setdiff1d(np.arange(n_bags), test)
        for g, params in enumerate(grid):
            value = score(params, train, test)
            results[g].append({"mean_log_likelihood": value} if np.isscalar(value) else value)
    table = []
    for params, per_fold in zip(grid, results):
        names = per_fold[0].keys()
        row = {**params, **{k: float(np.mean([r[k] for r in per_fold])) for k in names}}
        row["sd"] = float(np.std([r[column] for r in per_fold]))
        table.append(row)
    best = dict(grid[best_index(table, scoring)])
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
