"""Rank histograms of an SBC run (``run_sbc``), one panel per parameter.

Apart from ``sbc_stats`` so that matplotlib is imported only when a figure is
drawn (``plot_rank_histograms`` imports it on call).
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

import numpy as np
from scipy import stats

from .sbc_stats import SBCResult

if TYPE_CHECKING:
    from matplotlib.figure import Figure


def plot_rank_histograms(result: SBCResult, ncols: int = 4, band: float = 0.99) -> Figure:
    """Rank histograms, one panel per parameter, against the uniform expectation.

    Under uniform ranks each bin's count is Binomial(R, 1/n_bins); the grey
    band spans its central ``band`` probability, so about ``(1 - band)`` of
    all bars fall outside it by chance.

    Args:
        result: from ``run_sbc``.
        ncols: panels per row.
        band: central probability of the shaded band.
    Returns:
        The figure.
    """
    import matplotlib.pyplot as plt

    n_rep, n_par = result.ranks.shape
    ncols = max(1, min(ncols, n_par))
    nrows = math.ceil(n_par / ncols)
    fig, axes = plt.subplots(nrows, ncols, figsize=(2.8 * ncols, 2.3 * nrows + 0.9), squeeze=False)
    edges = np.linspace(0, result.n_draws + 1, result.n_bins + 1)
    lo, hi = stats.binom.ppf([(1 - band) / 2, (1 + band) / 2], n_rep, 1 / result.n_bins)
    for i, ax in enumerate(axes.flat):
        if i >= n_par:
            ax.set_visible(False)
            continue
        ax.stairs(result.counts[:, i], edges, fill=True, color="C0", alpha=0.7, label="replications")
        # Over the bars, translucent, so that bars inside and outside it both show.
        ax.axhspan(lo, hi, color="0.5", alpha=0.3, lw=0, label=f"{band:.0%} band if uniform")
        ax.axhline(n_rep / result.n_bins, color="0.2", ls="--", lw=0.8, label="uniform expectation")
        ax.set_title(f"{result.param_names[i]}  (Holm p {result.adjusted[i]:.2g})", fontsize="small")
        ax.set_xlabel(f"rank among L = {result.n_draws} draws", fontsize="small")
        ax.set_ylabel("replications", fontsize="small")
        ax.set_xlim(0, result.n_draws + 1)
        ax.tick_params(labelsize="x-small")
    handles, labels = axes.flat[0].get_legend_handles_labels()
    # Below the panels, where it hides no bar.
    fig.legend(handles, labels, loc="lower center", bbox_to_anchor=(0.5, 0.035), ncol=3, fontsize="small")
    verdict = "PASS" if result.passed else "FAIL"
    fig.text(
        0.5,
        0.01,
        f"SBC rank histograms: {n_rep} replications, {result.n_bins} bins; a calibrated posterior gives "
        f"uniform ranks. Verdict: {verdict} (passes when every Holm-corrected p > {result.alpha:g}).",
        ha="center",
        va="bottom",
        fontsize="small",
    )
    fig.tight_layout(rect=(0, 0.1, 1, 1))
    return fig
