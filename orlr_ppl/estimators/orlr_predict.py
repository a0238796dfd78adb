"""ORLR's prediction hooks (see ``_BagClassifier``): per posterior draw, or the point estimate as one.

Inductive probabilities are the softmax of the logits averaged over draws;
transductive ones the exact DP posterior per draw (the relaxed DP with a
novel class or a leak, ``relaxed``), averaged.
"""

from __future__ import annotations

from collections.abc import Iterator

import jax
import jax.numpy as jnp
import numpy as np
from scipy.special import softmax

from ..dp.ragged import draw_posteriors_on_host
from .inputs import split_by_bag
from .orlr_fit import pack_draw_inputs
from .relaxed import relaxed_draw_posteriors


class _ORLRPredictions:
    """``ORLR``'s hooks: ``_draws`` (S, R, K) weights, and what each prediction makes of them."""

    def _draws(self) -> tuple[np.ndarray, np.ndarray]:
        """(S, d, C), (S, C): posterior draws, or the point estimate as S = 1."""
        if hasattr(self, "coef_draws_"):
            return self.coef_draws_, self.intercept_draws_
        return self.coef_[None], self.intercept_[None]

    def _leak_draws(self, n_draws: int) -> np.ndarray | None:
        """(S,) the leak at each draw: the posterior's draws, or the fitted or fixed value; None without."""
        if getattr(self, "leak_draws_", None) is not None:
            return np.asarray(self.leak_draws_)
        leak = getattr(self, "leak_", self.leak)
        return None if leak is None else np.full(n_draws, float(leak))

    def _logits(self, feats: list[np.ndarray]) -> list[np.ndarray]:
        return [x @ self.coef_ + self.intercept_ for x in feats]

    def _draw_proba(self, feats: list[np.ndarray]) -> list[np.ndarray]:
        """B arrays (S, n_b, C) of ``p(y | x, theta_s)`` per posterior draw."""
        w, b = self._draws()
        return [softmax(np.einsum("nd,sdc->snc", x, w) + b[:, None, :], axis=-1) for x in feats]

    def _inductive_proba(self, feats: list[np.ndarray]) -> list[np.ndarray]:
        """``E_theta p(y = c | x, theta)``: the mean over the draws (the point estimate for EM/MAP)."""
        return [p.mean(axis=0) for p in self._draw_proba(feats)]

    def _transductive_proba(self, feats: list[np.ndarray], sets: list[np.ndarray]) -> list[np.ndarray]:
        """``E_theta p(y = c | Y_b, X_b, theta)``: the DP posterior averaged over draws (NUTS/SVI)."""
        if not hasattr(self, "coef_draws_") and not self._relaxed():
            return super()._transductive_proba(feats, sets)
        total = np.asarray(sum(self._draw_posteriors(feats, sets)))
        return split_by_bag(total / len(self._draws()[0]), feats)

    def _relaxed(self) -> bool:
        """A novel class or a leak: transductive posteriors need the model's E-step (``relaxed``)."""
        return bool(self.novel_class) or self.leak is not None

    def _draw_posteriors(self, feats: list[np.ndarray], sets: list[np.ndarray]) -> Iterator[jax.Array]:
        """Per draw (or the point estimate), the (n, C) DP posteriors ``p(y | Y_b, X_b, theta_s)``.

        All bags' instances concatenated in order; zero outside each bag's set.
        """
        if self._relaxed():
            w, b = self._draws()
            yield from relaxed_draw_posteriors(
                feats,
                sets,
                w,
                b,
                self._leak_draws(len(w)),
                self.n_classes_,
                self.novel_class,
                self.max_labels,
            )
            return
        flat, packed = pack_draw_inputs(feats, sets, self.canonical_shapes)
        rows = sum(len(x) for x in feats)
        w, b = self._draws()
        weights = [jnp.asarray(x, flat.dtype) for x in w]
        intercepts = [jnp.asarray(x, flat.dtype) for x in b]
        for post in draw_posteriors_on_host(flat, weights, intercepts, packed):
            yield post[:rows]
