"""Per-scalar tables of a posterior: convergence statistics and each chain's mean.

``convergence_table`` (mean, sd, R-hat, bulk/tail ESS, through ArviZ) and
``chain_means`` share their row labels (``W[x-box, j]``, ``beta[j]``, ...), so a
row of one is found in the other; ``diagnostics`` checks them.
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
    named = with_names(idata, class_names, feature_names)
    names = _table_vars(named.posterior)
    means = named.posterior[names].mean("draw")
    labeller = az.labels.BaseLabeller()  # ArviZ's own row labels, as az.summary writes them
    scalars = az.sel_utils.xarray_var_iter(means, var_names=names, skip_dims={"chain"})
    rows = {labeller.make_label_flat(var, sel, isel): np.asarray(v) for var, sel, isel, v in scalars}
    return pd.DataFrame.from_dict(rows, orient="index", columns=list(range(means.sizes["chain"])))
