"""The Laplace approximation: its Gaussian, its evidence against quadrature, the evidence's choice of the
prior scale, its predictive against NUTS's, and the estimator's Laplace posterior end to end."""

from __future__ import annotations

import warnings

import jax
import numpy as np
import pytest
from scipy.special import logsumexp
from scipy.stats import norm

import orlr_ppl
from orlr_ppl import NUTS, ORLR, Laplace, metrics
from orlr_ppl.inference.checks.diagnostics import ConvergenceWarning
from orlr_ppl.inference.posterior.evidence import fit_evidence
from orlr_ppl.inference.posterior.laplace import fit_laplace, laplace_approximation
from orlr_ppl.model.numpyro_model import make_model_data, sum_to_zero_basis


def _drawn(n_bags: int, w: np.ndarray, seed: int, max_n: int = 4):
    """Bags drawn from the model with weights ``w`` (d, C), no intercepts: features, label sets, labels."""
    rng = np.random.default_rng(seed)
    d, c = w.shape
    bags, sets, labels = [], [], []
    for _ in range(n_bags):
        x = rng.normal(size=(int(rng.integers(1, max_n + 1)), d))
        p = np.exp(x @ w - (x @ w).max(1, keepdims=True))
        y = np.array([rng.choice(c, p=row / row.sum()) for row in p])
        bags.append(x)
        sets.append(sorted(set(y.tolist())))
        labels.append(y)
    return bags, sets, labels


def _one_weight_log_likelihood(theta: np.ndarray, bags, sets) -> np.ndarray:
    """(T,) ``log p(Y | X, W_raw = theta)`` for a one-feature, two-class model without intercepts."""
    basis = sum_to_zero_basis(2)  # (2, 1)
    out = []
    for t in theta:
        logits = [x @ (t * basis.T) for x in bags]
        out.append(orlr_ppl.bag_log_likelihood(logits, sets).sum())
    return np.asarray(out)


@pytest.fixture(scope="module")
def one_weight():
    bags, sets, _ = _drawn(120, np.array([[1.2, -1.2]]), seed=0)
    grid = np.linspace(-1.0, 4.0, 2001)
    return bags, sets, grid, _one_weight_log_likelihood(grid, bags, sets)


def _quadrature_evidence(grid: np.ndarray, log_lik: np.ndarray, scale: float) -> float:
    """``log int p(Y | theta) Normal(theta; 0, scale) d theta`` by the trapezoid rule on ``grid``."""
    log_joint = log_lik + norm.logpdf(grid, scale=scale)
    step = grid[1] - grid[0]
    weights = np.full(grid.size, step)
    weights[[0, -1]] /= 2
    return float(logsumexp(log_joint, b=weights))


def test_laplace_evidence_matches_quadrature_on_a_one_weight_model(one_weight):
    bags, sets, grid, log_lik = one_weight
    with jax.enable_x64(True):
        data = make_model_data(bags, sets, 2, dtype=np.float64)
        for scale in (0.3, 1.0, 3.0):
            gauss = laplace_approximation(data, scale, None, fit_intercept=False, tol=1e-8)
            want = _quadrature_evidence(grid, log_lik, scale)
            # Laplace's error is of order 1/n: a few hundredths of a nat on 120 bags, not more.
            assert gauss.log_evidence == pytest.approx(want, abs=0.02), scale
            # The Hessian is the curvature of the log posterior at its mode (finite differences).
            theta = gauss.mode[0]
            h = 1e-3
            lp = _one_weight_log_likelihood(np.array([theta - h, theta, theta + h]), bags, sets)
            lp += norm.logpdf([theta - h, theta, theta + h], scale=scale)
            curvature = -(lp[0] - 2 * lp[1] + lp[2]) / h**2
            assert gauss.hessian[0, 0] == pytest.approx(curvature, rel=1e-4)


def test_the_evidence_chooses_the_quadrature_evidence_s_best_scale(one_weight):
    bags, sets, grid, log_lik = one_weight
    scales = np.exp(np.linspace(np.log(0.2), np.log(20.0), 301))
    best = scales[np.argmax([_quadrature_evidence(grid, log_lik, s) for s in scales])]
    with jax.enable_x64(True):
        data = make_model_data(bags, sets, 2, dtype=np.float64)
        chosen = fit_evidence(data, None, fit_intercept=False, start=0.3)
    assert chosen.converged and chosen.prior_scale == pytest.approx(best, rel=0.05)
    # Every accepted step raised the evidence: the path's running best is the choice.
    assert chosen.log_evidence == pytest.approx(max(v for _, v in chosen.path))


@pytest.fixture(scope="module")
def drawn_fits():
    w = np.array([[1.5, -0.5, -1.0], [-0.5, 1.5, -1.0]])
    train = _drawn(160, w, seed=1)
    test = _drawn(60, w, seed=2)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        laplace = ORLR(inference="laplace", features=None, fit_intercept=False, random_state=0)
        laplace.fit(train[0], train[1])
        nuts = ORLR(
            inference=NUTS(num_chains=2, num_warmup=300, num_samples=600, progress_bar=False),
            features=None,
            fit_intercept=False,
            random_state=0,
        ).fit(train[0], train[1])
    return laplace, nuts, test


@pytest.mark.arviz
def test_laplace_predictive_matches_nuts_on_model_drawn_data(drawn_fits):
    """Where the posterior is near Gaussian, the Laplace posterior is NUTS's, and so is its predictive."""
    laplace, nuts, (bags, _, labels) = drawn_fits
    assert laplace.diagnostics().converged, laplace.diagnostics()
    assert laplace.diagnostics().sampler["approximation_k"] <= 0.5
    w_l = np.asarray(laplace.posterior_.posterior["W"]).reshape(-1, 2, 3)
    w_n = np.asarray(nuts.posterior_.posterior["W"]).reshape(-1, 2, 3)
    sd = w_n.std(axis=0)
    # Within a fifth of a posterior sd (the mode's offset from the mean, which the Gaussian keeps),
    # beyond the NUTS means' own Monte Carlo error (three standard errors, sd / sqrt(ESS)).
    mcse = sd / np.sqrt(nuts.diagnostics().table["ess_bulk"].min())
    np.testing.assert_array_less(np.abs(w_l.mean(0) - w_n.mean(0)), 0.2 * sd + 3 * mcse)
    np.testing.assert_allclose(w_l.std(0), sd, rtol=0.2)
    nll = [metrics.log_loss(labels, m.predict_proba(bags)) for m in (laplace, nuts)]
    assert nll[0] == pytest.approx(nll[1], abs=0.01)


@pytest.mark.arviz
def test_laplace_estimator_gives_what_a_posterior_gives_and_round_trips(drawn_fits, tmp_path):
    laplace, _, (bags, sets, _) = drawn_fits
    assert laplace.converged_ and laplace.optimality_ <= Laplace.tol and np.isfinite(laplace.log_evidence_)
    stats = laplace.posterior_.sample_stats
    assert {"lp", "log_q"} <= set(stats.data_vars) and stats.attrs["inference"] == "laplace"
    report = laplace.diagnostics()
    assert report.summary_lines()[0].startswith(
        "Laplace: 1000 independent draws from the Gaussian at the MAP"
    )
    intervals = laplace.predict_interval(bags[:3])
    assert all(np.all(i[..., 0] <= i[..., 1]) for i in intervals)
    assert all(np.all(u[:, 1] > 0) for u in laplace.predict_uncertainty(bags[:3]))  # weights' uncertainty
    table = laplace.query(bags, n=5, strategy="bald", label_sets=sets)
    assert len(table) == 5 and np.all(np.diff(table["score"]) <= 0)
    again = ORLR.load(laplace.save(tmp_path / "m"))
    assert (
        again.log_evidence_ == laplace.log_evidence_
        and again.diagnostics().sampler["approximation"] == "Laplace"
    )
    np.testing.assert_allclose(again.predict_proba(bags[:2])[0], laplace.predict_proba(bags[:2])[0])


def test_laplace_refuses_what_it_does_not_cover():
    bags, sets, _ = _drawn(20, np.array([[1.0, -1.0]]), seed=3)
    for kwargs, match in [
        ({"leak": "learn"}, "fixed leak"),
        ({"prior": "l21"}, "smooth mode"),
    ]:
        with pytest.raises(ValueError, match=match):
            ORLR(inference="laplace", **kwargs).fit(bags, sets)
    with pytest.raises(ValueError, match="evidence"):
        ORLR(prior_scale="evidence", prior="l21").fit(bags, sets)


def test_a_flat_prior_on_an_uninformed_weight_has_no_laplace_posterior():
    """A feature that is zero everywhere leaves its weights flat under a flat prior: no strict maximum."""
    bags, sets, _ = _drawn(30, np.array([[1.0, -1.0]]), seed=4)
    bags = [np.concatenate([x, np.zeros((len(x), 1))], axis=1) for x in bags]
    with jax.enable_x64(True):
        data = make_model_data(bags, sets, 2, dtype=np.float64)
        with pytest.raises(ValueError, match="not positive definite"):
            fit_laplace(data, prior_scale=None, intercept_scale=None, fit_intercept=False)


def test_prior_scale_by_evidence_is_recorded_and_saved(tmp_path):
    bags, sets, _ = _drawn(80, np.array([[1.0, -0.5, -0.5], [0.0, 1.0, -1.0]]), seed=5)
    model = ORLR(prior_scale="evidence").fit(bags, sets)
    assert isinstance(model.prior_scale_, float) and model.prior_scale_ != 1.0
    assert model.evidence_path_.shape[1] == 2 and model.evidence_path_[0, 0] == 1.0
    assert model.log_evidence_ == pytest.approx(model.evidence_path_[:, 1].max())
    again = ORLR.load(model.save(tmp_path / "e"))
    assert again.prior_scale_ == model.prior_scale_ and again.get_params()["prior_scale"] == "evidence"
