"""The one module that knows which ArviZ is installed: 0.2x (``InferenceData``) or 1.x (``xarray.DataTree``).

ArviZ 1.x (Python >= 3.12) splits into arviz-base / arviz-stats / arviz-plots and
replaces ``InferenceData`` with ``xarray.DataTree``; 0.2x stays the stack for
Python 3.11. The package calls these functions, never ``arviz`` itself, and reads
a posterior only through what both objects share: ``idata.posterior["W"]``,
``idata.sample_stats.attrs``, ``.sizes``, ``.data_vars``, ``"group" in idata``.
Everything else goes through here:

* ``from_dict`` builds the posterior object from dicts of (chain, draw, ...) arrays,
  with dims, coords and per-group attributes; ``dict_to_dataset`` one group.
* ``groups``, ``group``, ``add_groups``, ``map_groups``, ``copy``: the group structure.
* ``summary``: mean, sd, R-hat, bulk and tail ESS, unrounded (``SUMMARY_COLUMNS``).
* ``loo`` (with the approximate-posterior correction for SVI and Laplace draws),
  ``loo_estimate``, ``pareto_k``, ``importance_k`` (one set of importance ratios),
  ``bfmi``, ``ess_bulk``.
* ``scalar_draws``: each scalar's (chain, draw) draws, labelled as ``summary``'s rows.
* ``to_netcdf`` / ``from_netcdf``: ``posterior.nc``, one netCDF4 group per ArviZ group
  under both stacks, so a file written by either reads with the other (and with
  ``xarray.open_datatree``).
* ``plot_ppc``: ``plot_ppc`` (0.2x) or ``plot_ppc_dist`` (1.x).
"""

from __future__ import annotations

import logging
import warnings
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import Any

import numpy as np
import pandas as pd
import xarray as xr

with warnings.catch_warnings():
    warnings.simplefilter("ignore", FutureWarning)  # ArviZ 0.2x announces its 1.0 refactor on import
    import arviz as az

ARVIZ_VERSION = tuple(int(p) for p in az.__version__.split(".")[:2])
ARVIZ_1 = ARVIZ_VERSION >= (1, 0)
"""True for ArviZ 1.x (DataTree), False for 0.2x (InferenceData)."""

if ARVIZ_1:
    import arviz_stats  # noqa: F401  (registers xarray's ``.azstats`` accessor)
    from arviz_base.labels import BaseLabeller
    from arviz_base.sel_utils import xarray_var_iter

    Posterior = xr.DataTree
else:
    from arviz.labels import BaseLabeller
    from arviz.sel_utils import xarray_var_iter

    Posterior = az.InferenceData

LOGGERS = ("arviz", "arviz_base", "arviz_stats", "arviz_plots") if ARVIZ_1 else ("arviz",)
"""The names of the loggers ArviZ reports on."""


def _loggers() -> list[logging.Logger]:
    """The loggers ArviZ reports on. 0.2x logs through ``arviz._log``, a ``Logger`` it made itself,
    not the one ``logging.getLogger("arviz")`` returns."""
    named = [logging.getLogger(name) for name in LOGGERS]
    own = getattr(az, "_log", None)
    return named + ([own] if isinstance(own, logging.Logger) and own not in named else [])


@contextmanager
def quiet_loggers() -> Iterator[None]:
    """ArviZ's loggers at ERROR while it computes (``diagnostics.quiet_arviz`` adds its warnings)."""
    loggers = _loggers()
    levels = [logger.level for logger in loggers]
    for logger in loggers:
        logger.setLevel(logging.ERROR)
    try:
        yield
    finally:
        for logger, level in zip(loggers, levels):
            logger.setLevel(level)


SUMMARY_COLUMNS = ["mean", "sd", "r_hat", "ess_bulk", "ess_tail"]
"""``summary``'s columns, named alike by both ArviZ versions."""


# -- building ----------------------------------------------------------------------


def dict_to_dataset(
    data: Mapping[str, np.ndarray],
    *,
    dims: Mapping[str, Sequence[str]] | None = None,
    coords: Mapping[str, Any] | None = None,
    sample_dims: Sequence[str] | None = None,
    attrs: Mapping[str, Any] | None = None,
) -> xr.Dataset:
    """One group as a Dataset; ``sample_dims=[]`` for data without chain and draw (``observed_data``)."""
    kwargs: dict[str, Any] = {"dims": dims, "coords": coords, "attrs": attrs}
    if sample_dims is not None:
        kwargs["sample_dims" if ARVIZ_1 else "default_dims"] = list(sample_dims)
    return az.dict_to_dataset(dict(data), **kwargs)


def from_dict(
    groups: Mapping[str, Mapping[str, np.ndarray] | None],
    *,
    dims: Mapping[str, Sequence[str]] | None = None,
    coords: Mapping[str, Any] | None = None,
    attrs: Mapping[str, Mapping[str, Any]] | None = None,
):
    """The posterior object from ``{group: {variable: (chain, draw, ...) array}}``.

    Groups given as None are left out; ``attrs`` maps group names to their attributes
    (e.g. ``{"sample_stats": {"max_tree_depth": 10}}``), kept in ``posterior.nc``.
    """
    present = {g: dict(v) for g, v in groups.items() if v is not None}
    if ARVIZ_1:
        kept = {g: a for g, a in (attrs or {}).items() if g in present}
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", UserWarning)  # one-chain shape checks
            return az.from_dict(present, dims=dims, coords=coords, attrs=kept or None)
    idata = az.from_dict(**present, dims=dims, coords=coords)
    for g, a in (attrs or {}).items():
        if g in present and a:
            getattr(idata, g).attrs.update(a)
    return idata


def copy(idata):
    """A deep copy (``DataTree.copy()`` is shallow by default; ``InferenceData.copy()`` is deep)."""
    return idata.copy(deep=True) if ARVIZ_1 else idata.copy()


def groups(idata) -> list[str]:
    """The group names (``posterior``, ``sample_stats``, ...), without ``/``."""
    if ARVIZ_1:
        return list(idata.children)
    return list(idata.groups())


def group(idata, name: str) -> xr.Dataset | None:
    """Group ``name`` as an ``xarray.Dataset`` (None if absent), e.g. to index it by a list of names."""
    if name not in groups(idata):
        return None
    node = idata[name]
    return node.to_dataset() if ARVIZ_1 else node


def add_groups(idata, new: Mapping[str, xr.Dataset]):
    """``idata`` with the given Dataset groups added (in place under 0.2x; returned either way)."""
    if ARVIZ_1:
        for name, ds in new.items():
            idata[name] = xr.DataTree(ds)
        return idata
    idata.add_groups(dict(new))
    return idata


def move_variables(idata, names: Sequence[str], source: str, target: str):
    """A copy with the variables ``names`` of group ``source`` moved to a new group ``target``."""
    ds = group(idata, source)
    moved, kept = ds[list(names)], ds.drop_vars(list(names))
    if ARVIZ_1:
        out = idata.copy()
        out[source] = xr.DataTree(kept)
        out[target] = xr.DataTree(moved)
        return out
    out = idata.map(lambda d: d.drop_vars(list(names)), groups=source)
    out.add_groups({target: moved})
    return out


def map_groups(idata, fn: Callable[[xr.Dataset], xr.Dataset]):
    """A copy with ``fn`` applied to every group's Dataset (attributes kept)."""
    if ARVIZ_1:
        out = idata.copy()
        for name in groups(idata):
            ds = idata[name].to_dataset()
            out[name] = xr.DataTree(fn(ds).assign_attrs(ds.attrs))
        return out
    return idata.map(fn)


# -- statistics --------------------------------------------------------------------


TAIL_PROB = (0.05, 0.95)
"""Tail ESS is the smaller ESS of the indicators at these quantiles (0.2x's default; 1.x's follows
``stats.ci_prob``, 0.89, so its own default is at the 11% and 89% quantiles: set here explicitly)."""


def summary(posterior: xr.Dataset) -> pd.DataFrame:
    """Per-scalar mean, sd, R-hat and bulk/tail ESS (``SUMMARY_COLUMNS``), unrounded, equal under both.

    Rows ``W[x-box, j]`` as both ArviZ label them. R-hat is NaN for a parameter
    constant over all draws, and for every parameter when there is one chain.
    """
    # ArviZ logs "Shape validation failed" for one chain (SVI's draws); the callers report that fact.
    with quiet_loggers():
        table = pd.DataFrame(az.summary(posterior, kind="all", round_to="none"))
        if ARVIZ_1:
            tail = az.ess(posterior, method="tail", prob=TAIL_PROB).expand_dims(summary=["ess_tail"])
            table["ess_tail"] = az.dataset_to_dataframe(tail, sample_dims=["summary"]).T["ess_tail"]
    return table[SUMMARY_COLUMNS].astype(float)


def ess_bulk(dataset: xr.Dataset) -> xr.Dataset:
    """Rank-normalised split-chain bulk ESS of every variable (``arviz.ess(method="bulk")``)."""
    return az.ess(dataset, method="bulk")


def loo(idata, pointwise: bool = True):
    """PSIS-LOO of the ``log_likelihood`` group (``ELPDData``; 1.x's ``ELPDDataLOO``).

    Both carry ``elpd_loo`` (1.x: ``elpd``), ``p_loo`` (``p``) and, pointwise, ``pareto_k``
    (a DataArray over ``bag``). Draws from an approximation q (SVI: ``sample_stats`` holds
    ``lp`` = log p(theta, Y) and ``log_q``) are first importance-weighted towards the
    posterior, as 1.x's ``loo_approximate_posterior`` does (Magnusson et al. 2019):
    log ratios ``-log p(Y_b | theta) + lp - log_q``, smoothed per bag by PSIS. Its k-hat
    then also says whether q is close enough to the posterior for the weights to work.
    """
    stats = group(idata, "sample_stats")
    if stats is None or "log_q" not in stats or "lp" not in stats:
        return az.loo(idata, pointwise=pointwise)
    log_p, log_q = stats["lp"].astype(np.float64), stats["log_q"].astype(np.float64)
    if ARVIZ_1:
        return az.loo_approximate_posterior(idata, log_p=log_p, log_q=log_q, pointwise=pointwise)
    return _loo_approximate_legacy(idata, log_p, log_q, pointwise)


def _loo_approximate_legacy(idata, log_p: xr.DataArray, log_q: xr.DataArray, pointwise: bool):
    """0.2x has no ``loo_approximate_posterior``: the same estimate, laid out as its ``az.loo``."""
    from scipy.special import logsumexp

    ll = group(idata, "log_likelihood")["Y"].astype(np.float64).stack(__sample__=("chain", "draw"))
    correction = (log_p - log_q).stack(__sample__=("chain", "draw"))
    log_ratios = -ll + (correction - correction.max())
    log_weights, k = az.psislw(log_ratios - log_ratios.max("__sample__"), 1.0)
    elpd_i = xr.apply_ufunc(
        logsumexp, log_weights + ll, input_core_dims=[["__sample__"]], kwargs={"axis": -1}
    )
    n_samples, n_data = ll.sizes["__sample__"], int(elpd_i.size)
    lppd = float(np.sum(logsumexp(ll.values, axis=-1) - np.log(n_samples)))
    elpd = float(elpd_i.sum())
    good_k = min(1 - 1 / np.log10(n_samples), 0.7)
    values = {
        "elpd_loo": elpd,
        "se": float(np.sqrt(n_data * np.var(elpd_i.values))),
        "p_loo": lppd - elpd,
        "n_samples": n_samples,
        "n_data_points": n_data,
        "warning": bool(np.any(k.values > good_k)),
    }
    if pointwise:
        values.update({"loo_i": elpd_i.rename("loo_i"), "pareto_k": k})
    values.update({"scale": "log", "good_k": good_k})
    return az.ELPDData(data=list(values.values()), index=list(values))


def loo_estimate(idata) -> dict[str, float]:
    """``elpd_loo``, its standard error ``se`` and ``p_loo`` (1.x names them ``elpd``, ``se``, ``p``)."""
    result = loo(idata, pointwise=False)
    if ARVIZ_1:
        return {"elpd_loo": float(result.elpd), "se": float(result.se), "p_loo": float(result.p)}
    return {"elpd_loo": float(result["elpd_loo"]), "se": float(result["se"]), "p_loo": float(result["p_loo"])}


def importance_k(log_ratios: np.ndarray) -> float:
    """The Pareto k-hat of (S,) importance log ratios ``log p - log q`` of independent draws from q.

    PSIS's shape estimate of the ratios' upper tail (Vehtari et al. 2024): above 0.7
    the ratios' mean is unreliable, and q (a variational or Laplace approximation) is
    too far from p for its draws to stand for p's (Yao et al. 2018).
    """
    lw = np.asarray(log_ratios, np.float64).reshape(-1)
    lw = lw - lw.max()
    if ARVIZ_1:
        return float(xr.DataArray(lw[None], dims=("chain", "draw")).azstats.psislw(r_eff=1.0)[1])
    return float(az.psislw(lw, 1.0)[1])


def pareto_k(idata) -> xr.DataArray:
    """Per-observation PSIS-LOO Pareto k-hat of the ``log_likelihood`` group."""
    return loo(idata, pointwise=True).pareto_k


def bfmi(idata) -> np.ndarray:
    """E-BFMI per chain, from ``sample_stats.energy``."""
    value = az.bfmi(idata)
    if ARVIZ_1:  # a DataTree (or Dataset) holding ``energy`` over chain
        value = value["energy"]
    return np.atleast_1d(np.asarray(value, np.float64))


def scalar_draws(posterior: xr.Dataset, var_names: Sequence[str]) -> Iterator[tuple[str, np.ndarray]]:
    """(label, (chain, draw) array) per scalar, labels as ``summary``'s rows (``W[x-box, j]``)."""
    labeller = BaseLabeller()
    for var, sel, isel, values in xarray_var_iter(
        posterior[list(var_names)], var_names=list(var_names), skip_dims={"chain", "draw"}
    ):
        yield labeller.make_label_flat(var, sel, isel), np.asarray(values)


# -- files -------------------------------------------------------------------------


def to_netcdf(idata, path: str) -> None:
    """Write one netCDF4 group per ArviZ group (both versions lay ``posterior.nc`` out alike)."""
    idata.to_netcdf(str(path), engine="h5netcdf")


def from_netcdf(path: str):
    """Read a ``posterior.nc`` written under either ArviZ into memory, the file closed after."""
    if ARVIZ_1:
        with xr.open_datatree(str(path), engine="h5netcdf") as tree:  # = arviz.from_netcdf, lazy
            return tree.load().copy(deep=True)
    with az.rc_context({"data.load": "eager"}):
        return az.from_netcdf(str(path))


# -- plots -------------------------------------------------------------------------


def plot_ppc(
    idata, var_names: Sequence[str], kind: str = "kde", num_samples: int = 50, random_seed: int | None = 0
):
    """Posterior predictive densities against the observed one; returns the matplotlib ``Figure``.

    0.2x ``plot_ppc(num_pp_samples=...)``, 1.x ``plot_ppc_dist(num_samples=...)`` (its
    draws are chosen with a fixed seed of its own: ``random_seed`` applies to 0.2x only).
    ``kind``: "kde" under both; 1.x also takes "hist", "ecdf", "dot".
    """
    if ARVIZ_1:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", UserWarning)  # "discrete data: consider kind='hist'"
            drawn = az.plot_ppc_dist(
                idata, var_names=list(var_names), kind=kind, num_samples=num_samples, backend="matplotlib"
            )
        return drawn.get_viz("figure")
    axes = az.plot_ppc(
        idata, var_names=list(var_names), kind=kind, num_pp_samples=num_samples, random_seed=random_seed
    )
    return np.ravel(axes)[0].figure
