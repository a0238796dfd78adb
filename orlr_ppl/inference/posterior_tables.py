"""Per-scalar tables of a posterior: convergence statistics and each chain's mean.

``convergence_table`` (mean, sd, R-hat, bulk/tail ESS, through ArviZ),
``chain_means`` and ``divergent_draw_ranks`` share their row labels
(``W[x-box, j]``, ``beta[j]``, ...), so a row of one is found in the others;
``diagnostics`` checks them.
"""

from __future__ import annotations

import logging
import warnings
from collections.abc import Iterator, Sequence
from contextlib import contextmanager

import numpy as np
import pandas as pd

from .inference_data import RAW_SITES, az, with_names

TABLE_COLUMNS = ["mean", "sd", "r_hat", "ess_bulk", "ess_tail"]
"""``convergence_table``'s columns."""
INTERPRETABLE = ("W", "beta", "leak", "tau", "lam")
"""The sites the tables list first, in this order (then any other latent site, never the raw ones)."""


@contextmanager
def quiet_arviz() -> Iterator[None]:
    """Silence ArviZ's own warnings and log lines while it computes.

    E.g. "Shape validation failed" for one chain, or high Pareto k-hat: the
    checks of ``diagnostics`` report the same facts as problems.
    """
    logger = logging.getLogger("arviz")
    level = logger.level
    logger.setLevel(logging.ERROR)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            yield
    finally:
        logger.setLevel(level)


def _table_vars(posterior) -> list[str]:
    """``W``, ``beta``, then any other latent site, in the posterior's order; never the raw sites."""
    first = [v for v in INTERPRETABLE if v in posterior.data_vars]
    rest = [v for v in posterior.data_vars if v not in (*INTERPRETABLE, *RAW_SITES)]
    return first + rest


def convergence_table(
    idata: az.InferenceData,
    class_names: Sequence[str] | None = None,
    feature_names: Sequence[str] | None = None,
) -> pd.DataFrame:
    """Per-scalar posterior mean, sd, R-hat and bulk/tail ESS of the interpretable parameters.

    Args:
        idata: with a ``posterior`` group of (chain, draw, ...) variables.
        class_names, feature_names: relabel the ``class`` / ``feature``
            coordinates, so rows read ``W[x-box, j]``; default: the
            coordinates as stored (``W[3, 9]`` unless the fit had names).
    Returns:
        One row per scalar of ``W`` (d * C rows), ``beta`` (C) and any other
        latent site, in ArviZ's order, with columns ``TABLE_COLUMNS``
        (unrounded; R-hat is NaN for a parameter constant over all draws,
        and for every parameter when there is only one chain).
    """
    named = with_names(idata, class_names, feature_names)
    names = _table_vars(named.posterior)
    if not names:
        raise ValueError("the posterior has no W, beta or other latent site to check")
    # Constant parameters (beta without an intercept) give 0/0 in R-hat: NaN, and ArviZ says so.
    with quiet_arviz():
        table = az.summary(named.posterior[names], kind="all", round_to="none")
    return table[TABLE_COLUMNS]


def _scalar_draws(
    idata: az.InferenceData,
    class_names: Sequence[str] | None,
    feature_names: Sequence[str] | None,
) -> dict[str, np.ndarray]:
    """Each scalar of the table's sites as its (chain, draw) array, keyed by its table row label."""
    named = with_names(idata, class_names, feature_names)
    names = _table_vars(named.posterior)
    labeller = az.labels.BaseLabeller()  # ArviZ's own row labels, as az.summary writes them
    scalars = az.sel_utils.xarray_var_iter(
        named.posterior[names], var_names=names, skip_dims={"chain", "draw"}
    )
    return {labeller.make_label_flat(var, sel, isel): np.asarray(v) for var, sel, isel, v in scalars}


def chain_means(
    idata: az.InferenceData,
    class_names: Sequence[str] | None = None,
    feature_names: Sequence[str] | None = None,
) -> pd.DataFrame:
    """Per-chain posterior mean of every scalar of ``convergence_table``, on the same row labels.

    A high R-hat or a low bulk ESS comes from chains that sit in different
    places (separate modes: more draws will not join them) or from chains that
    wander slowly (more draws will); the chains' means of the worst scalar tell
    the two apart.

    Returns:
        (scalars, n_chains) frame, index as ``convergence_table``'s, columns
        the chain numbers.
    """
    return _chain_means(_scalar_draws(idata, class_names, feature_names), int(idata.posterior.sizes["chain"]))


def _chain_means(draws: dict[str, np.ndarray], n_chains: int) -> pd.DataFrame:
    rows = {label: values.mean(axis=1) for label, values in draws.items()}
    return pd.DataFrame.from_dict(rows, orient="index", columns=list(range(n_chains)))


DIVERGENT_RANK_COLUMNS = ["mean_rank", "z"]
"""``divergent_draw_ranks``'s columns."""


def divergent_draw_ranks(
    idata: az.InferenceData,
    class_names: Sequence[str] | None = None,
    feature_names: Sequence[str] | None = None,
) -> pd.DataFrame:
    """Where the divergent draws sit in each scalar's posterior: the mean rank of their values.

    Divergences that cluster at one end of a parameter (small ``tau``: the
    funnel's neck) point at the geometry the sampler cannot follow; spread at
    random, they point nowhere. Each scalar's ``N`` draws (all chains) are
    ranked, ties averaged, and scaled to ``u = (rank - 1/2) / N`` in (0, 1);
    ``mean_rank`` is the mean ``u`` over the ``m`` divergent draws. Were those
    ``m`` draws a random subset, ``mean_rank`` would have mean 1/2 and
    variance ``(N^2 - 1) / (12 N^2 m) * (N - m) / (N - 1)`` (sampling without
    replacement), and ``z`` is its deviation in those sds.

    Args:
        idata: with ``posterior`` and ``sample_stats.diverging`` (chain, draw).
        class_names, feature_names: as in ``convergence_table``.
    Returns:
        (scalars, 2) frame, columns ``DIVERGENT_RANK_COLUMNS``, index as
        ``convergence_table``'s, sorted by ``|z|``, largest first; empty when
        there is no ``sample_stats.diverging``, no divergent draw, or every
        draw diverged. A scalar constant over all draws has ``z`` 0.
    """
    divergent = _divergent(idata)
    draws = {} if divergent is None else _scalar_draws(idata, class_names, feature_names)
    return _divergent_ranks(draws, divergent)


def chain_tables(
    idata: az.InferenceData,
    class_names: Sequence[str] | None = None,
    feature_names: Sequence[str] | None = None,
) -> tuple[pd.DataFrame, pd.DataFrame]:
    """``(chain_means, divergent_draw_ranks)`` of ``idata``, its draws read once for both."""
    draws = _scalar_draws(idata, class_names, feature_names)
    means = _chain_means(draws, int(idata.posterior.sizes["chain"]))
    return means, _divergent_ranks(draws, _divergent(idata))


def _divergent(idata: az.InferenceData) -> np.ndarray | None:
    """The (chain * draw,) divergence flags; None when the ranks are undefined (none, all, or no stats)."""
    stats = idata.sample_stats if "sample_stats" in idata.groups() else None
    if stats is None or "diverging" not in stats:
        return None
    divergent = np.asarray(stats["diverging"], bool).ravel()
    return divergent if 0 < divergent.sum() < divergent.size else None


def _divergent_ranks(draws: dict[str, np.ndarray], divergent: np.ndarray | None) -> pd.DataFrame:
    if divergent is None:
        return pd.DataFrame(columns=DIVERGENT_RANK_COLUMNS, dtype=float)
    from scipy.stats import rankdata

    n, m = divergent.size, int(divergent.sum())
    labels = list(draws)
    values = np.stack([draws[label].ravel() for label in labels], axis=1)  # (N, scalars)
    u = (rankdata(values, axis=0) - 0.5) / n
    mean_rank = u[divergent].mean(axis=0)
    sd = np.sqrt((n**2 - 1) / (12 * n**2 * m) * (n - m) / max(n - 1, 1))
    z = np.where(np.ptp(values, axis=0) > 0, (mean_rank - 0.5) / sd, 0.0)
    table = pd.DataFrame({"mean_rank": mean_rank, "z": z}, index=labels)
    return table.iloc[np.argsort(-np.abs(z), kind="stable")]
