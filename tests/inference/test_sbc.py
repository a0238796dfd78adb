"""Simulation-based calibration of the NUTS posterior: a reduced SBC run and its building blocks."""

from __future__ import annotations

import matplotlib

matplotlib.use("Agg")

import jax  # noqa: E402
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pytest  # noqa: E402
from numpyro.infer.util import log_likelihood  # noqa: E402

from orlr_ppl.inference.checks.sbc import (  # noqa: E402
    BROKEN_LIKELIHOOD_POWER,
    NUTSSettings,
    SBCDesign,
    likelihood_powered_scales,
    plot_rank_histograms,
    replication_model_data,
    run_sbc,
    simulate_replication,
)
from orlr_ppl.inference.checks.sbc_stats import (  # noqa: E402
    bulk_ess,
    flat_params,
    holm,
    param_names,
    rank_uniformity,
    sbc_ranks,
    sbc_result,
    thin_indices,
)
from orlr_ppl.inference.posterior import arviz_compat as azc  # noqa: E402
from orlr_ppl.inference.posterior import nuts  # noqa: E402
from orlr_ppl.inference.posterior.inference_data import thinned_draws  # noqa: E402
from orlr_ppl.model.log_density import potential, potential_and_grad, potential_and_grad_on_host  # noqa: E402
from orlr_ppl.model.numpyro_model import make_model_data, orlr_model, split_model_data  # noqa: E402

pytestmark = pytest.mark.arviz

# Reduced SBC: 80 replications of 40 bags, 3 classes, 2 features; one chain of 200 warmup + 200 draws
# thinned to L = 19 (20 possible ranks, 5 bins of 4). Each run compiles the package's NUTS driver once for
# all its replications (the broken run's powered likelihood is a second program).
DESIGN = SBCDesign(n_bags=40, n_classes=3, n_features=2)
SETTINGS = NUTSSettings(num_warmup=200, num_samples=200, num_chains=1)
N_REPLICATIONS, N_DRAWS, N_BINS = 80, 19, 5


@pytest.fixture(autouse=True)
def _close_figures():
    yield
    plt.close("all")


def _reduced_sbc(likelihood_power: float, n_replications: int = N_REPLICATIONS):
    return run_sbc(
        n_replications,
        DESIGN,
        SETTINGS,
        n_draws=N_DRAWS,
        n_bins=N_BINS,
        seed=0,
        likelihood_power=likelihood_power,
    )


def test_sbc_passes_on_the_correct_model():
    compiled = nuts._advance_one._cache_size()  # one chain: the driver runs it "sequential"
    result = _reduced_sbc(1.0)
    # One compilation of the driver's block program for all 80 replications.
    assert nuts._advance_one._cache_size() - compiled <= 1
    assert result.ranks.shape == (N_REPLICATIONS, 6)
    assert result.passed, result.summary()
    # Thinning is enough for a typical replication: it has several times more effective draws than it keeps.
    assert np.median(result.min_ess) > 2 * N_DRAWS, result.summary()


def test_sbc_rejects_a_deliberately_broken_likelihood():
    # A calibration test that could not fail would be a defect: passing it would prove nothing. Fitting
    # p(theta) p(Y | theta)**4 to data simulated from the model is a wrong, overconfident posterior; that
    # this reduced SBC rejects it is what shows the passing test above has the power to fail.
    # Half the replications: the broken posterior is still rejected (Holm p ~ 5e-5 at seed 0; 20
    # replications gave only 2e-3, too near alpha = 0.01).
    result = _reduced_sbc(BROKEN_LIKELIHOOD_POWER, N_REPLICATIONS // 2)
    assert not result.passed, result.summary()
    # The failure is the one expected of an overconfident posterior: ranks piled at both ends.
    edges = result.counts[0] + result.counts[-1]
    assert np.all(edges > 2 * (N_REPLICATIONS // 2) / N_BINS), result.counts


# -- building blocks -----------------------------------------------------------


def test_ranks_count_the_draws_below_the_truth():
    draws = np.array([[0.1, 5.0, -1.0], [0.2, 6.0, -2.0], [0.3, 7.0, -3.0], [0.4, 8.0, -4.0]])
    truth = np.array([0.25, 4.0, 0.0])
    np.testing.assert_array_equal(sbc_ranks(draws, truth), [2, 0, 4])


def test_uniform_ranks_pass_and_ranks_piled_at_zero_fail():
    rng = np.random.default_rng(0)
    uniform = rng.integers(0, N_DRAWS + 1, size=(200, 6))
    test = rank_uniformity(uniform, N_DRAWS, N_BINS)
    assert test.counts.shape == (N_BINS, 6) and np.all(test.counts.sum(axis=0) == 200)
    assert np.all(test.adjusted > 0.01)

    balanced = np.tile(np.arange(N_DRAWS + 1), 10)[:, None]
    np.testing.assert_allclose(rank_uniformity(balanced, N_DRAWS, N_BINS).p_values, 1.0)

    piled = uniform.copy()
    piled[:, 2] = 0
    test = rank_uniformity(piled, N_DRAWS, N_BINS)
    assert test.adjusted[2] < 1e-10
    assert not sbc_result(piled, N_DRAWS, N_BINS, list("abcdef"), np.ones(200), np.zeros(200)).passed


def test_rank_uniformity_rejects_bins_that_do_not_divide_the_ranks():
    with pytest.raises(ValueError, match="divide"):
        rank_uniformity(np.zeros((10, 1), int), 19, 3)
    with pytest.raises(ValueError, match="0..19"):
        rank_uniformity(np.full((10, 1), 20), 19, 5)


def test_holm_matches_its_definition():
    np.testing.assert_allclose(holm(np.array([0.01, 0.04, 0.03])), [0.03, 0.06, 0.06])
    p = np.random.default_rng(1).uniform(size=7) ** 3
    order = np.sort(p)
    expected = [min(1.0, max((7 - j) * order[j] for j in range(i + 1))) for i in range(7)]
    np.testing.assert_allclose(np.sort(holm(p)), expected)


def test_thin_indices_are_evenly_spaced_and_exact_in_number():
    idx = thin_indices(200, 19)
    assert len(idx) == 19 and idx[0] == 0 and idx[-1] == 199
    assert np.ptp(np.diff(idx)) <= 1
    # The indices are inference_data's; SBC only refuses to keep fewer draws than L.
    for n_total, n_keep in [(200, 19), (400, 99), (1000, 99), (19, 19), (7, 1)]:
        np.testing.assert_array_equal(thin_indices(n_total, n_keep), thinned_draws(n_total, n_keep))
    with pytest.raises(ValueError, match="cannot keep"):
        thin_indices(10, 19)


@pytest.mark.parametrize("n_chains", [1, 2, 4])
def test_bulk_ess_is_arviz_per_scalar(n_chains):
    rng = np.random.default_rng(2)
    noise = rng.normal(size=(n_chains, 301, 3))
    draws = np.empty_like(noise)
    draws[:, 0] = noise[:, 0]
    for t in range(1, draws.shape[1]):  # AR(1) with rho 0.3, 0.6, 0.9 per parameter
        draws[:, t] = np.array([0.3, 0.6, 0.9]) * draws[:, t - 1] + noise[:, t]
    expected = [float(azc.az.ess(draws[..., p], method="bulk")) for p in range(3)]
    ess = bulk_ess(draws)
    np.testing.assert_allclose(ess, expected, rtol=1e-12)
    assert ess[0] > ess[1] > ess[2]  # stronger autocorrelation, fewer effective draws


def test_simulated_label_sets_are_the_unions_of_the_instance_labels():
    rep = simulate_replication(np.random.default_rng(3), DESIGN)
    assert rep.features.shape == (40, 5, 2) and rep.label_sets.shape == (40, 3)
    assert rep.w_raw.shape == (2, 2) and rep.beta_raw.shape == (2,)
    np.testing.assert_array_equal(rep.mask.sum(axis=1), 1 + np.arange(40) % 5)
    assert np.all(rep.features[~rep.mask] == 0) and np.all(rep.instance_labels[~rep.mask] == -1)
    for b in range(40):
        union = np.zeros(3, int)
        union[rep.instance_labels[b, rep.mask[b]]] = 1
        np.testing.assert_array_equal(rep.label_sets[b], union)
    assert np.all(rep.label_sets.sum(axis=1) >= 1)


def test_single_bucket_layout_scores_like_make_model_data_and_the_power_scales_only_the_likelihood():
    rep = simulate_replication(np.random.default_rng(4), DESIGN)
    params = {"W_raw": rep.w_raw.astype(np.float32), "beta_raw": rep.beta_raw.astype(np.float32)}
    model_kwargs = {"prior_scale": 1.0, "intercept_scale": 1.0}
    single = replication_model_data(rep.features, rep.mask, rep.label_sets)
    bags = [rep.features[b, rep.mask[b]] for b in range(40)]
    bucketed = make_model_data(bags, [np.flatnonzero(s) for s in rep.label_sets], n_classes=3)
    # The potential the NUTS driver samples, with likelihood ** 1 and ** 4.
    arrays, shape = split_model_data(single)
    powered = [likelihood_powered_scales(DESIGN, k) for k in (1.0, BROKEN_LIKELIHOOD_POWER)]
    assert powered[0].likelihood_power is None  # power 1: the scales, hence the program, a fit samples with
    assert powered[1].likelihood_power == BROKEN_LIKELIHOOD_POWER

    @jax.jit  # one compilation instead of an eager one per DP bucket shape
    def scores(params):
        ll_single = log_likelihood(orlr_model, params, single, **model_kwargs, batch_ndims=0)["Y_0"]
        ll_bucketed = log_likelihood(orlr_model, params, bucketed, **model_kwargs, batch_ndims=0)
        energies = [potential(params, arrays, scales, shape) for scales in powered]
        return ll_single, ll_bucketed, energies

    ll_single, per_site, (energy_1, energy_4) = scores(params)
    ll_bucketed = bucketed.merge_sites({k: np.asarray(v)[None] for k, v in per_site.items()})[0]
    np.testing.assert_allclose(ll_single, ll_bucketed, rtol=1e-5, atol=1e-5)
    # Likelihood ** 4 adds three log-likelihoods and leaves the prior alone.
    np.testing.assert_allclose(energy_1 - energy_4, 3.0 * np.sum(ll_single), rtol=1e-4)
    # The chains' starting states come from the host-side potential: it must see the power too.
    on_host = potential_and_grad_on_host(params, arrays, powered[1], shape)
    np.testing.assert_allclose(on_host[0], energy_4, rtol=1e-5)
    want = potential_and_grad(params, arrays, powered[1], shape)[1]
    for name in want:
        np.testing.assert_allclose(on_host[1][name], want[name], rtol=1e-4, atol=1e-4)


def test_the_likelihood_power_must_be_positive_and_finite():
    assert likelihood_powered_scales(DESIGN, 2.5)[2] == 2.5
    for power in (0.0, -1.0, np.inf, np.nan):
        with pytest.raises(ValueError, match="positive and finite"):
            likelihood_powered_scales(DESIGN, power)
    with pytest.raises(ValueError, match="positive and finite"):
        run_sbc(1, DESIGN, SETTINGS, n_draws=N_DRAWS, n_bins=N_BINS, likelihood_power=0.0)


def test_flat_params_and_names_agree_and_derived_weights_sum_to_zero():
    names = param_names(2, 3, derived=True)
    w_raw, beta_raw = np.arange(4.0).reshape(2, 2), np.array([1.0, -2.0])
    flat = flat_params(w_raw, beta_raw, derived=True)
    assert len(names) == flat.shape[-1] == 4 + 2 + 6 + 3
    assert names[:6] == ["W_raw[0,0]", "W_raw[0,1]", "W_raw[1,0]", "W_raw[1,1]", "beta_raw[0]", "beta_raw[1]"]
    np.testing.assert_allclose(flat[6:12].reshape(2, 3).sum(axis=1), 0.0, atol=1e-12)
    np.testing.assert_allclose(flat[12:].sum(), 0.0, atol=1e-12)
    assert flat_params(np.zeros((5, 7, 2, 2)), np.zeros((5, 7, 2))).shape == (5, 7, 6)


def _synthetic_result(piled: bool):
    ranks = np.random.default_rng(5).integers(0, N_DRAWS + 1, size=(100, 3))
    if piled:
        ranks[:, 1] = 0
    return sbc_result(ranks, N_DRAWS, N_BINS, ["a[0]", "a[1]", "b"], np.full(100, 50.0), np.zeros(100))


def test_summary_lists_every_parameter_and_the_verdict():
    text = _synthetic_result(piled=True).summary()
    assert all(name in text for name in ("a[0]", "a[1]", "b"))
    assert "verdict: FAIL" in text and "non-uniform" in text
    assert "verdict: PASS" in _synthetic_result(piled=False).summary()


def test_rank_histograms_have_a_labelled_panel_per_parameter():
    fig = plot_rank_histograms(_synthetic_result(piled=True), ncols=2)
    shown = [ax for ax in fig.axes if ax.get_visible()]
    assert len(shown) == 3
    assert all(ax.get_title() and ax.get_xlabel() and ax.get_ylabel() for ax in shown)
    assert len(fig.legends) == 1 and len(fig.legends[0].get_texts()) == 3
    assert any("SBC rank histograms" in t.get_text() for t in fig.texts)
