"""Each settings object runs its own fit: ``method.fit(data, ...)`` is its module's driver."""

from __future__ import annotations

import importlib

import jax
import numpy as np
import pytest

from orlr_ppl.inference.methods import EM, MAP, NUTS, SVI, Laplace, PointFit, PosteriorFit
from orlr_ppl.model.model_data import make_model_data


def _data(dtype=np.float32):
    rng = np.random.default_rng(0)
    labels = [rng.integers(0, 3, size=int(rng.integers(1, 4))) for _ in range(12)]
    bags = [(rng.normal(size=(len(y), 2)) + y[:, None]).astype(dtype) for y in labels]
    return make_model_data(bags, [np.unique(y) for y in labels], n_classes=3, dtype=dtype)


@pytest.mark.parametrize("settings", [EM, MAP, Laplace, NUTS, SVI])
def test_every_method_names_a_driver_that_takes_its_settings(settings):
    module, name = settings.runner.split(":")
    run = getattr(importlib.import_module(module), name)
    assert list(run.__code__.co_varnames[:6]) == [
        "method",
        "data",
        "prior_scale",
        "intercept_scale",
        "fit_intercept",
        "seed",
    ]


def test_a_point_method_fits_as_its_driver_does():
    from orlr_ppl.inference.point.em import fit_em
    from orlr_ppl.inference.point.map import fit_map

    with jax.enable_x64(True):
        data = _data(np.float64)
        got = MAP(max_iter=50).fit(data, 1.0, 10.0, True)
        want = fit_map(data, 1.0, 10.0, max_iter=50)
        em = EM(max_iter=7).fit(data, 1.0, 10.0, True)
        em_want = fit_em(data, 1.0, 10.0, max_iter=7)
    assert isinstance(got, PointFit) and got.history is None
    np.testing.assert_array_equal(got.coef, want.W)
    assert got.log_posterior == want.log_posterior and got.optimality == want.optimality
    np.testing.assert_array_equal(em.coef, em_want.W)
    np.testing.assert_array_equal(em.history, em_want.history)


@pytest.mark.arviz
def test_a_posterior_method_returns_its_draws():
    data = _data()
    fit = SVI(num_steps=5, num_draws=7, progress_bar=False, init="zeros").fit(data, 1.0, 10.0, True, seed=3)
    assert isinstance(fit, PosteriorFit) and fit.losses.shape == (5,) and fit.gaussian is None
    assert fit.posterior.posterior["W"].shape[:2] == (1, 7)
