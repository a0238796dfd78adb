"""RBF kernel features against a dictionary of training instances (kernel ORLR).

Kernel ORLR (Pham & Raich; JMLR 4.3) replaces an instance ``x`` (d,) by its
similarities to a dictionary ``D`` (m, d) of training instances::

    phi(x)_j = k(x, D_j) = exp(-gamma ||x - D_j||^2),      j = 1..m,

and fits the linear model on ``phi``: the logits are ``phi(x) @ W + beta``,
with ``W`` (m, C) one row per dictionary element, so an l2,1 prior on the rows
(``model.priors``) drops whole elements. With every training instance in the
dictionary this is the exact kernel model; ``dictionary_size`` keeps a random
subset instead (the paper's dictionary shrinking, 6.6.3), and rows the fit
zeroes are dropped after it (``KernelMap.keep``).

Nystroem features, ``phi(x) = k(x, D) U L^(-1/2)`` with ``K_DD = U L U^T``,
make ``phi(x) . phi(x')`` the Nystroem approximation of ``k(x, x')`` (Williams &
Seeger, 2001): a Normal prior on ``W`` is then a Gaussian-process prior with
that kernel, for large data where ``m`` is far below the instance count.
Their columns are eigen-directions, not dictionary elements, so row sparsity
there selects directions and saves no kernel evaluations.
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import NamedTuple

import numpy as np

KERNELS = ("rbf",)
EIGEN_FLOOR = 1e-8
"""Nystroem: eigenvalues of ``K_DD`` below this fraction of the largest are dropped (rank deficiency)."""
_BLOCK = 4096
"""Rows of ``x`` per block of kernel evaluations, to bound memory at ``4096 * m`` floats."""


@dataclass(frozen=True, repr=False)
class RBF:
    """Kernel ORLR's feature map: RBF similarities to a dictionary of training instances.

    ``ORLR(kernel=RBF(...))``; ``kernel="rbf"`` is ``RBF()``.

    Args:
        gamma: the width, ``k(x, z) = exp(-gamma ||x - z||^2)``, on standardised
            features; None: the median heuristic (``median_gamma``). ``ORLRCV``
            chooses it by bag-level cross-validation instead.
        dictionary_size: keep this many training instances, drawn at random
            (the paper's dictionary shrinking); None: all of them.
        nystroem: Nystroem features ``k(x, D) K_DD^(-1/2)`` instead of the
            plain kernel columns: a Normal prior on the weights is then a
            Gaussian-process prior with this kernel, for large data.
    """

    gamma: float | None = None
    dictionary_size: int | None = None
    nystroem: bool = False

    def __repr__(self) -> str:
        changed = [
            f"{f.name}={getattr(self, f.name)!r}" for f in fields(self) if getattr(self, f.name) != f.default
        ]
        return f"RBF({', '.join(changed)})"

    def __post_init__(self) -> None:
        if self.gamma is not None and not (np.isscalar(self.gamma) and float(self.gamma) > 0):
            raise ValueError(
                f"RBF(gamma={self.gamma!r}): give a positive width, or None (the median heuristic); "
                "ORLRCV chooses it by cross-validation"
            )
        size = self.dictionary_size
        if size is not None and (isinstance(size, bool) or not isinstance(size, int) or size < 1):
            raise ValueError(
                f"RBF(dictionary_size={size!r}): give a positive integer, or None (every instance)"
            )


def as_rbf(kernel: str | RBF | None) -> RBF | None:
    """``kernel`` as its settings: None (linear features), ``RBF()`` for ``"rbf"``, or the object itself."""
    if kernel is None or isinstance(kernel, RBF):
        return kernel
    if kernel in KERNELS:
        return RBF()
    raise ValueError(f"kernel={kernel!r}: give None (linear features), 'rbf', or RBF(gamma=..., ...)")


class KernelMap(NamedTuple):
    """A fitted kernel feature map.

    Attributes:
        dictionary: (m, d) the dictionary instances (in the estimator's
            standardised feature space).
        gamma: the RBF width, ``k(x, z) = exp(-gamma ||x - z||^2)``.
        projection: (m, r) Nystroem's ``U L^(-1/2)``, or None for the plain
            dictionary features (r = m).
    """

    dictionary: np.ndarray
    gamma: float
    projection: np.ndarray | None = None

    @property
    def n_features(self) -> int:
        """Columns of ``phi``: m, or the Nystroem rank r."""
        return self.dictionary.shape[0] if self.projection is None else self.projection.shape[1]

    def transform(self, x: np.ndarray) -> np.ndarray:
        """(n, n_features) ``phi(x)`` of instances ``x`` (n, d)."""
        k = rbf_kernel(x, self.dictionary, self.gamma)
        return k if self.projection is None else (k @ self.projection).astype(k.dtype)

    def keep(self, rows: np.ndarray) -> KernelMap:
        """The map restricted to dictionary elements ``rows`` (plain dictionary features only)."""
        if self.projection is not None:
            raise ValueError("Nystroem features mix dictionary elements: their rows cannot be dropped")
        return self._replace(dictionary=self.dictionary[rows])


def rbf_kernel(x: np.ndarray, z: np.ndarray, gamma: float) -> np.ndarray:
    """(n, m) ``exp(-gamma ||x_i - z_j||^2)`` for ``x`` (n, d), ``z`` (m, d), in ``x``'s float type.

    Computed in blocks of rows, from ``|x|^2 + |z|^2 - 2 x.z`` clipped at 0
    (round-off can make it slightly negative for near-equal points).
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
    """``1 / median ||x_i - x_j||^2`` over up to ``max_pairs`` random pairs of distinct rows (the
    median heuristic): at this width a typical pair of instances has similarity ``exp(-1)``."""
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


def choose_dictionary(n_instances: int, size: int | None, seed: int = 0) -> np.ndarray:
    """Sorted indices of the dictionary's instances: all of them (``size`` None or at least
    ``n_instances``), else ``size`` drawn uniformly without replacement."""
    if size is None or size >= n_instances:
        return np.arange(n_instances)
    if size < 1:
        raise ValueError(f"dictionary_size={size}: give a positive number of instances, or None for all")
    return np.sort(np.random.default_rng(seed).choice(n_instances, size, replace=False))


def nystroem_projection(dictionary: np.ndarray, gamma: float) -> np.ndarray:
    """(m, r) ``U L^(-1/2)`` from ``K_DD = U L U^T``, eigenvalues below ``EIGEN_FLOOR * max`` dropped."""
    k = rbf_kernel(dictionary, dictionary, gamma).astype(np.float64)
    vals, vecs = np.linalg.eigh(0.5 * (k + k.T))
    keep = vals > EIGEN_FLOOR * vals.max()
    return (vecs[:, keep] / np.sqrt(vals[keep])).astype(np.float32)


def fit_kernel_map(
    x: np.ndarray,
    kernel: str,
    gamma: float,
    dictionary_size: int | None = None,
    nystroem: bool = False,
    seed: int = 0,
) -> KernelMap:
    """A ``KernelMap`` from training instances ``x`` (n, d).

    Args:
        kernel: "rbf" (the only one).
        gamma: the RBF width (> 0).
        dictionary_size: keep this many instances, drawn at random; None: all.
        nystroem: Nystroem features instead of the plain kernel columns.
        seed: the dictionary's draw.
    """
    if kernel not in KERNELS:
        raise ValueError(f"kernel={kernel!r}: choose one of {KERNELS}, or None for linear features")
    if not np.isfinite(gamma) or gamma <= 0:
        raise ValueError(f"gamma={gamma}: the RBF width must be a positive number")
    dictionary = np.asarray(x[choose_dictionary(x.shape[0], dictionary_size, seed)], np.float32)
    projection = nystroem_projection(dictionary, gamma) if nystroem else None
    return KernelMap(dictionary, float(gamma), projection)
