"""Generalised EM: monotone, and at the same optimum as MAP."""

from __future__ import annotations

import jax
import numpy as np
import pytest

from orlr_ppl.data.datasets import make_miml_digits
from orlr_ppl.inference.em import fit_em
from orlr_ppl.inference.map import fit_map
from orlr_ppl.model.numpyro_model import make_model_data
from orlr_ppl.objective import log_posterior, make_flat_data


@pytest.fixture(scope="module")
def digits():
    return make_miml_digits(60, seed=3)


def test_em_log_posterior_never_decreases(digits):
    with jax.enable_x64(True):
        data = make_flat_data(digits.bags, digits.label_sets, 10)
        for prior in (None, 1.0):
            fit = fit_em(data, prior_scale=prior, max_iter=25, tol=0.0)
            steps = np.diff(fit.history)
            assert fit.n_iter == 25 and len(fit.history) == 26
            assert np.all(steps >= -1e-9 * np.abs(fit.history[1:])), steps.min()
            assert fit.history[-1] > fit.history[0] + 10  # it really climbs


def test_em_and_map_reach_the_same_optimum(digits):
    with jax.enable_x64(True):
        em = fit_em(
            make_flat_data(digits.bags, digits.label_sets, 10),
            prior_scale=1.0,
            intercept_scale=10.0,
            max_iter=400,
            tol=1e-10,
        )
        mp = fit_map(
            make_model_data(digits.bags, digits.label_sets, 10, dtype=np.float64),
            prior_scale=1.0,
            intercept_scale=10.0,
        )
    assert em.log_posterior == pytest.approx(mp.log_posterior, rel=1e-3)
    np.testing.assert_allclose(em.W.sum(axis=1), 0.0, atol=1e-8)


def test_log_posterior_matches_the_numpyro_model(digits):
    from numpyro.infer.util import log_density

    from orlr_ppl.model.numpyro_model import orlr_model

    rng = np.random.default_rng(0)
    params = {"W_raw": rng.normal(size=(64, 9)) * 0.1, "beta_raw": rng.normal(size=9)}
    with jax.enable_x64(True):
        flat = make_flat_data(digits.bags, digits.label_sets, 10)
        ours = float(log_posterior(params, flat, 0.5, 3.0))
        model = make_model_data(digits.bags, digits.label_sets, 10, dtype=np.float64)
        theirs = float(
            log_density(orlr_model, (model,), {"prior_scale": 0.5, "intercept_scale": 3.0}, params)[0]
        )
    assert ours == pytest.approx(theirs, rel=1e-10)
