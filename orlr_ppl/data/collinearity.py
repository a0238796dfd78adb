"""Linearly dependent features: which the likelihood cannot tell apart, and which to drop.

With an intercept in the model, a feature that is (numerically) an affine
combination of the others adds a direction ``v`` (d,) along which every
instance's logits stay put: ``X v = const``. The ORLR likelihood is flat along
``W + v a^T`` for every class vector ``a``, so only the prior bounds those
``C - 1`` directions per dependency. A MAP under a proper prior is unique and predictions
are unaffected, but a posterior holds the prior's whole width there: the
individual weights of the features involved, and their row inclusions, then
report the prior, not the data (HJA's 38 features have two such
dependencies). Dropping one feature of each dependency leaves the span of
``[1, X]``, so the functions the model can express, unchanged, and makes
every weight identified.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import NamedTuple

import numpy as np
import scipy.linalg

DEPENDENCE_RTOL = 1e-4
"""A direction is dependent when its singular value of the standardised, centred features is below
this fraction of the largest: the likelihood's curvature along it is then below 1e-8 of the largest."""


class CollinearityWarning(UserWarning):
    """A posterior fit on features some of which are linear combinations of the others."""


class LinearDependencies(NamedTuple):
    """The linear dependencies among the columns of a feature matrix.

    Attributes:
        rank: the numerical rank of the centred, standardised features
            (constant features count as dependent on the intercept).
        redundant: names of ``d - rank`` features that are combinations of
            the others; dropping them leaves the span of ``[1, X]``.
        groups: per redundant feature, it and the kept features it is a
            combination of (largest coefficient first).
        singular_values: (d,) of the centred, standardised features over
            ``sqrt(n)``, largest first.
    """

    rank: int
    redundant: list[str]
    groups: list[list[str]]
    singular_values: np.ndarray


def linear_dependencies(
    x: np.ndarray, names: Sequence[str] | None = None, rtol: float = DEPENDENCE_RTOL
) -> LinearDependencies:
    """Find which columns of ``x`` (n, d) are affine combinations of the others.

    The rank comes from the singular values of the centred, standardised
    columns; a column-pivoted QR then keeps the ``rank`` best-conditioned
    columns, and each other column is regressed on them to name its group.
    Columns named ``names`` (d,), else ``"x0"``, ``"x1"``, ...
    """
    x = np.asarray(x, np.float64)
    if x.ndim != 2:
        raise ValueError(f"features must be a 2-d (instances, features) array, got shape {x.shape}")
    n, d = x.shape
    names = [f"x{j}" for j in range(d)] if names is None else [str(s) for s in names]
    if len(names) != d:
        raise ValueError(f"{len(names)} feature names for {d} features")
    sd = x.std(axis=0)
    z = np.where(sd > 0, (x - x.mean(axis=0)) / np.where(sd > 0, sd, 1.0), 0.0)
    s = np.linalg.svd(z, compute_uv=False) / np.sqrt(max(n, 1))
    s = np.concatenate([s, np.zeros(d - len(s))])  # fewer instances than features: the rest are null
    rank = int(np.sum(s > rtol * s[0])) if d and s[0] > 0 else 0
    if rank == d:
        return LinearDependencies(d, [], [], s)
    _, _, pivots = scipy.linalg.qr(z, mode="economic", pivoting=True)
    kept, dropped = np.sort(pivots[:rank]), pivots[rank:]
    groups = []
    for j in dropped:
        coef = np.linalg.lstsq(z[:, kept], z[:, j], rcond=None)[0] if rank else np.zeros(0)
        big = np.abs(coef) > 0.01 * (np.abs(coef).max() if coef.size else 0.0)
        order = np.argsort(-np.abs(coef))
        groups.append([names[j]] + [names[kept[i]] for i in order if big[i]])
    return LinearDependencies(rank, [names[j] for j in dropped], groups, s)


def describe_dependencies(dep: LinearDependencies, n_outputs: int) -> str:
    """One sentence for a warning: the dependent features, what they mean for a posterior, the remedy."""

    def _group(g: list[str]) -> str:
        if len(g) == 1:
            return f"{g[0]} is constant"
        rest = ", ".join(g[1:6]) + (", ..." if len(g) > 6 else "")
        return f"{g[0]} ~ {rest}"

    n_dep = len(dep.redundant)
    return (
        f"{n_dep} feature(s) are linear combinations of the others ({'; '.join(map(_group, dep.groups))}): "
        f"the likelihood is flat along {n_dep * (n_outputs - 1)} weight directions, where the posterior is "
        "the prior, so these features' individual weights and row inclusions say nothing about the data "
        f"(predictions are unaffected). Drop them (data.drop_features({dep.redundant!r}), or orlr-ppl "
        f"--drop-features {','.join(dep.redundant)}) to identify every weight; the model can express the "
        "same functions without them"
        + (
            ". The convergence checks leave the constant features' weights out: their draws are the prior's"
            if any(len(g) == 1 for g in dep.groups)
            else ""
        )
    )
