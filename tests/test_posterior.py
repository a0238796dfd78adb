"""NUTS and SVI through the estimator: InferenceData, diagnostics, averaged predictions."""

from __future__ import annotations

import numpy as np
import pytest

from orlr_ppl import ORLR
from orlr_ppl.inference_data import az, summary


def _clusters(n_bags=30, seed=0):
    """3 well-separated classes in 2-D; bags of 1-4 instances."""
    rng = np.random.default_rng(seed)
    centres = np.array([[3.0, 0.0], [-1.5, 2.6], [-1.5, -2.6]])
    bags, sets, labels = [], [], []
    for _ in range(n_bags):
        y = rng.integers(0, 3, size=rng.integers(1, 5))
        bags.append(centres[y] + rng.normal(size=(len(y), 2)))
        sets.append(np.unique(y))
        labels.append(y)
    return bags, sets, labels


@pytest.fixture(scope="module")
def nuts_fit():
    bags, sets, labels = _clusters()
    est = ORLR(method="nuts", num_warmup=150, num_samples=150, num_chains=2, random_state=0)
    return est.fit(bags, sets), (bags, sets, labels)


def test_nuts_inference_data_and_diagnostics(nuts_fit):
    est, (bags, sets, labels) = nuts_fit
    idata = est.posterior_
    assert {"posterior", "sample_stats", "log_likelihood"} <= set(idata.groups())
    assert idata.log_likelihood["Y"].shape == (2, 150, 30)
    assert idata.posterior["W"].shape == (2, 150, 2, 3)
    table = summary(idata)
    assert {"r_hat", "ess_bulk", "ess_tail"} <= set(table.columns)
    assert table["r_hat"].max() < 1.1  # chains agree on this easy posterior
    loo = az.loo(idata)
    assert np.isfinite(loo.elpd_loo)
    # The per-bag log-likelihood matches the exact DP at the posterior draws.
    import orlr_ppl

    w = np.asarray(idata.posterior["W"])[0, 7]
    b = np.asarray(idata.posterior["beta"])[0, 7]
    direct = orlr_ppl.bag_log_likelihood([x @ w + b for x in bags], sets)
    np.testing.assert_allclose(np.asarray(idata.log_likelihood["Y"])[0, 7], direct, rtol=1e-4)


def test_posterior_predictions_and_uncertainty(nuts_fit):
    est, (bags, sets, labels) = nuts_fit
    assert est.coef_draws_.shape[0] == 200 and est.coef_.shape == (2, 3)
    assert est.score(bags, labels) > 0.9
    trans = est.predict_proba(bags, sets)
    for p, s in zip(trans, sets):
        np.testing.assert_allclose(p.sum(axis=1), 1.0, atol=1e-5)
        assert np.all(p[:, np.setdiff1d(np.arange(3), s)] == 0)
    # [-30, 0] lies far out on the boundary between classes 1 and 2.
    unc = est.predict_uncertainty(bags + [np.array([[0.0, 0.0], [-30.0, 0.0]])])
    assert all(u.shape == (len(x), 2) for u, x in zip(unc, bags))
    entropy, mi = np.concatenate(unc)[:, 0], np.concatenate(unc)[:, 1]
    assert np.all(mi >= 0) and np.all(mi <= entropy + 1e-9)
    # Far out along a boundary the draws disagree: epistemic uncertainty is high there.
    assert unc[-1][1, 1] > np.median(mi[:-2])
    point = ORLR(method="map").fit(bags, sets)
    assert np.all(np.concatenate(point.predict_uncertainty(bags))[:, 1] < 1e-9)


@pytest.mark.parametrize("guide", ["normal", "lowrank"])
def test_svi_minibatch_fit(guide):
    bags, sets, labels = _clusters(seed=1)
    est = ORLR(method="svi", guide=guide, svi_steps=800, subsample_size=12, num_samples=100, random_state=0)
    est.fit(bags, sets)
    losses = est.losses_
    assert np.mean(losses[-80:]) < np.mean(losses[:80])
    assert est.posterior_.log_likelihood["Y"].shape == (1, 100, 30)
    assert est.score(bags, labels) > 0.85


def test_posterior_save_load(tmp_path, nuts_fit):
    est, (bags, sets, _) = nuts_fit
    folder = est.save(tmp_path / "nuts")
    assert (folder / "posterior.nc").is_file()
    back = ORLR.load(folder)
    for a, b in zip(est.predict_proba(bags, sets), back.predict_proba(bags, sets)):
        np.testing.assert_allclose(a, b, rtol=1e-12)
    (folder / "posterior.nc").unlink()
    with pytest.raises(ValueError, match="posterior.nc is missing"):
        ORLR.load(folder)
