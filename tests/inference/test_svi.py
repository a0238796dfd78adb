"""The SVI posterior's per-draw densities: ``lp`` is the model's log joint, ``log_q`` the guide's."""

from __future__ import annotations

import jax
import numpy as np
import numpyro
import pytest
from numpyro.infer import SVI, Trace_ELBO, init_to_value
from numpyro.infer.autoguide import AutoLowRankMultivariateNormal, AutoNormal
from numpyro.infer.util import log_density, log_likelihood
from numpyro.optim import Adam
from scipy.stats import multivariate_normal, norm

from orlr_ppl.inference import methods
from orlr_ppl.inference.posterior.inference_data import zeros_init
from orlr_ppl.inference.posterior.svi import _latent_sites, fit_svi, guide_draws
from orlr_ppl.model.model_data import make_model_data
from orlr_ppl.model.numpyro_model import orlr_model


def _settings(**kwargs) -> methods.SVI:
    """The package's ``SVI`` settings for a test: from zero weights, no bar."""
    return methods.SVI(**{"init": "zeros", "progress_bar": False} | kwargs)


def _data(seed: int = 0):
    rng = np.random.default_rng(seed)
    labels = [rng.integers(0, 3, size=int(rng.integers(1, 4))) for _ in range(10)]
    bags = [rng.normal(size=(len(y), 3)) + y[:, None] for y in labels]
    sets = [np.unique(y) for y in labels]
    return make_model_data(bags, sets, n_classes=3)


@pytest.mark.arviz
@pytest.mark.parametrize("kind", ["normal", "lowrank"])
def test_guide_draws_carry_the_guides_log_density(kind):
    data = _data()
    kwargs = {"prior_scale": 1.0, "intercept_scale": 10.0, "fit_intercept": True}
    guide = AutoNormal if kind == "normal" else AutoLowRankMultivariateNormal
    auto = guide(_latent_sites, init_scale=0.3)
    svi = SVI(orlr_model, auto, numpyro.optim.Adam(0.05), Trace_ELBO())
    params = svi.run(jax.random.PRNGKey(0), 50, data, **kwargs, progress_bar=False).params
    draws, log_q = guide_draws(auto, params, jax.random.PRNGKey(1), 5)
    assert set(draws) == {"W_raw", "beta_raw"} and draws["W_raw"].shape == (5, 3, 2)
    if kind == "normal":  # a product of independent Normals over the raw weights
        expected = sum(
            norm.logpdf(np.asarray(draws[site]), params[f"{site}_auto_loc"], params[f"{site}_auto_scale"])
            .reshape(5, -1)
            .sum(1)
            for site in draws
        )
    else:  # one Normal over the flat latent (W_raw, then beta_raw), low-rank plus diagonal covariance
        flat = np.concatenate([np.asarray(draws[s]).reshape(5, -1) for s in ("W_raw", "beta_raw")], axis=1)
        scale = np.asarray(params["auto_scale"])
        factor = np.asarray(params["auto_cov_factor"]) * scale[:, None]  # NumPyro's parametrisation
        cov = factor @ factor.T + np.diag(scale**2)
        expected = multivariate_normal(np.asarray(params["auto_loc"]), cov).logpdf(flat)
        # The seam guide_draws relies on: NumPyro's flat latent is the sites raveled by name.
        from jax.flatten_util import ravel_pytree

        median = {k: v for k, v in auto.median(params).items() if k in draws}
        np.testing.assert_allclose(ravel_pytree(median)[0], params["auto_loc"], rtol=1e-6)
    np.testing.assert_allclose(log_q, expected, rtol=1e-4)


@pytest.mark.arviz
def test_svi_posterior_keeps_lp_and_log_q_per_draw():
    data = _data(1)
    fit = fit_svi(data, _settings(num_steps=100, num_draws=30, guide="lowrank"))
    stats = fit.posterior.sample_stats
    assert set(stats.data_vars) == {"lp", "log_q"}
    assert stats["lp"].shape == stats["log_q"].shape == (1, 30)
    kwargs = {"prior_scale": 1.0, "intercept_scale": 10.0, "fit_intercept": True}
    posterior = fit.posterior.unconstrained_posterior
    for s in (0, 29):  # lp is the model's own log joint density at the draw
        draw = {k: np.asarray(posterior[k][0, s]) for k in ("W_raw", "beta_raw")}
        joint, _ = log_density(orlr_model, (data,), kwargs, draw)
        np.testing.assert_allclose(stats["lp"][0, s], joint, rtol=1e-5)
        # and each bag's log-likelihood is NumPyro's, bags in input order
        per_site = log_likelihood(orlr_model, draw, data, batch_ndims=0, **kwargs)
        bags = data.merge_sites({k: np.asarray(v)[None] for k, v in per_site.items()})[0]
        np.testing.assert_allclose(fit.posterior.log_likelihood["Y"][0, s], bags, rtol=1e-5)
    # The log joint is the prior plus every bag's likelihood, so it lies below their sum alone.
    assert np.all(stats["lp"].values < fit.posterior.log_likelihood["Y"].sum("bag").values)
    assert np.isfinite(stats["log_q"]).all()


@pytest.mark.arviz
def test_svi_init_map_starts_the_guide_at_the_map():
    from orlr_ppl import ORLR
    from orlr_ppl import SVI as SVISettings

    rng = np.random.default_rng(3)
    labels = [rng.integers(0, 3, size=int(rng.integers(1, 4))) for _ in range(20)]
    bags = [rng.normal(size=(len(y), 3)) + y[:, None] for y in labels]
    sets = [np.unique(y) for y in labels]
    point = ORLR(inference="map").fit(bags, sets)
    # One step of a negligible size: the guide's means are still where they started.
    still = SVISettings(num_steps=1, learning_rate=1e-8, num_draws=2000, progress_bar=False)
    started = ORLR(inference=still, random_state=0).fit(bags, sets)
    np.testing.assert_allclose(started.coef_, point.coef_, atol=2e-3)
    zeros = ORLR(inference=SVISettings(**{**vars(still), "init": "zeros"}), random_state=0).fit(bags, sets)
    assert np.abs(zeros.coef_).max() < 2e-3 < np.abs(point.coef_).max()


@pytest.mark.parametrize(("kind", "subsample"), [("normal", None), ("lowrank", None), ("normal", 4)])
def test_fit_svi_takes_numpyros_own_steps(kind, subsample):
    """The module-level program (``_steps``) runs exactly ``SVI.run``'s steps: the same losses, step by
    step, from the same start and seed; with minibatches too, on padded buckets (their shares read the
    real bag count, not the padded one)."""
    rng = np.random.default_rng(2)
    labels = [rng.integers(0, 3, size=int(rng.integers(1, 4))) for _ in range(13)]
    bags = [rng.normal(size=(len(y), 3)) + y[:, None] for y in labels]
    data = make_model_data(bags, [np.unique(y) for y in labels], n_classes=3, canonical_shapes=True)
    # 16 bags with the padding: a minibatch of 4 of 13 bags draws 5 of them, of 16 it would draw 4
    assert [b.mask.shape[0] for b in data.buckets] == [16] and data.n_bags == 13
    kwargs = {"prior_scale": 1.0, "intercept_scale": 10.0, "fit_intercept": True}
    guide = AutoNormal if kind == "normal" else AutoLowRankMultivariateNormal
    start = init_to_value(values=zeros_init(data, True))
    svi = SVI(orlr_model, guide(_latent_sites, init_loc_fn=start, init_scale=0.01), Adam(0.02), Trace_ELBO())
    ref = svi.run(jax.random.PRNGKey(3), 40, data, **kwargs, subsample_size=subsample, progress_bar=False)
    settings = _settings(guide=kind, num_steps=40, learning_rate=0.02, subsample_size=subsample, num_draws=4)
    fit = fit_svi(data, settings, seed=3)
    np.testing.assert_allclose(fit.losses, ref.losses, rtol=2e-5)


def test_refits_of_one_shape_family_compile_no_new_program(monkeypatch):
    """A second fit on other data of the same shapes, with another step count, step size and seed,
    reuses the first fit's programs (SVI's steps, the draws' log-likelihoods and densities, the
    predictive simulation); more steps than one call's ``BLOCK`` run as several calls of one program."""
    from orlr_ppl.inference.posterior import inference_data, svi
    from orlr_ppl.model import log_density

    monkeypatch.setattr(svi, "BLOCK", 16)
    rng = np.random.default_rng(5)
    labels = [rng.integers(0, 3, size=int(rng.integers(1, 4))) for _ in range(10)]
    bags = [rng.normal(size=(len(y), 3)) + y[:, None] for y in labels]
    sets = [np.unique(y) for y in labels]
    first = fit_svi(make_model_data(bags, sets, n_classes=3), _settings(num_steps=20, num_draws=8))
    programs = [svi._steps, log_density.draws_log_densities, inference_data._simulate]
    sizes = [p._cache_size() for p in programs]
    other = make_model_data([2.0 * x - 1.0 for x in bags], sets, n_classes=3)
    second = fit_svi(other, _settings(num_steps=45, learning_rate=0.03, num_draws=8), seed=7)
    assert [p._cache_size() for p in programs] == sizes
    assert first.losses.shape == (20,) and second.losses.shape == (45,) and np.isfinite(second.losses).all()


def test_a_progress_bar_changes_no_step(capsys):
    """With a bar, the steps run in short calls (one first, while it compiles): the same fit."""
    data = _data(6)
    quiet = fit_svi(data, _settings(num_steps=30, num_draws=6), seed=2)
    shown = fit_svi(data, _settings(num_steps=30, num_draws=6, progress_bar=True), seed=2)
    np.testing.assert_allclose(shown.losses, quiet.losses, rtol=1e-6)
    np.testing.assert_allclose(shown.posterior.posterior["W"].values, quiet.posterior.posterior["W"].values)
    assert "30/30" in capsys.readouterr().err
