"""The SVI posterior's per-draw densities: ``lp`` is the model's log joint, ``log_q`` the guide's."""

from __future__ import annotations

import jax
import numpy as np
import numpyro
import pytest
from numpyro.infer import SVI, Trace_ELBO
from numpyro.infer.autoguide import AutoNormal
from numpyro.infer.util import log_density
from scipy.stats import norm

from orlr_ppl.inference.svi import _guide_draws, _latent_sites, fit_svi
from orlr_ppl.model.model_data import make_model_data
from orlr_ppl.model.numpyro_model import orlr_model

pytestmark = pytest.mark.arviz


def _data(seed: int = 0):
    rng = np.random.default_rng(seed)
    labels = [rng.integers(0, 3, size=int(rng.integers(1, 4))) for _ in range(10)]
    bags = [rng.normal(size=(len(y), 3)) + y[:, None] for y in labels]
    sets = [np.unique(y) for y in labels]
    return make_model_data(bags, sets, n_classes=3)


def test_guide_draws_carry_the_guides_and_the_models_log_density():
    data = _data()
    kwargs = {"prior_scale": 1.0, "intercept_scale": 10.0, "fit_intercept": True}
    auto = AutoNormal(_latent_sites, init_scale=0.3)
    svi = SVI(orlr_model, auto, numpyro.optim.Adam(0.05), Trace_ELBO())
    params = svi.run(jax.random.PRNGKey(0), 50, data, **kwargs, progress_bar=False).params
    draws, log_q, log_p = _guide_draws(auto, params, data, kwargs, jax.random.split(jax.random.PRNGKey(1), 5))
    assert set(draws) == {"W_raw", "beta_raw"} and draws["W_raw"].shape == (5, 3, 2)
    # AutoNormal is a product of independent Normals over the raw weights: log q by hand.
    expected_q = sum(
        norm.logpdf(np.asarray(draws[site]), params[f"{site}_auto_loc"], params[f"{site}_auto_scale"])
        .reshape(5, -1)
        .sum(1)
        for site in draws
    )
    np.testing.assert_allclose(log_q, expected_q, rtol=1e-5)
    for s in range(5):
        joint, _ = log_density(orlr_model, (data,), kwargs, {k: v[s] for k, v in draws.items()})
        np.testing.assert_allclose(log_p[s], joint, rtol=1e-5)


def test_svi_posterior_keeps_lp_and_log_q_per_draw():
    fit = fit_svi(_data(1), num_steps=100, num_draws=30, guide="lowrank")
    stats = fit.posterior.sample_stats
    assert set(stats.data_vars) == {"lp", "log_q"}
    assert stats["lp"].shape == stats["log_q"].shape == (1, 30)
    # The log joint is the prior plus every bag's likelihood, so it lies below their sum alone.
    assert np.all(stats["lp"].values < fit.posterior.log_likelihood["Y"].sum("bag").values)
    assert np.isfinite(stats["log_q"]).all()
