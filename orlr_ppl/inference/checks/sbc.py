"""Simulation-based calibration (SBC) of the package's NUTS posterior of ``orlr_model``.

Talts, Betancourt, Simpson, Vehtari & Gelman (2018), "Validating Bayesian
inference algorithms with simulation-based calibration". For replications
``r = 1..R``::

    theta_r ~ p(theta),   Y_r ~ p(Y | theta_r, X_r),   theta_r^(1..L) ~ p(theta | Y_r, X_r),
    rank_r = #{l : theta_r^(l) < theta_r}  in {0, ..., L}.

Averaged over the prior, the posterior is the prior again, so when the
sampler draws from the exact posterior every scalar's rank is uniform on
``{0, ..., L}``. A posterior that is too narrow (overconfident) piles ranks at
both ends (U shape), one too wide piles them in the middle, a biased one tilts
them. This module simulates and fits the replications (``run_sbc``);
``sbc_stats`` ranks the draws and tests the ranks (chi-square per scalar,
Holm-corrected; the verdict passes when every corrected p-value exceeds
``alpha``), ``sbc_plot`` draws the rank histograms.

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

The sampler is the package's own NUTS driver, ``nuts.Chains``: the very
programs ``fit_nuts`` runs (NumPyro's NUTS kernel on ``orlr_model``'s
potential, warmup and draws in compiled blocks, the starting states from
``log_density.potential_and_grad``), so SBC validates what a fit samples
with, not a copy of it. The data and prior scales are traced arguments of
those programs, so every replication of one shape family reuses one
compilation. The chains start at zero weights (the prior's mode) rather than
at a MAP estimate as ``ORLR`` starts them: a MAP per replication would only
shorten the way to the typical set, which warmup covers.

The broken likelihood (test device). A calibration test that cannot fail
proves nothing, so ``run_sbc`` can fit a deliberately wrong, overconfident
posterior ``p(theta) p(Y | theta)**k`` to data simulated from the model, which
SBC must reject (``BROKEN_LIKELIHOOD_POWER``). The power enters as a third
element of the driver's traced scales (``likelihood_powered_scales``):
``orlr_model`` multiplies its label-set sites' log-likelihood by it
(``likelihood_scale``) and leaves the prior alone. For a whole ``k`` that is
the posterior given every bag ``k`` times over, at the cost of one copy. The
scaled model is a program of its own, compiled once for the broken run.

Thinning. Draws are autocorrelated; ranks from correlated draws are not
uniform even for an exact sampler (Talts et al. section 4.1). The post-warmup
draws of all chains are thinned to ``L`` evenly spaced draws, and each
replication records its smallest bulk effective sample size: when it is well
above ``L`` the thinned draws are close to independent.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from ...model.log_density import Scales, prior_scales
from ...model.numpyro_model import ModelBucket, ModelData, split_model_data, sum_to_zero_basis
from ..methods import TARGET_ACCEPT
from ..posterior import nuts
from ..posterior.inference_data import zeros_init

# Re-exported: ``run_sbc``'s result and its figure, next to it (benchmarks/bench_sbc.py imports them here).
from .sbc_plot import plot_rank_histograms as plot_rank_histograms
from .sbc_stats import SBCResult as SBCResult
from .sbc_stats import (
    bulk_ess,
    flat_params,
    param_names,
    rank_uniformity,
    sbc_ranks,
    sbc_result,
    thin_indices,
)

Array = jax.Array

BROKEN_LIKELIHOOD_POWER = 4.0
"""Test device: the likelihood power of the deliberately wrong posterior that SBC must reject.

Fitting with ``p(theta) p(Y | theta)**4`` shrinks the posterior about
two-fold: the ranks pile at both ends (``likelihood_powered_scales``).
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
    """NUTS run per replication: iterations per chain, chains and target acceptance.

    The other settings are ``fit_nuts``' defaults (``nuts.NUTSSettings``):
    maximum tree depth 10, diagonal mass matrix.
    """

    num_warmup: int = 500
    num_samples: int = 500
    num_chains: int = 2
    target_accept_prob: float = TARGET_ACCEPT


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
    label-set size) so that every replication shares one layout, hence one
    compilation of the sampler.

    Args:
        features: (B, N, d) padded features.
        mask: (B, N) bool, real instances.
        label_sets: (B, C) int multi-hot label sets.
    """
    n_bags, n_classes = label_sets.shape
    bucket = ModelBucket(features, mask, label_sets, np.arange(n_bags), n_classes)
    return ModelData((bucket,), n_bags, features.shape[-1], n_classes)


# -- fitting -------------------------------------------------------------------


def likelihood_powered_scales(design: SBCDesign, likelihood_power: float = 1.0) -> Scales:
    """The NUTS driver's traced scales: the design's priors, and a likelihood power other than 1.

    No ``likelihood_power`` for the model's own posterior (power 1: the very
    program a fit runs); with ``likelihood_power=k``, the driver samples
    ``p(theta) p(Y | theta)**k`` (``log_density.Scales``).

    Raises ``ValueError`` unless the power is positive and finite.
    """
    if not (np.isfinite(likelihood_power) and likelihood_power > 0):
        raise ValueError(f"likelihood_power must be positive and finite, got {likelihood_power}")
    scales = prior_scales(design.prior_scale, design.intercept_scale)
    return (
        scales
        if likelihood_power == 1.0
        else scales._replace(likelihood_power=np.asarray(likelihood_power, np.float32))
    )


class ReplicationDraws(NamedTuple):
    """Post-warmup NUTS draws of one replication.

    Attributes:
        w_raw: (chains, S, d, C-1).
        beta_raw: (chains, S, C-1).
        diverging: (chains, S) bool.
    """

    w_raw: np.ndarray
    beta_raw: np.ndarray
    diverging: np.ndarray


def fit_replication(
    rep: Replication,
    rng_key: Array,
    design: SBCDesign,
    settings: NUTSSettings,
    likelihood_power: float = 1.0,
) -> ReplicationDraws:
    """NUTS on one replication's data with the package's driver (``nuts.Chains``), as ``fit_nuts`` runs it.

    Chain keys are ``fit_nuts``' (the key itself for one chain, else
    ``split(key, chains)``); every chain starts at zero weights; chains run in
    parallel when JAX has a device per chain (``nuts.resolve_chain_method``).

    Args:
        rep: the simulated data and truth.
        rng_key: PRNG key of the sampler.
        design: its prior scales are the fit's.
        settings: warmup, draws, chains, target acceptance.
        likelihood_power: 1 for the model's posterior. Test device: another
            power ``k`` fits ``p(theta) p(Y | theta)**k``, a wrong posterior.
    """
    data = replication_model_data(rep.features, rep.mask, rep.label_sets)
    arrays, shape = split_model_data(data)
    n_chains = settings.num_chains
    inits = {k: jnp.broadcast_to(v, (n_chains,) + v.shape) for k, v in zeros_init(data, True).items()}
    keys = jax.random.split(rng_key, n_chains) if n_chains > 1 else rng_key[None]
    driver = nuts.NUTSSettings(settings.num_warmup, target_accept_prob=settings.target_accept_prob)
    chains = nuts.Chains(
        keys,
        inits,
        arrays,
        likelihood_powered_scales(design, likelihood_power),
        shape,
        driver,
        nuts.resolve_chain_method("auto", n_chains),
    )
    chains.advance(settings.num_warmup)
    out = chains.advance(settings.num_samples)
    return ReplicationDraws(out.z["W_raw"], out.z["beta_raw"], out.diverging)


# -- the whole run -------------------------------------------------------------


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
            model's posterior; another power ``k`` fits ``p(theta) p(Y |
            theta)**k`` while the data stay simulated from the model, a
            deliberately wrong posterior that SBC should reject (see
            ``BROKEN_LIKELIHOOD_POWER``).
        progress: called after each replication with its index and seconds.
    """
    design = SBCDesign() if design is None else design
    settings = NUTSSettings() if settings is None else settings
    if n_replications < 1:
        raise ValueError(f"n_replications must be positive, got {n_replications}")
    # Check L, n_bins and the power before the long run.
    keep = thin_indices(settings.num_chains * settings.num_samples, n_draws)
    rank_uniformity(np.zeros((1, 1), np.int64), n_draws, n_bins)
    likelihood_powered_scales(design, likelihood_power)
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
