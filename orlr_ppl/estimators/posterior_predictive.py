"""Posterior predictive summaries of a fitted ORLR: credible intervals and uncertainty per instance."""

from __future__ import annotations

import warnings
from collections.abc import Iterable, Sequence
from typing import Any

import numpy as np

from ..evaluation.metrics import CREDIBLE_MASS, check_credible_mass, equal_tailed_interval
from .base import Bags
from .inputs import split_by_bag


class _PosteriorPredictive:
    """``predict_interval`` and ``predict_uncertainty``, from the estimator's per-draw hooks
    (``_draw_proba``, ``_draw_posteriors``); a point estimate is one draw."""

    def predict_interval(
        self,
        bags: Bags,
        prob: float = CREDIBLE_MASS,
        label_sets: Sequence[Iterable[Any]] | np.ndarray | None = None,
    ) -> list[np.ndarray]:
        """B arrays (n_b, C, 2): equal-tailed credible intervals ``[lower, upper]`` of class probabilities.

        Inductive: of ``p(y = c | x, theta)``; given label sets, of the DP
        posterior ``p(y = c | Y_b, X_b, theta)``. The bounds are the
        ``(1 - prob) / 2`` and ``(1 + prob) / 2`` quantiles over the posterior
        draws kept in ``coef_draws_`` (``max_predict_draws`` of them), so they
        show how far the weights' uncertainty moves each probability;
        ``predict_proba`` is the mean over the same draws. EM and MAP have one
        point estimate: the interval collapses to it (lower == upper ==
        ``predict_proba``), and a warning says so.
        """
        check_credible_mass(prob)
        self._warn_if_point("predict_interval", "every interval has zero width")
        return [equal_tailed_interval(p, prob) for p in self._per_draw(bags, label_sets)]

    def predict_uncertainty(
        self, bags: Bags, label_sets: Sequence[Iterable[Any]] | np.ndarray | None = None
    ) -> list[np.ndarray]:
        """B arrays (n_b, 2): predictive entropy and mutual information (nats).

        Entropy ``H[E_theta p(y | x, theta)]`` is the total uncertainty; the
        mutual information ``H[E p] - E H[p]`` between the label and the
        weights is its epistemic part (zero for EM/MAP point estimates, with a warning).
        Given label sets, of the DP posterior ``p(y | Y_b, X_b, theta)``: what is
        left uncertain about an instance once its bag's labels are known.
        """
        self._warn_if_point("predict_uncertainty", "the mutual information is zero")
        out = []
        for p in self._per_draw(bags, label_sets):
            p = np.asarray(p, np.float64)  # a float32 zero (a class outside the bag's set) is 0 log 0 = 0
            total = _entropy(p.mean(axis=0))
            aleatoric = _entropy(p).mean(axis=0)
            out.append(np.stack([total, np.maximum(total - aleatoric, 0.0)], axis=1))
        return out

    def _per_draw(self, bags: Bags, label_sets: Any) -> list[np.ndarray]:
        """B arrays (S, n_b, C): each kept draw's class probabilities, given the label sets if any."""
        feats = self._check_bags(bags)
        if label_sets is None:
            return list(self._draw_proba(feats))
        stacked = np.stack(list(self._draw_posteriors(feats, self._check_sets(feats, label_sets))))
        return split_by_bag(stacked, feats, axis=1)

    def _warn_if_point(self, name: str, consequence: str) -> None:
        """Say that a point fit's weights carry no uncertainty, rather than return it silently."""
        method = getattr(self, "method", None)
        if method in ("em", "map"):
            warnings.warn(
                f"{name} on a method={method!r} fit: one point estimate of the weights, so "
                f"{consequence}; fit method='nuts' or 'svi' for the weights' uncertainty",
                UserWarning,
                stacklevel=3,
            )


def _entropy(p: np.ndarray) -> np.ndarray:
    """``-sum_c p_c log p_c`` over the last axis, with ``0 log 0 = 0``."""
    return -np.sum(np.where(p > 0, p * np.log(np.where(p > 0, p, 1.0)), 0.0), axis=-1)
