"""Plots for calibration, MCMC convergence and per-instance posterior uncertainty.

``reliability_diagram`` (with its table, ``reliability_table``), ``rank_plots``
and ``interval_plot``. Matplotlib's pyplot is imported inside the functions, so
importing this module needs no display; each function draws into given axes
when passed them and returns what it drew on.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from itertools import product
from typing import TYPE_CHECKING, NamedTuple

import numpy as np
import pandas as pd

from .metrics import (
    CREDIBLE_MASS,
    brier_score,
    equal_tailed_interval,
    expected_calibration_error,
    labelled_instances,
    log_loss,
)

if TYPE_CHECKING:
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure

    from ..inference.posterior.arviz_compat import Posterior

TABLE_COLUMNS = ("bin_lower", "bin_upper", "count", "mean_confidence", "accuracy")


def _pooled(
    instance_labels: Sequence[np.ndarray], proba: Sequence[np.ndarray]
) -> tuple[np.ndarray, np.ndarray]:
    """(m,) true labels and (m, C) probabilities of the labelled instances (not -1), all bags pooled."""
    t = np.concatenate([np.ravel(y) for y in instance_labels])
    p = np.concatenate([np.asarray(x, dtype=float) for x in proba], axis=0)
    if p.ndim != 2 or p.shape[0] != t.size:
        raise ValueError(
            f"{t.size} instance labels but probabilities of shape {p.shape}: pass one (n_b, C) array "
            "per bag, in the same bag order as the labels"
        )
    return labelled_instances(instance_labels, p, "probability rows")  # as the ECE counts them


def reliability_table(
    instance_labels: Sequence[np.ndarray], proba: Sequence[np.ndarray], n_bins: int = 10
) -> pd.DataFrame:
    """Per-bin accuracy and mean confidence of the top-class probability.

    Bins exactly as ``metrics.expected_calibration_error``: ``n_bins`` equal-width
    bins on [0, 1], the last one closed, so ``sum(count / n * |accuracy -
    mean_confidence|)`` over non-empty bins is that ECE.

    Args:
        instance_labels: B int arrays (n_b,), the true instance labels.
        proba: B arrays (n_b, C) of class probabilities.
        n_bins: number of confidence bins.
    Returns:
        ``n_bins`` rows with columns bin_lower, bin_upper, count, mean_confidence,
        accuracy (the last two NaN in empty bins).
    """
    if n_bins < 1:
        raise ValueError(f"n_bins must be a positive integer, got {n_bins}")
    t, p = _pooled(instance_labels, proba)
    conf, pred = p.max(axis=1), p.argmax(axis=1)
    bins = np.minimum((conf * n_bins).astype(int), n_bins - 1)
    count = np.bincount(bins, minlength=n_bins)
    with np.errstate(invalid="ignore", divide="ignore"):  # empty bins become NaN, on purpose
        mean_conf = np.bincount(bins, weights=conf, minlength=n_bins) / count
        accuracy = np.bincount(bins, weights=(pred == t).astype(float), minlength=n_bins) / count
    edges = np.arange(n_bins + 1) / n_bins
    return pd.DataFrame(
        {
            "bin_lower": edges[:-1],
            "bin_upper": edges[1:],
            "count": count,
            "mean_confidence": mean_conf,
            "accuracy": accuracy,
        },
        columns=list(TABLE_COLUMNS),
    )


class ReliabilityDiagram(NamedTuple):
    """What ``reliability_diagram`` drew and the numbers behind it.

    Attributes:
        ax: the diagram (accuracy against mean confidence).
        count_ax: its twin axis holding the bars of instances per bin.
        tables: model name -> ``reliability_table`` of that model.
        ece: model name -> ``metrics.expected_calibration_error``.
        caption: a sentence with each model's proper scores and ECE (the axes title says how many
            instances and bins; the legend gives each model's figures).
        log_loss, brier: model name -> ``metrics.log_loss``, ``metrics.brier_score``: the proper
            scores, which say which predictive is better where calibration alone cannot.
    """

    ax: Axes
    count_ax: Axes
    tables: dict[str, pd.DataFrame]
    ece: dict[str, float]
    caption: str
    log_loss: dict[str, float] | None = None
    brier: dict[str, float] | None = None


def reliability_diagram(
    instance_labels: Sequence[np.ndarray],
    proba_by_model: Mapping[str, Sequence[np.ndarray]],
    n_bins: int = 10,
    ax: Axes | None = None,
) -> ReliabilityDiagram:
    """Reliability diagram of several models' instance predictions on the same instances.

    One line per model through (mean confidence, accuracy) of each non-empty
    bin, the diagonal of perfect calibration, and, on a twin axis along the
    bottom, bars of how many instances each bin holds (one bar per model), so
    a point resting on a handful of instances is seen as such.

    Args:
        instance_labels: B int arrays (n_b,), the true instance labels.
        proba_by_model: model name -> B arrays (n_b, C) of class probabilities.
        n_bins: number of equal-width confidence bins.
        ax: axes to draw on (default: a new figure).
    Returns:
        ``ReliabilityDiagram`` with the axes, per-model tables and ECEs.
    """
    import matplotlib.pyplot as plt

    if not proba_by_model:
        raise ValueError("proba_by_model is empty: pass {model name: per-bag probability arrays}")
    if ax is None:
        _, ax = plt.subplots(figsize=(5.5, 5))
    tables = {m: reliability_table(instance_labels, p, n_bins) for m, p in proba_by_model.items()}
    ece = {m: expected_calibration_error(instance_labels, p, n_bins) for m, p in proba_by_model.items()}
    nll = {m: log_loss(instance_labels, p) for m, p in proba_by_model.items()}
    brier = {m: brier_score(instance_labels, p) for m, p in proba_by_model.items()}
    n = int(next(iter(tables.values()))["count"].sum())
    count_ax = ax.twinx()
    width = 1.0 / n_bins / len(tables)
    colors = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    for k, (model, table) in enumerate(tables.items()):
        color = colors[k % len(colors)]
        filled = table[table["count"] > 0]
        ax.plot(
            filled["mean_confidence"],
            filled["accuracy"],
            "o-",
            color=color,
            label=f"{model} (NLL {nll[model]:.3f}, Brier {brier[model]:.3f}, ECE {ece[model]:.3f})",
        )
        count_ax.bar(
            table["bin_lower"] + (k + 0.5) * width, table["count"], width=width, color=color, alpha=0.25
        )
    ax.plot([0, 1], [0, 1], "--", color="0.5", label="perfectly calibrated")
    ax.set(xlim=(0, 1), ylim=(0, 1.02))
    ax.set_xlabel("confidence (top-class probability)")
    ax.set_ylabel("accuracy")
    # Bars only fill the bottom quarter, under the curves.
    count_ax.set_ylim(0, 4 * max(int(t["count"].max()) for t in tables.values()) or 1)
    count_ax.set_ylabel("instances per bin (bars)")
    ax.set_zorder(count_ax.get_zorder() + 1)
    ax.patch.set_visible(False)
    ax.legend(loc="upper left", fontsize="small")
    caption = f"{n} instances, {n_bins} bins; " + "; ".join(
        f"{m}: log loss {nll[m]:.3f}, Brier {brier[m]:.3f}, ECE {ece[m]:.3f}" for m in tables
    )
    ax.set_title(f"{n} instances, {n_bins} confidence bins", fontsize="small")
    return ReliabilityDiagram(ax, count_ax, tables, ece, caption, nll, brier)


def _scalar_series(idata: Posterior, var_names: Sequence[str], coords: Mapping | None):
    """(label, (chain, draw) array) for every scalar of the chosen variables, in variable order."""
    posterior = idata.posterior
    for var in var_names:
        if var not in posterior:
            raise ValueError(f"no variable {var!r} in the posterior; it has {sorted(posterior.data_vars)}")
        da = posterior[var]
        sel = {k: v for k, v in (coords or {}).items() if k in da.dims}
        if sel:
            da = da.sel(sel)
        dims = [d for d in da.dims if d not in ("chain", "draw")]
        da = da.transpose("chain", "draw", *dims)
        values = np.asarray(da.values)
        index_values = [da[d].values for d in dims]
        for pos in product(*(range(len(v)) for v in index_values)):
            name = var if not dims else f"{var}[{', '.join(str(v[i]) for v, i in zip(index_values, pos))}]"
            yield name, values[(slice(None), slice(None), *pos)]


def rank_plots(
    idata: Posterior,
    var_names: str | Sequence[str],
    coords: Mapping | None = None,
    max_panels: int = 12,
    axes: np.ndarray | None = None,
) -> Figure:
    """Rank histograms, one small panel per scalar parameter, one step histogram per chain.

    Each scalar's draws are ranked over all chains pooled; when the chains mix
    well every chain's ranks are uniform, so each step histogram stays near
    the dashed line. A chain piling up at low or high ranks sits in another
    part of the posterior than the others.

    Args:
        idata: the posterior (DataTree, or 0.2x InferenceData) with a ``posterior`` group (chain, draw, ...).
        var_names: variable(s) to show, e.g. ``"beta"`` or ``["beta", "W"]``.
        coords: selection by dimension, e.g. ``{"class": [0, 3], "feature": slice(0, 4)}``.
        max_panels: most panels drawn; further scalars are left out and the figure title says so.
        axes: at least as many axes as panels (default: a new figure).
    Returns:
        The figure.
    """
    import matplotlib.pyplot as plt
    from scipy.stats import rankdata

    if isinstance(var_names, str):
        var_names = [var_names]
    if max_panels < 1:
        raise ValueError(f"max_panels must be a positive integer, got {max_panels}")
    series = list(_scalar_series(idata, var_names, coords))
    if not series:
        raise ValueError(f"{list(var_names)} with coords {coords} select no parameter; widen coords")
    shown = series[:max_panels]
    if axes is None:
        ncols = min(4, len(shown))
        nrows = math.ceil(len(shown) / ncols)
        fig, axes = plt.subplots(nrows, ncols, figsize=(3 * ncols, 2.4 * nrows), squeeze=False)
    flat_axes = np.ravel(axes)
    if len(flat_axes) < len(shown):
        raise ValueError(f"{len(shown)} panels but {len(flat_axes)} axes: pass more axes or lower max_panels")
    fig = flat_axes[0].figure
    n_chains, n_draws = shown[0][1].shape
    # Sturges' rule on one chain's draws: enough bins to see a shape, few enough that counts are not noise.
    n_bins = max(int(math.ceil(math.log2(n_draws) + 1)), 2)
    edges = np.linspace(0, n_chains * n_draws, n_bins + 1)
    for ax, (name, values) in zip(flat_axes, shown):
        ranks = rankdata(values, method="average").reshape(values.shape) - 0.5
        for c in range(n_chains):
            counts, _ = np.histogram(ranks[c], bins=edges)
            ax.stairs(counts, edges, label=f"chain {c}")
        ax.axhline(n_draws / n_bins, ls="--", color="0.5", lw=0.8, label="uniform")
        ax.set_title(name, fontsize="small")
        ax.set_xlabel("rank (all chains)", fontsize="small")
        ax.set_ylabel("draws", fontsize="small")
        ax.tick_params(labelsize="x-small")
    for ax in flat_axes[len(shown) :]:
        ax.set_visible(False)
    flat_axes[0].legend(fontsize="x-small")
    if len(series) > len(shown):
        fig.suptitle(
            f"first {len(shown)} of {len(series)} scalars; choose others with coords= or raise max_panels",
            fontsize="small",
        )
    fig.tight_layout()
    return fig


class ProbaIntervals(NamedTuple):
    """Posterior mean and equal-tailed credible interval of each instance's class probabilities.

    Attributes:
        mean: (n, C) posterior mean probabilities.
        interval: (n, C, 2) lower and upper interval ends.
        mass: the interval's posterior mass, e.g. 0.9.
    """

    mean: np.ndarray
    interval: np.ndarray
    mass: float


def proba_intervals(draws: np.ndarray, mass: float = CREDIBLE_MASS) -> ProbaIntervals:
    """``ProbaIntervals`` of one bag from per-draw probabilities.

    Args:
        draws: (S, n, C) class probabilities of the bag's n instances under S posterior draws.
        mass: posterior mass of the equal-tailed interval, in (0, 1).
    """
    draws = np.asarray(draws, dtype=float)
    if draws.ndim != 3:
        raise ValueError(f"draws must be (S, n, C), got shape {draws.shape}: stack one (n, C) array per draw")
    return ProbaIntervals(draws.mean(axis=0), equal_tailed_interval(draws, mass), mass)


def interval_plot(
    proba_intervals: ProbaIntervals | tuple[np.ndarray, np.ndarray],
    class_names: Sequence[str] | None = None,
    ax: Axes | None = None,
    true_labels: Sequence[int] | np.ndarray | None = None,
) -> Axes:
    """One bag's instances: each class's posterior mean probability and its credible interval.

    Instances run along x; each class sits at a small offset within the
    instance's slot, a dot at its mean with an error bar spanning its
    interval. Up to 20 classes get distinct colours; more get colours spread
    over a continuous map and a marker shape that changes every 10 classes, so
    neighbouring classes stay apart. ``true_labels`` (n,), where known (-1:
    unknown), rings each instance's true class, so a wrong but confident
    prediction is seen at once.

    Args:
        proba_intervals: ``ProbaIntervals``, or a pair (mean (n, C), interval (n, C, 2)): for bag
            ``b`` of a posterior fit, ``(model.predict_proba(bags)[b], model.predict_interval(bags)[b])``.
        class_names: C names for the legend (default "class 0", ...).
        ax: axes to draw on (default: a new figure).
        true_labels: (n,) the instances' true classes, -1 where unknown; None: none marked.
    Returns:
        The axes.
    """
    import matplotlib.pyplot as plt

    if not isinstance(proba_intervals, tuple):  # e.g. predict_interval's list, or one bag's array
        raise ValueError(
            "need the pair (mean (n, C), interval (n, C, 2)) of one bag, got "
            f"{type(proba_intervals).__name__}: pass (model.predict_proba(bags)[b], "
            "model.predict_interval(bags)[b]) for bag b, or proba_intervals(draws)"
        )
    mean, interval = np.asarray(proba_intervals[0], float), np.asarray(proba_intervals[1], float)
    if mean.ndim != 2 or interval.shape != mean.shape + (2,):
        raise ValueError(
            f"need mean (n, C) and interval (n, C, 2), got {mean.shape} and {interval.shape}: pass "
            "(model.predict_proba(bags)[b], model.predict_interval(bags)[b]) for bag b, or "
            "proba_intervals(draws) from (S, n, C) draws"
        )
    n, n_classes = mean.shape
    names = list(class_names) if class_names is not None else [f"class {c}" for c in range(n_classes)]
    if len(names) != n_classes:
        raise ValueError(f"{len(names)} class names for {n_classes} classes")
    if ax is None:
        # constrained: the legend beside the axes and the x label stay inside the saved figure
        _, ax = plt.subplots(figsize=(max(4.0, 0.9 * n + 2.5), 3.5), layout="constrained")
    truth = None if true_labels is None else np.asarray(true_labels, int)
    if truth is not None and truth.shape != (n,):
        raise ValueError(f"true_labels has shape {truth.shape}: give one label per instance ({n})")
    if n_classes <= 20:
        cmap = plt.get_cmap("tab10" if n_classes <= 10 else "tab20")
        colors = [cmap(c) for c in range(n_classes)]
    else:  # a qualitative map would repeat: spread the classes over a continuous one
        colors = [plt.get_cmap("turbo")(c / (n_classes - 1)) for c in range(n_classes)]
    markers = "os^Dv"
    slot = 0.8 / n_classes
    x0 = np.arange(n) - 0.4 + slot / 2
    for c in range(n_classes):
        x = x0 + c * slot
        lo, hi = interval[:, c, 0], interval[:, c, 1]
        marker = markers[(c // 10) % len(markers)] if n_classes > 20 else "o"
        # Bars centred on the interval, not the mean, so they span it exactly even for skewed posteriors.
        ax.errorbar(x, (lo + hi) / 2, yerr=(hi - lo) / 2, fmt="none", ecolor=colors[c], capsize=2, lw=1)
        ax.plot(x, mean[:, c], marker, ms=3.5, color=colors[c], label=names[c])
    if truth is not None:
        known = np.flatnonzero(truth >= 0)
        ax.plot(
            x0[known] + truth[known] * slot,
            mean[known, truth[known]],
            "o",
            ms=9,
            mfc="none",
            mec="black",
            mew=1.2,
            label="true label",
        )
    ax.set_xticks(np.arange(n))
    ax.set_xlim(-0.5, n - 0.5)
    ax.set_ylim(-0.02, 1.02)
    ax.set_xlabel("instance")
    mass = getattr(proba_intervals, "mass", None)
    ax.set_ylabel(
        "posterior probability" + (f" (mean, {mass:.0%} interval)" if mass else " (mean, interval)")
    )
    ax.legend(title="class", fontsize="x-small", loc="center left", bbox_to_anchor=(1.0, 0.5))
    return ax
