"""Simulation-based calibration (SBC) of the NUTS posterior of ``orlr_model``.

Talts, Betancourt, Simpson, Vehtari & Gelman (2018), "Validating Bayesian
inference algorithms with simulation-based calibration". For replications
``r = 1..R``::

    theta_r ~ p(theta),   Y_r ~ p(Y | theta_r, X_r),   theta_r^(1..L) ~ p(theta | Y_r, X_r),
    rank_r = #{l : theta_r^(l) < theta_r}  in {0, ..., L}.

Averaged over the prior, the posterior is the prior again, so when the
sampler draws from the exact posterior every scalar's rank is uniform on
``{0, ..., L}``. A posterior that is too narrow (overconfident) piles ranks at
both ends (U shape), one too wide piles them in the middle, a biased one tilts
them. The test here bins the ranks of each scalar into ``n_bins`` equal bins,
takes a chi-square test of equal counts, and corrects the p-values for the
number of scalars (Holm); the verdict passes when every corrected p-value
exceeds ``alpha``.

Simulation. ``theta = (W_raw, beta_raw)`` is drawn from the priors of
``orlr_model`` (``Normal(0, prior_scale)``, ``Normal(0, intercept_scale)``),
the features ``X ~ Normal(0, 1)``, the instance labels from ``softmax(X W +
beta)`` and each bag's label set is their union. This is written in NumPy,
independently of ``BagLabelSet`` and its subset DP, so SBC checks the DP
likelihood against the generative story as well as the sampler. A simulated
label set is never empty (every bag has an instance), so every bag is
fittable.

One layout for all replications. Bag sizes are fixed (``1..max_bag_size``,
cycling) and every bag sits in a single ``ModelBucket`` padded to the largest
size with ``max_labels = n_classes``: the DP masks the unused label slots of
smaller sets, so the shapes do not depend on the simulated labels and the
sampler compiles once. ``make_model_data`` would bucket bags by label-set size,
giving label-dependent shapes, hence ``replication_model_data`` builds the
``ModelData`` directly.

Why not ``numpyro.infer.MCMC``. ``MCMC.run`` retraces and recompiles its
sampling loop on every call in NumPyro 0.22, even with ``jit_model_args=True``
(``fori_collect`` passes a fresh ``jit`` wrapper as a static argument; fixed
upstream in pyro-ppl/numpyro#2171): about 5 s a replication here instead of
0.2 s. ``nuts_chains`` therefore drives the same ``NUTS`` kernel (its
``init`` and ``sample``, default diagonal adaptation, chains started at zero
weights) from one jitted function whose data are arguments; it compiles once
per shape family and reproduces ``MCMC``'s draws exactly when there is no
warmup (with warmup they agree up to float rounding amplified by the chaotic
trajectories).

Thinning. Draws are autocorrelated; ranks from correlated draws are not
uniform even for an exact sampler (Talts et al. section 4.1). The post-warmup
draws of all chains are thinned to ``L`` evenly spaced draws, and each
replication records its smallest bulk effective sample size: when it is well
above ``L`` the thinned draws are close to independent.
"""

from __future__ import annotations

import functools
import math
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax
from numpyro.diagnostics import effective_sample_size
from numpyro.infer import NUTS, init_to_value
from numpyro.primitives import Messenger
from scipy import stats
from scipy.special import ndtri

from ..model.numpyro_model import ModelBucket, ModelData, orlr_model, sum_to_zero_basis

if TYPE_CHECKING:
    from matplotlib.figure import Figure

Array = jax.Array

BROKEN_LIKELIHOOD_POWER = 4.0
"""Test device: the likelihood power of the deliberately wrong posterior that SBC must reject.

Fitting with ``p(theta) p(Y | theta)**4`` shrinks the posterior about
two-fold: the ranks pile at both ends.
"""


class SBCDesign(NamedTuple):
    """What is simulated: the data shapes and the model's priors.

    The intercept prior is narrower than ``orlr_model``'s default (10): with
    sd-10 intercepts one class wins almost every instance, the label sets carry
    next to no information about ``W`` and the posterior is the prior, which
    any sampler (or broken likelihood) would pass.
    """

    n_bags: int = 40
    n_classes: int = 3
    n_features: int = 2
    max_bag_size: int = 5
    prior_scale: float = 1.0
    intercept_scale: float = 1.0


class NUTSSettings(NamedTuple):
    """NUTS run per replication (hashable: a static argument of ``nuts_chains``)."""

    num_warmup: int = 500
    num_samples: int = 500
    num_chains: int = 2
    target_accept_prob: float = 0.8


# -- simulation ----------------------------------------------------------------


class Replication(NamedTuple):
    """One simulated data set and the parameters that generated it.

    Attributes:
        features: (B, N, d) float32 instance features, zero on padding.
        mask: (B, N) bool, real instances.
        label_sets: (B, C) int32 multi-hot label sets (never empty).
        instance_labels: (B, N) int hidden instance labels, -1 on padding.
        w_raw: (d, C-1) true ``W_raw``.
        beta_raw: (C-1,) true ``beta_raw``.
    """

    features: np.ndarray
    mask: np.ndarray
    label_sets: np.ndarray
    instance_labels: np.ndarray
    w_raw: np.ndarray
    beta_raw: np.ndarray


def bag_sizes(n_bags: int, max_bag_size: int) -> np.ndarray:
    """(B,) fixed bag sizes ``1, 2, ..., max_bag_size, 1, 2, ...``."""
    if n_bags < 1 or max_bag_size < 1:
        raise ValueError(f"n_bags and max_bag_size must be positive, got {n_bags}, {max_bag_size}")
    return 1 + np.arange(n_bags) % max_bag_size


def simulate_replication(rng: np.random.Generator, design: SBCDesign) -> Replication:
    """Draw ``theta`` from the prior, then features, instance labels and label sets.

    ``W = W_raw H^T`` and ``beta = beta_raw H^T`` with ``H`` the model's
    sum-to-zero basis; instance labels are Gumbel-max draws from
    ``softmax(x W + beta)``; a bag's label set is the union of its labels.
    """
    n_bags, n_classes, n_features = design.n_bags, design.n_classes, design.n_features
    n_max = design.max_bag_size
    if n_classes < 2:
        raise ValueError(f"n_classes must be at least 2, got {n_classes}")
    basis = sum_to_zero_basis(n_classes)
    w_raw = rng.normal(0.0, design.prior_scale, (n_features, n_classes - 1))
    beta_raw = rng.normal(0.0, design.intercept_scale, n_classes - 1)
    mask = np.arange(n_max)[None, :] < bag_sizes(n_bags, n_max)[:, None]
    # float32 as the model sees it; the labels come from the same rounded features.
    x = (rng.normal(size=(n_bags, n_max, n_features)) * mask[..., None]).astype(np.float32)
    logits = x.astype(np.float64) @ (w_raw @ basis.T) + beta_raw @ basis.T
    labels = np.argmax(logits + rng.gumbel(size=logits.shape), axis=-1)
    hits = np.eye(n_classes, dtype=np.int32)[labels] * mask[..., None]
    return Replication(x, mask, hits.max(axis=1), np.where(mask, labels, -1), w_raw, beta_raw)


def replication_model_data(features: Array, mask: Array, label_sets: Array) -> ModelData:
    """All bags in one ``ModelBucket`` with ``max_labels = C``: shapes independent of the labels.

    Built directly rather than by ``make_model_data`` (which buckets bags by
    label-set size) so that every replication, and traced arrays inside
    ``nuts_chains``, share one layout.

    Args:
        features: (B, N, d) padded features.
        mask: (B, N) bool, real instances.
        label_sets: (B, C) int multi-hot label sets.
    """
    n_bags, n_classes = label_sets.shape
    bucket = ModelBucket(features, mask, label_sets, np.arange(n_bags), n_classes)
    return ModelData((bucket,), n_bags, features.shape[-1], n_classes)


# -- fitting -------------------------------------------------------------------


class _PowerObserved(Messenger):
    """Test device: scales the log-density of observed sites only (``likelihood ** power``).

    ``numpyro.handlers.scale`` would scale the priors too. With ``power = 1``
    the log-likelihood is multiplied by exactly 1.0, so the correct posterior
    is untouched.
    """

    def __init__(self, power: Array | float) -> None:
        self.power = power
        super().__init__()

    def process_message(self, msg: dict) -> None:
        if msg["type"] == "sample" and msg["is_observed"]:
            msg["scale"] = self.power if msg["scale"] is None else self.power * msg["scale"]


def _sbc_model(
    features: Array,
    mask: Array,
    label_sets: Array,
    prior_scale: Array,
    intercept_scale: Array,
    likelihood_power: Array,
) -> None:
    """``orlr_model`` on the single-bucket layout; the likelihood power is a test device."""
    data = replication_model_data(features, mask, label_sets)
    with _PowerObserved(likelihood_power):
        orlr_model(data, prior_scale=prior_scale, intercept_scale=intercept_scale)


class ChainDraws(NamedTuple):
    """Post-warmup NUTS draws of one replication.

    Attributes:
        w_raw: (chains, S, d, C-1).
        beta_raw: (chains, S, C-1).
        diverging: (chains, S) bool.
    """

    w_raw: np.ndarray
    beta_raw: np.ndarray
    diverging: np.ndarray


@functools.partial(jax.jit, static_argnames=("settings",))
def nuts_chains(
    rng_key: Array,
    features: Array,
    mask: Array,
    label_sets: Array,
    prior_scale: float,
    intercept_scale: float,
    likelihood_power: float,
    settings: NUTSSettings,
) -> ChainDraws:
    """NUTS on one replication's data, chains one after another (``lax.map``).

    Same kernel and defaults as ``infer_nuts.fit_nuts`` (NumPyro ``NUTS``,
    diagonal mass-matrix and step-size adaptation, chains started at zero
    weights), driven the way ``MCMC`` drives it: ``init`` then
    ``num_warmup + num_samples`` calls of ``sample``; chain keys are
    ``MCMC``'s (the key itself for one chain, else ``split(key, chains)``).
    The data and scales are traced arguments, so every replication of one
    shape family reuses one compilation.

    Args:
        rng_key: PRNG key.
        features, mask, label_sets: as ``replication_model_data``.
        prior_scale, intercept_scale: the priors' standard deviations.
        likelihood_power: 1 for the model's posterior. Test device: other
            values fit ``p(theta) p(Y | theta)**power``, a wrong posterior.
        settings: warmup, draws, chains, target acceptance (static).
    """
    n_features, n_classes = features.shape[-1], label_sets.shape[-1]
    init = {"W_raw": jnp.zeros((n_features, n_classes - 1)), "beta_raw": jnp.zeros((n_classes - 1,))}
    kernel = NUTS(
        _sbc_model, init_strategy=init_to_value(values=init), target_accept_prob=settings.target_accept_prob
    )
    args = (features, mask, label_sets, prior_scale, intercept_scale, likelihood_power)

    def chain(key: Array) -> tuple[dict[str, Array], Array]:
        state = kernel.init(key, settings.num_warmup, model_args=args, model_kwargs={})
        state = lax.fori_loop(0, settings.num_warmup, lambda _, s: kernel.sample(s, args, {}), state)

        def step(s, _):
            s = kernel.sample(s, args, {})
            return s, (s.z, s.diverging)

        return lax.scan(step, state, None, length=settings.num_samples)[1]

    keys = jax.random.split(rng_key, settings.num_chains) if settings.num_chains > 1 else rng_key[None]
    z, diverging = lax.map(chain, keys)
    # Both sites have real support: the unconstrained z are the parameters.
    return ChainDraws(z["W_raw"], z["beta_raw"], diverging)


def fit_replication(
    rep: Replication,
    rng_key: Array,
    design: SBCDesign,
    settings: NUTSSettings,
    likelihood_power: float = 1.0,
) -> ChainDraws:
    """``nuts_chains`` on a simulated replication; NumPy arrays out."""
    out = nuts_chains(
        rng_key,
        rep.features,
        rep.mask,
        rep.label_sets,
        design.prior_scale,
        design.intercept_scale,
        likelihood_power,
        settings=settings,
    )
    return ChainDraws(*(np.asarray(a) for a in out))


# -- ranks and the uniformity test --------------------------------------------


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
    """``n_keep`` evenly spaced indices into ``n_total`` draws (first and last included)."""
    if not 1 <= n_keep <= n_total:
        raise ValueError(f"cannot keep {n_keep} of {n_total} draws: use more draws or chains, or a smaller L")
    return np.linspace(0, n_total - 1, n_keep).round().astype(np.int64)


def sbc_ranks(draws: np.ndarray, truth: np.ndarray) -> np.ndarray:
    """(P,) rank of each true scalar among its draws: ``#{l : draws[l] < truth}``, in 0..L.

    Args:
        draws: (L, P) posterior draws.
        truth: (P,) the values that generated the data.
    """
    return np.sum(np.asarray(draws) < np.asarray(truth)[None, :], axis=0).astype(np.int64)


def bulk_ess(draws: np.ndarray) -> np.ndarray:
    """(P,) bulk effective sample size of (chains, S, P) draws (Vehtari et al. 2021).

    Each chain is split in halves (the middle draw dropped when ``S`` is odd),
    the pooled draws are replaced by their normal scores ``Phi^-1((rank -
    3/8) / (n + 1/4))``, and Geyer's initial-monotone ESS of the split chains
    is taken; this is ``arviz.ess(method="bulk")``.
    """
    draws = np.asarray(draws, np.float64)
    half = draws.shape[1] // 2
    if half < 2:
        raise ValueError(f"bulk ESS needs at least 4 draws a chain, got {draws.shape[1]}")
    split = np.concatenate([draws[:, :half], draws[:, -half:]], axis=0)
    n = split.shape[0] * split.shape[1]
    ranks = stats.rankdata(split.reshape(n, -1), axis=0).reshape(split.shape)
    return np.asarray(effective_sample_size(ndtri((ranks - 0.375) / (n + 0.25))))


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


# -- the whole run -------------------------------------------------------------


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


def run_sbc(
    n_replications: int,
    design: SBCDesign | None = None,
    settings: NUTSSettings | None = None,
    n_draws: int = 99,
    n_bins: int = 10,
    seed: int = 0,
    derived: bool = False,
    alpha: float = 0.01,
    likelihood_power: float = 1.0,
    progress: Callable[[int, float], None] | None = None,
) -> SBCResult:
    """Simulate, fit with NUTS, rank and test ``n_replications`` times.

    Replication ``r`` simulates with ``numpy.random.default_rng([seed, r])``
    and samples with ``fold_in(PRNGKey(seed), r)``, so any replication can be
    rerun alone.

    Args:
        n_replications: R.
        design: what to simulate (default ``SBCDesign()``).
        settings: NUTS per replication (default ``NUTSSettings()``: 500 warmup,
            500 draws, 2 chains, as ``fit_nuts``).
        n_draws: L, thinned draws per replication (``chains * draws >= L``).
        n_bins: chi-square bins; must divide ``L + 1``.
        seed: base seed.
        derived: also rank the per-class ``W`` and ``beta``.
        alpha: family-wise level: the verdict passes when every Holm-adjusted
            p-value exceeds it.
        likelihood_power: TEST DEVICE, not a fitting option. 1 fits the
            model's posterior; any other value fits ``p(theta) p(Y |
            theta)**power`` while the data stay simulated from the model, a
            deliberately wrong posterior that SBC should reject (see
            ``BROKEN_LIKELIHOOD_POWER``).
        progress: called after each replication with its index and seconds.
    """
    design = SBCDesign() if design is None else design
    settings = NUTSSettings() if settings is None else settings
    if n_replications < 1:
        raise ValueError(f"n_replications must be positive, got {n_replications}")
    keep = thin_indices(settings.num_chains * settings.num_samples, n_draws)
    rank_uniformity(np.zeros((1, 1), np.int64), n_draws, n_bins)  # check L and n_bins before the long run
    names = param_names(design.n_features, design.n_classes, derived)
    ranks = np.empty((n_replications, len(names)), np.int64)
    min_ess = np.empty(n_replications)
    n_divergent = np.empty(n_replications, np.int64)
    base_key = jax.random.PRNGKey(seed)
    start = time.perf_counter()
    for r in range(n_replications):
        t0 = time.perf_counter()
        rep = simulate_replication(np.random.default_rng([seed, r]), design)
        fit = fit_replication(rep, jax.random.fold_in(base_key, r), design, settings, likelihood_power)
        draws = flat_params(fit.w_raw, fit.beta_raw, derived)  # (chains, S, P)
        truth = flat_params(rep.w_raw, rep.beta_raw, derived)
        ranks[r] = sbc_ranks(draws.reshape(-1, draws.shape[-1])[keep], truth)
        min_ess[r] = bulk_ess(draws).min()
        n_divergent[r] = fit.diverging.sum()
        if progress is not None:
            progress(r, time.perf_counter() - t0)
    seconds = time.perf_counter() - start
    return sbc_result(ranks, n_draws, n_bins, names, min_ess, n_divergent, alpha, likelihood_power, seconds)


# -- reporting -----------------------------------------------------------------


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
