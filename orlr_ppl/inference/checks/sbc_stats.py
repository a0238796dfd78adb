"""Statistics of simulation-based calibration: ranks, the uniformity test and the report.

``sbc`` simulates and fits the replications; this module turns their draws
into the verdict. For every scalar of ``theta`` and replication ``r``::

    rank_r = #{l : theta_r^(l) < theta_r}  in {0, ..., L},

over ``L`` thinned posterior draws (``thin_indices``, ``sbc_ranks``). The
ranks of each scalar are binned into ``n_bins`` equal bins and tested for
equal counts with a chi-square test; the p-values are Holm-corrected over the
scalars, and the verdict passes when every corrected p-value exceeds
``alpha`` (``rank_uniformity``, ``sbc_result``). ``format_table`` reports it.

Nothing here depends on the model: the functions take NumPy arrays.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np
from scipy import stats

from ...model.numpyro_model import sum_to_zero_basis
from ..posterior import arviz_compat as azc
from ..posterior.inference_data import thinned_draws

# -- parameters and ranks -------------------------------------------------------


def param_names(n_features: int, n_classes: int, derived: bool = False) -> list[str]:
    """Names of the flattened scalars, in ``flat_params`` order.

    ``W_raw[j,k]``, ``beta_raw[k]``, and with ``derived`` the per-class
    ``W[j,c]``, ``beta[c]``.
    """
    names = [f"W_raw[{j},{k}]" for j in range(n_features) for k in range(n_classes - 1)]
    names += [f"beta_raw[{k}]" for k in range(n_classes - 1)]
    if derived:
        names += [f"W[{j},{c}]" for j in range(n_features) for c in range(n_classes)]
        names += [f"beta[{c}]" for c in range(n_classes)]
    return names


def flat_params(w_raw: np.ndarray, beta_raw: np.ndarray, derived: bool = False) -> np.ndarray:
    """(..., P) scalars from ``W_raw`` (..., d, C-1) and ``beta_raw`` (..., C-1).

    With ``derived``, also ``W = W_raw H^T`` (..., d, C) and ``beta = beta_raw
    H^T`` (..., C), flattened row-major.
    """
    w_raw, beta_raw = np.asarray(w_raw, np.float64), np.asarray(beta_raw, np.float64)
    batch = w_raw.shape[:-2]
    parts = [w_raw.reshape(batch + (-1,)), beta_raw]
    if derived:
        basis = sum_to_zero_basis(w_raw.shape[-1] + 1)
        parts += [(w_raw @ basis.T).reshape(batch + (-1,)), beta_raw @ basis.T]
    return np.concatenate(parts, axis=-1)


def thin_indices(n_total: int, n_keep: int) -> np.ndarray:
    """(n_keep,) evenly spaced indices into ``n_total`` draws, first and last included.

    The indices are ``inference_data.thinned_draws``'; what this adds is the
    count check. ``thinned_draws`` caps the count (it returns all ``n_total``
    draws when there are fewer than asked), but SBC needs exactly ``L`` draws
    in every replication: the ranks lie in ``0..L`` and the rank bins are laid
    out for that ``L``, so too few draws is an error here.
    """
    if not 1 <= n_keep <= n_total:
        raise ValueError(f"cannot keep {n_keep} of {n_total} draws: use more draws or chains, or a smaller L")
    return thinned_draws(n_total, n_keep)


def sbc_ranks(draws: np.ndarray, truth: np.ndarray) -> np.ndarray:
    """(P,) rank of each true scalar among its draws: ``#{l : draws[l] < truth}``, in 0..L.

    Args:
        draws: (L, P) posterior draws.
        truth: (P,) the values that generated the data.
    """
    return np.sum(np.asarray(draws) < np.asarray(truth)[None, :], axis=0).astype(np.int64)


def bulk_ess(draws: np.ndarray) -> np.ndarray:
    """(P,) bulk effective sample size of (chains, S, P) draws: ``arviz.ess(method="bulk")`` per scalar.

    Rank-normalised split-chain ESS (Vehtari et al. 2021), the ESS that
    ``diagnostics`` checks for ``fit_nuts``; each replication reports its
    smallest, to show whether ``L`` thinned draws are close to independent.
    """
    dataset = azc.dict_to_dataset({"theta": np.asarray(draws, np.float64)})
    return np.asarray(azc.ess_bulk(dataset)["theta"], np.float64)


# -- the uniformity test --------------------------------------------------------


def holm(p_values: np.ndarray) -> np.ndarray:
    """Holm step-down adjusted p-values (family-wise error control, any dependence).

    The ``i``-th smallest p-value becomes ``max_{j <= i} min(1, (m - j + 1) p_(j))``.
    """
    p = np.asarray(p_values, np.float64)
    order = np.argsort(p)
    m = p.size
    adjusted = np.minimum(np.maximum.accumulate((m - np.arange(m)) * p[order]), 1.0)
    out = np.empty_like(p)
    out[order] = adjusted
    return out


class UniformityTest(NamedTuple):
    """Chi-square test of uniform SBC ranks, per parameter.

    Attributes:
        counts: (n_bins, P) replications per rank bin.
        statistic: (P,) ``sum_b (O_b - R/n_bins)^2 / (R/n_bins)``.
        p_values: (P,) chi-square (``n_bins - 1`` dof) upper-tail p-values.
        adjusted: (P,) Holm-adjusted p-values over all P parameters.
    """

    counts: np.ndarray
    statistic: np.ndarray
    p_values: np.ndarray
    adjusted: np.ndarray


def rank_uniformity(ranks: np.ndarray, n_draws: int, n_bins: int) -> UniformityTest:
    """Chi-square test that (R, P) ranks in ``0..n_draws`` are uniform, with Holm correction.

    The ``L + 1`` possible ranks are grouped into ``n_bins`` bins of equal
    width, so ``n_bins`` must divide ``L + 1``. The chi-square approximation
    wants an expected count ``R / n_bins`` of at least about 5.
    """
    ranks = np.asarray(ranks)
    if ranks.ndim != 2:
        raise ValueError(f"ranks must be (replications, parameters), got shape {ranks.shape}")
    if n_bins < 2 or (n_draws + 1) % n_bins:
        raise ValueError(f"n_bins={n_bins} must be at least 2 and divide L + 1 = {n_draws + 1}")
    if ranks.size and (ranks.min() < 0 or ranks.max() > n_draws):
        raise ValueError(f"ranks must lie in 0..{n_draws}")
    bins = ranks // ((n_draws + 1) // n_bins)
    counts = np.stack([np.sum(bins == b, axis=0) for b in range(n_bins)])
    expected = ranks.shape[0] / n_bins
    statistic = np.sum((counts - expected) ** 2, axis=0) / expected
    p_values = stats.chi2.sf(statistic, n_bins - 1)
    return UniformityTest(counts, statistic, p_values, holm(p_values))


# -- the verdict ----------------------------------------------------------------


class SBCResult(NamedTuple):
    """Outcome of an SBC run.

    Attributes:
        ranks: (R, P) int, rank of each true scalar among the ``n_draws`` thinned draws.
        n_draws: L; ranks lie in ``0..L``.
        n_bins: rank bins of the chi-square test.
        param_names: P names (``param_names``).
        min_ess: (R,) smallest bulk ESS over the parameters, of all post-warmup draws.
        n_divergent: (R,) divergent transitions after warmup.
        counts: (n_bins, P) replications per rank bin.
        p_values: (P,) chi-square p-values.
        adjusted: (P,) Holm-adjusted p-values.
        passed: every adjusted p-value exceeds ``alpha``.
        alpha: family-wise level of the verdict.
        likelihood_power: 1 unless the test device broke the likelihood.
        seconds: wall time of the fits and ranks.
    """

    ranks: np.ndarray
    n_draws: int
    n_bins: int
    param_names: list[str]
    min_ess: np.ndarray
    n_divergent: np.ndarray
    counts: np.ndarray
    p_values: np.ndarray
    adjusted: np.ndarray
    passed: bool
    alpha: float
    likelihood_power: float = 1.0
    seconds: float = float("nan")

    def summary(self) -> str:
        """The table of ``format_table``."""
        return format_table(self)


def sbc_result(
    ranks: np.ndarray,
    n_draws: int,
    n_bins: int,
    names: list[str],
    min_ess: np.ndarray,
    n_divergent: np.ndarray,
    alpha: float = 0.01,
    likelihood_power: float = 1.0,
    seconds: float = float("nan"),
) -> SBCResult:
    """Test (R, P) ranks for uniformity and package the verdict."""
    test = rank_uniformity(ranks, n_draws, n_bins)
    return SBCResult(
        np.asarray(ranks),
        n_draws,
        n_bins,
        list(names),
        np.asarray(min_ess, np.float64),
        np.asarray(n_divergent, np.int64),
        test.counts,
        test.p_values,
        test.adjusted,
        bool(np.all(test.adjusted > alpha)),
        alpha,
        likelihood_power,
        seconds,
    )


def format_table(result: SBCResult) -> str:
    """Per-parameter chi-square and Holm p-values, the verdict and the ESS and divergence summary."""
    n_rep = result.ranks.shape[0]
    width = max(len("parameter"), *(len(n) for n in result.param_names))
    lines = [f"{'parameter':<{width}}  {'chi2 p':>9}  {'Holm p':>9}"]
    for name, p, adj in zip(result.param_names, result.p_values, result.adjusted):
        flag = "  <- non-uniform" if adj <= result.alpha else ""
        lines.append(f"{name:<{width}}  {p:>9.3g}  {adj:>9.3g}{flag}")
    q = np.quantile(result.min_ess, [0.0, 0.05, 0.5])
    broken = "" if result.likelihood_power == 1.0 else f" (likelihood ** {result.likelihood_power:g}: broken)"
    lines += [
        "",
        f"{n_rep} replications{broken}, L = {result.n_draws} thinned draws, {result.n_bins} bins "
        f"({n_rep / result.n_bins:.1f} expected per bin)",
        f"verdict: {'PASS' if result.passed else 'FAIL'} (min Holm p = {result.adjusted.min():.3g}, "
        f"alpha = {result.alpha:g})",
        f"min bulk ESS per replication: min {q[0]:.0f}, 5% {q[1]:.0f}, median {q[2]:.0f}; "
        f"{int(np.sum(result.min_ess < result.n_draws))} replications below L",
        f"divergent transitions: {int(result.n_divergent.sum())} in "
        f"{int(np.sum(result.n_divergent > 0))} replications",
    ]
    return "\n".join(lines)
