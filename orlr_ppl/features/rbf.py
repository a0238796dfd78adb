"""RBF features against a dictionary of training instances: kernel ORLR's feature map.

Kernel ORLR (Pham & Raich; JMLR 4.3) replaces an instance ``x`` (d,) by its
similarities to a dictionary ``D`` (m, d) of training instances::

    phi(x)_j = k(x, D_j) = exp(-gamma ||x - D_j||^2),      j = 1..m,

and fits the linear model on ``phi``: the logits are ``phi(x) @ W + beta``, with
``W`` (m, C) one row per dictionary element, so an l2,1 prior on the rows drops
whole elements (``RBFDictionary.keep``). With every training instance in the
dictionary this is the exact kernel model; ``n_components`` keeps a random
subset instead (the paper's dictionary shrinking, 6.6.3).

scikit-learn has no transformer for these plain kernel columns: its
``Nystroem`` (which the package uses as it is) whitens them by ``K_DD^(-1/2)``,
so its columns are eigen-directions, not dictionary elements, and row sparsity
there saves no kernel evaluations.
"""

from __future__ import annotations

from typing import Any, Self

import numpy as np
from sklearn.base import BaseEstimator, TransformerMixin
from sklearn.utils.validation import check_is_fitted, validate_data

from ..seeding import seed_of

_BLOCK = 4096
"""Rows of ``x`` per block of kernel evaluations, to bound memory at ``4096 * m`` floats."""


def rbf_kernel(x: np.ndarray, z: np.ndarray, gamma: float) -> np.ndarray:
    """(n, m) float32 ``exp(-gamma ||x_i - z_j||^2)`` for ``x`` (n, d) and ``z`` (m, d).

    Computed in blocks of rows in float64, from ``|x|^2 + |z|^2 - 2 x.z`` clipped
    at 0 (round-off can make it slightly negative for near-equal points), and
    kept in float32: an n x m matrix is the largest array a kernel fit holds.
    """
    x = np.asarray(x, np.float64)
    z = np.asarray(z, np.float64)
    zz = np.sum(z * z, axis=1)
    out = np.empty((x.shape[0], z.shape[0]), np.float32)
    for start in range(0, x.shape[0], _BLOCK):
        xb = x[start : start + _BLOCK]
        sq = np.maximum(np.sum(xb * xb, axis=1)[:, None] + zz[None, :] - 2.0 * xb @ z.T, 0.0)
        out[start : start + _BLOCK] = np.exp(-gamma * sq)
    return out


def median_gamma(x: np.ndarray, seed: int = 0, max_pairs: int = 20000) -> float:
    """``1 / median ||x_i - x_j||^2`` over up to ``max_pairs`` random pairs of distinct rows of ``x``
    (n, d): the median heuristic, at whose width a typical pair has similarity ``exp(-1)``."""
    n = x.shape[0]
    if n < 2:
        raise ValueError("the median heuristic for gamma needs at least 2 instances")
    rng = np.random.default_rng(seed)
    i = rng.integers(0, n, max_pairs)
    j = rng.integers(0, n - 1, max_pairs)
    j = j + (j >= i)  # distinct rows
    sq = np.sum((x[i] - x[j]) ** 2, axis=1)
    med = float(np.median(sq[sq > 0])) if np.any(sq > 0) else 0.0
    if med <= 0:
        raise ValueError("every sampled pair of instances is identical: the RBF width is undefined")
    return 1.0 / med


class RBFDictionary(TransformerMixin, BaseEstimator):
    """Each instance as its RBF similarities to a dictionary of training instances.

    ``transform(X)`` is (n, m): ``exp(-gamma ||x - D_j||^2)`` for the m dictionary
    instances ``D_j``. Put it after a scaler, as ``"rbf"`` does:
    ``make_pipeline(StandardScaler(), RBFDictionary())``.

    Args:
        gamma: the width; None: the median heuristic on the training instances
            (``median_gamma``). ``ORLRCV(gammas=...)`` chooses it by cross-validation.
        n_components: the dictionary's size: this many training instances,
            drawn at random; None: all of them (the exact kernel model).
        random_state: seed of the draw and of the heuristic's pairs (None: seed 0, ``seeding``).

    Fitted attributes: ``dictionary_`` (m, d), ``gamma_``, ``n_features_in_``.
    """

    def __init__(
        self, gamma: float | None = None, n_components: int | None = None, random_state: int | None = None
    ) -> None:
        self.gamma = gamma
        self.n_components = n_components
        self.random_state = random_state

    def fit(self, X: np.ndarray, y: Any = None) -> Self:
        """Draw the dictionary from the training instances ``X`` (n, d) and fix the width."""
        x = validate_data(self, X, dtype=[np.float64, np.float32])
        seed = seed_of(self.random_state)
        size = self.n_components
        if size is not None and (
            isinstance(size, bool) or not isinstance(size, int | np.integer) or size < 1
        ):
            raise ValueError(f"RBFDictionary(n_components={size!r}): give a positive integer, or None (all)")
        if self.gamma is not None and not (np.isscalar(self.gamma) and float(self.gamma) > 0):
            raise ValueError(
                f"RBFDictionary(gamma={self.gamma!r}): give a positive width, or None (the median heuristic)"
            )
        rows = np.arange(len(x))
        if size is not None and size < len(x):
            rows = np.sort(np.random.default_rng(seed).choice(len(x), size, replace=False))
        self.dictionary_ = np.asarray(x[rows], np.float32)
        self.gamma_ = float(median_gamma(x, seed)) if self.gamma is None else float(self.gamma)
        return self

    def transform(self, X: np.ndarray) -> np.ndarray:
        """(n, m) float32 similarities of the instances ``X`` (n, d) to the dictionary."""
        check_is_fitted(self, "dictionary_")
        x = validate_data(self, X, reset=False, dtype=[np.float64, np.float32])
        return rbf_kernel(x, self.dictionary_, self.gamma_)

    def keep(self, rows: np.ndarray) -> Self:
        """Keep only the dictionary elements ``rows`` (a fit's surviving rows of ``W``); returns self."""
        check_is_fitted(self, "dictionary_")
        self.dictionary_ = np.asarray(self.dictionary_)[rows]
        return self
