"""The multi-instance mixture model (``MIMM``): its exact E-step, prior and M-step against independent
references (enumeration, SciPy), EM's monotone log posterior, recovery of well-separated classes, and
the estimator's interface (save/load, clone, bad input, convergence warning)."""

from __future__ import annotations

import itertools
import json
import warnings

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from conftest import DTYPES, TOL, precision
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy import stats
from scipy.special import logsumexp
from sklearn.base import clone

from orlr_ppl import MIMM, MIMLData
from orlr_ppl.estimators.base import BagClassifier
from orlr_ppl.estimators.mimm import mixture_logits as host_logits
from orlr_ppl.inference.point.mimm_em import fit_mimm
from orlr_ppl.inference.point.mimm_steps import (
    MixtureData,
    MixtureParams,
    MixtureShape,
    e_step,
    log_prior,
    m_step,
    make_prior,
    mixture_data,
    mixture_logits,
)
from orlr_ppl.model.model_data import make_model_data

COVARIANCES = ["diag", "full"]
N_MAX, C_SMALL, D_SMALL = 4, 3, 2  # the enumeration tests' padded bag: 3**4 labellings at most
_e_step = jax.jit(e_step, static_argnames=("shape", "fallback"))


# -- independent references ------------------------------------------------------


def _component_logpdf(x: np.ndarray, means: np.ndarray, covs: np.ndarray) -> np.ndarray:
    """(n, C) ``log N(x_i | mu_c, Sigma_c)`` by SciPy, float64."""
    full = [np.diag(c) if c.ndim == 1 else c for c in covs]
    return np.stack([stats.multivariate_normal(m, s).logpdf(x).reshape(-1) for m, s in zip(means, full)], 1)


def _enumerate(x, label_set, weights, means, covs) -> tuple[float, np.ndarray]:
    """``log p(X, Y)`` and (n, C) ``p(y_i = c | X, Y)``, summing ``prod_i pi_{y_i} N(x_i | y_i)`` over
    every labelling whose union is ``Y``: no DP and no factorisation through ``p(Y | X)``."""
    log_joint = np.log(weights) + _component_logpdf(x, means, covs)  # (n, C)
    n, c = log_joint.shape
    labellings = np.array(list(itertools.product(range(c), repeat=n)))
    covers = np.array([set(row.tolist()) == set(label_set) for row in labellings])
    terms = log_joint[np.arange(n), labellings[covers]].sum(axis=1)
    total = logsumexp(terms)
    share = np.exp(terms - total)
    post = np.stack([np.bincount(labellings[covers, i], share, minlength=c) for i in range(n)])
    return float(total), post


def _scipy_log_prior(weights, means, covs, prior, covariance: str) -> float:
    """The conjugate prior's log density by SciPy: Dirichlet, then NIW or per-feature NIG."""
    p = [np.asarray(a, np.float64) for a in prior]
    alpha, m0, kappa, nu, scale = float(p[0]), p[1], float(p[2]), float(p[3]), p[4]
    weights = np.asarray(weights, np.float64)
    out = stats.dirichlet(np.full(len(weights), alpha)).logpdf(weights / weights.sum())  # float32 sums
    for mu, cov in zip(means, covs):
        if covariance == "full":
            out += stats.multivariate_normal(m0, cov / kappa).logpdf(mu)
            out += stats.invwishart(df=nu, scale=scale).logpdf(cov)
        else:
            out += stats.norm(m0, np.sqrt(cov / kappa)).logpdf(mu).sum()
            out += stats.invgamma(nu / 2.0, scale=scale / 2.0).logpdf(cov).sum()
    return float(out)


# -- the E-step, prior and M-step -----------------------------------------------------


@st.composite
def mixture_bags(draw, covariance: str):
    """A bag (n <= 4 instances, d = 2), a label set of 1..min(n, 3) classes of C = 3, and parameters."""
    n = draw(st.integers(1, N_MAX))
    k = draw(st.integers(1, min(n, C_SMALL)))
    labels = sorted(draw(st.permutations(range(C_SMALL)))[:k])

    def floats(lo, hi, size):
        return np.array(draw(st.lists(st.floats(lo, hi, width=64), min_size=size, max_size=size)))

    x = floats(-4.0, 4.0, n * D_SMALL).reshape(n, D_SMALL)
    weights = floats(0.05, 1.0, C_SMALL)
    means = floats(-3.0, 3.0, C_SMALL * D_SMALL).reshape(C_SMALL, D_SMALL)
    if covariance == "diag":
        covs = floats(0.2, 4.0, C_SMALL * D_SMALL).reshape(C_SMALL, D_SMALL)
    else:
        diag, off = floats(0.4, 2.0, C_SMALL * D_SMALL).reshape(C_SMALL, D_SMALL), floats(-1.0, 1.0, C_SMALL)
        chol = np.zeros((C_SMALL, D_SMALL, D_SMALL))
        chol[:, [0, 1], [0, 1]], chol[:, 1, 0] = diag, off
        covs = chol @ np.swapaxes(chol, 1, 2)
    return x, labels, weights / weights.sum(), means, covs


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("covariance", COVARIANCES)
@settings(max_examples=30)
@given(data=st.data())
def test_e_step_matches_enumeration(covariance, dtype, data):
    """``log p(X_b, Y_b)`` and the posteriors of one bag, padded with junk instances, against enumeration."""
    x, labels, weights, means, covs = data.draw(mixture_bags(covariance))
    ref_ll, ref_post = _enumerate(x, labels, weights, means, covs)
    n = len(x)
    feats = np.full((N_MAX, D_SMALL), 7.0)  # junk rows on padding: they must not matter
    feats[:n] = x
    mask = (np.arange(N_MAX) < n)[None]
    sets = np.zeros((1, C_SMALL), np.int32)
    sets[0, labels] = 1
    cells = np.where(mask[0], np.arange(N_MAX), N_MAX).astype(np.int32)
    with precision(dtype):
        params = MixtureParams(*(jnp.asarray(a, dtype) for a in (weights, means, covs)))
        rows = MixtureData(jnp.asarray(feats, dtype), cells, (np.arange(N_MAX)[None],), (mask,), (sets,))
        res = _e_step(params, rows, MixtureShape((C_SMALL,), covariance))
        ll, post = float(res.bag_log_likelihoods[0][0]), np.asarray(res.posteriors[0][0], np.float64)
        assert float(res.log_likelihood) == ll
        np.testing.assert_array_equal(np.asarray(res.responsibilities)[:n], post[:n])
    tol = TOL[dtype]
    assert ll == pytest.approx(ref_ll, rel=tol, abs=tol)
    np.testing.assert_allclose(post[:n], ref_post, atol=10 * tol, rtol=0)
    assert np.all(post[n:] == 0)


@pytest.mark.parametrize("covariance", COVARIANCES)
def test_log_prior_matches_scipy(covariance):
    rng = np.random.default_rng(1)
    c, d = 3, 3
    x = rng.normal(size=(40, d)) @ rng.normal(size=(d, d))
    weights = rng.dirichlet(np.ones(c))
    means = rng.normal(size=(c, d))
    a = rng.normal(size=(c, d, d))
    covs = a @ np.swapaxes(a, 1, 2) + np.eye(d) if covariance == "full" else rng.uniform(0.3, 3.0, (c, d))
    with precision("float64"):
        prior = make_prior(x, covariance, 2.5, 0.3, 0.2, None, np.float64)
        got = float(log_prior(MixtureParams(weights, means, covs), prior, covariance))
    assert got == pytest.approx(_scipy_log_prior(weights, means, covs, prior, covariance), rel=1e-10)


def _small_bags(seed: int, n_bags: int = 24):
    """Bags of 1..4 instances (d = 2) from three Gaussians, label sets their unions: sizes 1..3."""
    rng = np.random.default_rng(seed)
    centres = np.array([[0.0, 0.0], [3.0, 0.5], [0.5, 3.0]])
    bags, sets, truth = [], [], []
    for _ in range(n_bags):
        y = rng.integers(0, C_SMALL, rng.integers(1, N_MAX + 1))
        bags.append(centres[y] + rng.normal(size=(len(y), D_SMALL)))
        sets.append(sorted(set(y.tolist())))
        truth.append(y)
    return bags, sets, truth


@pytest.mark.parametrize("covariance", COVARIANCES)
def test_m_step_maximises_the_expected_log_posterior(covariance):
    """The closed form beats every small perturbation of itself on ``sum r (log pi + log N) + log p``."""
    bags, sets, _ = _small_bags(2)
    rng = np.random.default_rng(3)
    with precision("float64"):
        x = mixture_data(make_model_data(bags, sets, C_SMALL, dtype=np.float64))[0].features
        resp = rng.dirichlet(np.ones(C_SMALL), len(x))
        prior = make_prior(np.concatenate(bags), covariance, dtype=np.float64)

        @jax.jit
        def objective(params):
            return jnp.sum(resp * mixture_logits(x, params, covariance)) + log_prior(
                params, prior, covariance
            )

        best = m_step(resp, x, prior, covariance)
        top = float(objective(best))
        for _ in range(20):
            w = jax.nn.softmax(jnp.log(best.weights) + 0.01 * rng.normal(size=C_SMALL))
            mu = best.means + 0.01 * rng.normal(size=best.means.shape)
            if covariance == "diag":
                cov = best.covariances * np.exp(0.01 * rng.normal(size=best.covariances.shape))
            else:
                chol = np.linalg.cholesky(np.asarray(best.covariances))
                chol = chol + 0.01 * np.tril(rng.normal(size=chol.shape))
                cov = chol @ np.swapaxes(chol, 1, 2)
            assert float(objective(MixtureParams(w, mu, cov))) < top


@pytest.mark.parametrize("covariance", COVARIANCES)
def test_fit_matches_enumeration_across_buckets(covariance):
    """A float64 fit on bags of label-set sizes 1..3 (three buckets, padded to canonical shapes):
    its log posterior is the enumerated ``sum_b log p(X_b, Y_b)`` plus SciPy's log prior at the fitted
    parameters, it never fell, and the transductive posteriors are the enumerated ones."""
    bags, sets, _ = _small_bags(4)
    with precision("float64"):
        model = MIMM(covariance=covariance, n_classes=C_SMALL).fit(bags, sets)
        proba = model.predict_proba(bags, sets)
    assert model.covariances_.shape == ((3, 2) if covariance == "diag" else (3, 2, 2))
    assert model.converged_ and model.n_iter_ >= 2
    history = model.history_
    assert np.all(np.diff(history) >= -1e-10 * np.abs(history[1:])), history
    x = [(b - model.feature_map_.mean_) / model.feature_map_.scale_ for b in bags]
    params = (model.weights_, model.means_, model.covariances_)
    total = 0.0
    for xb, yb, pb in zip(x, sets, proba):
        ll, post = _enumerate(xb, yb, *params)
        total += ll
        np.testing.assert_allclose(pb, post, atol=1e-8)
    prior = make_prior(np.concatenate(x), covariance, dtype=np.float64)
    total += _scipy_log_prior(*params, prior, covariance)
    assert model.log_posterior_ == pytest.approx(total, rel=1e-9)
    assert model.log_posterior_ == history[-1]


def test_near_underflow_the_fit_goes_on_in_exact_arithmetic(monkeypatch):
    """float32, and a bag labelled {0, 1} whose instances sit far from class 1: ``p(Y_b | X_b)`` falls
    below the probability-space DP's reach (about exp(-68)), so the fit continues with the log-space
    fallback; its log posterior is still the enumerated one."""
    from orlr_ppl.inference.point import mimm_em

    rng = np.random.default_rng(5)
    bags = [rng.normal(0.0, 1.0, (4, 1)) for _ in range(10)]
    bags += [rng.normal(30.0, 1.0, (4, 1)) for _ in range(60)]
    bags.append(np.array([[-2.0], [-1.5]]))
    sets = [[0]] * 10 + [[1]] * 60 + [[0, 1]]
    calls = []
    em = mimm_em._em
    monkeypatch.setattr(mimm_em, "_em", lambda *a, **k: calls.append(k["fallback"]) or em(*a, **k))
    model = MIMM(n_classes=2, features=None).fit(bags, sets)
    assert calls[:2] == [False, True] and model.converged_
    assert np.all(np.diff(model.history_) >= -1e-5 * np.abs(model.history_[1:]))
    params = (model.weights_, model.means_, model.covariances_)
    terms = [_enumerate(b, y, *params) for b, y in zip(bags, sets)]
    log_px = logsumexp(host_logits(bags[-1], *params), axis=1)  # log p(x_i)
    assert terms[-1][0] - log_px.sum() < -80  # log p(Y_b | X_b) of the far bag
    prior = make_prior(np.concatenate(bags), "diag", dtype=np.float64)
    total = sum(t[0] for t in terms) + _scipy_log_prior(*params, prior, "diag")
    assert model.log_posterior_ == pytest.approx(total, rel=1e-5)


def _collinear(seed: int):
    """Bags of 3 features, the third a combination of the first two (scale 1e3): float32 data whose
    class covariances, under a tiny prior, go singular within a few iterations."""
    rng = np.random.default_rng(seed)
    bags = []
    for _ in range(40):
        z = rng.normal(size=(4, 2)) * 1e3
        bags.append(np.hstack([z, z[:, :1] * 3 + z[:, 1:] * 0.7, rng.normal(size=(4, 1)) * 1e-3]))
    sets = [sorted({int(rng.integers(0, 3)), int(rng.integers(0, 3))}) for _ in bags]
    return bags, sets


def test_a_non_finite_step_ends_the_fit_at_the_last_finite_parameters():
    """Full covariances beyond a float32 Cholesky: EM (M-step first, ``em_driver``) stops, unconverged,
    at the last parameters whose log posterior was finite, which it reports; if the first already
    fails, every start does and the fit raises."""
    from orlr_ppl.inference.point.mimm_steps import log_posterior

    bags, sets = _collinear(4)  # 1 no longer reaches a finite step under jax 0.12; 4 does under 0.10 and 0.12
    data = make_model_data(bags, sets, 3)
    prior = make_prior(np.concatenate(bags), "full", covariance_prior=1e-6)
    fit = fit_mimm(data, prior, "full", max_iter=50)
    assert not fit.converged and fit.n_iter < 50  # stopped at a non-finite step
    assert len(fit.history) == fit.n_iter + 1 and np.all(np.isfinite(fit.history))
    rows, max_labels = mixture_data(data)
    params = MixtureParams(fit.weights, fit.means, fit.covariances)
    at_fit = float(log_posterior(params, rows, prior, MixtureShape(max_labels, "full")))
    assert at_fit == pytest.approx(fit.log_posterior, rel=1e-6) and fit.log_posterior == fit.history[-1]
    bags, sets = _collinear(0)
    with pytest.raises(ValueError, match="non-finite log posterior"):
        fit_mimm(
            make_model_data(bags, sets, 3),
            make_prior(np.concatenate(bags), "full", covariance_prior=1e-6),
            "full",
        )


# -- EM on data drawn from the model ---------------------------------------------------

N_NAMED, N_CLASSES = 4, 5  # class 4 is named by no label set


def _synthetic(seed: int = 0, n_bags: int = 60):
    """Bags of 2..5 instances from four well-separated Gaussians in 2-d (class 4 never occurs)."""
    rng = np.random.default_rng(seed)
    centres = 4.0 * np.array([[1, 1], [-1, 1], [-1, -1], [1, -1]], float)
    bags, sets, truth = [], [], []
    for _ in range(n_bags):
        y = rng.choice(N_NAMED, rng.integers(2, 6), p=[0.35, 0.3, 0.2, 0.15])
        bags.append(centres[y] + rng.normal(size=(len(y), 2)))
        sets.append(sorted(set(y.tolist())))
        truth.append(y)
    return bags, sets, truth


SYNTHETIC = _synthetic()


@pytest.fixture(scope="module", params=COVARIANCES)
def fitted(request):
    bags, sets, _ = SYNTHETIC
    return MIMM(covariance=request.param, n_classes=N_CLASSES).fit(bags, sets)


def test_em_log_posterior_never_falls(fitted):
    history = fitted.history_
    assert fitted.converged_ and len(history) == fitted.n_iter_ + 1 >= 3
    # float32: the log posterior may wobble by round-off, never by more
    assert np.all(np.diff(history) >= -1e-5 * np.abs(history[1:])), history
    assert history[-1] - history[0] > 10.0  # and it did climb


def test_recovers_well_separated_classes(fitted):
    bags, sets, truth = SYNTHETIC
    chance = np.bincount(np.concatenate(truth)).max() / sum(len(y) for y in truth)
    inductive = fitted.score(bags, truth)
    transductive = np.mean(np.concatenate(fitted.predict(bags, sets)) == np.concatenate(truth))
    assert inductive > 0.9 and transductive > 0.9 and inductive > chance + 0.3, (inductive, transductive)
    # the class means, back in feature units, sit at the true centres
    means, _ = fitted.in_feature_units()
    centres = 4.0 * np.array([[1, 1], [-1, 1], [-1, -1], [1, -1]], float)
    np.testing.assert_allclose(means[:N_NAMED], centres, atol=0.5)


def test_a_class_no_label_set_names(fitted):
    """Class 4 gets a small weight, the prior's mean and a finite covariance; nothing breaks."""
    bags, sets, _ = SYNTHETIC
    n = sum(len(b) for b in bags)
    assert fitted.weights_[N_NAMED] == pytest.approx(1.0 / (n + N_CLASSES), rel=1e-3)  # alpha = 2
    assert np.all(fitted.weights_[:N_NAMED] > 0.1)
    np.testing.assert_allclose(fitted.means_[N_NAMED], 0.0, atol=1e-4)  # the standardised data's mean
    assert np.all(np.isfinite(fitted.covariances_))
    proba = np.concatenate(fitted.predict_proba(bags))
    assert proba.shape == (n, N_CLASSES) and np.allclose(proba.sum(axis=1), 1.0)
    trans = np.concatenate(fitted.predict_proba(bags, sets))
    assert np.all(trans[:, N_NAMED] == 0) and np.allclose(trans.sum(axis=1), 1.0)
    scores = fitted.bag_scores(bags, rule="model")
    assert scores.shape == (len(bags), N_CLASSES) and np.all((scores >= 0) & (scores <= 1))


def test_save_load_round_trip(fitted, tmp_path):
    bags, sets, _ = SYNTHETIC
    folder = fitted.save(tmp_path / "mimm")
    for back in (MIMM.load(folder), BagClassifier.load(folder)):
        assert type(back) is MIMM and back.get_params() == fitted.get_params()
        for name in ("weights_", "means_", "covariances_"):
            np.testing.assert_array_equal(getattr(back, name), getattr(fitted, name))
        for name in ("mean_", "scale_"):  # the feature map, a StandardScaler
            np.testing.assert_array_equal(
                getattr(back.feature_map_, name), getattr(fitted.feature_map_, name)
            )
        assert (back.log_posterior_, back.n_iter_, back.converged_) == (
            fitted.log_posterior_,
            fitted.n_iter_,
            fitted.converged_,
        )
        for got, want in zip(back.predict_proba(bags), fitted.predict_proba(bags)):
            np.testing.assert_array_equal(got, want)
        for got, want in zip(back.predict_proba(bags, sets), fitted.predict_proba(bags, sets)):
            np.testing.assert_array_equal(got, want)


def test_load_refuses_covariances_of_the_wrong_shape(fitted, tmp_path):
    folder = fitted.save(tmp_path / "mimm")
    meta = json.loads((folder / "metadata.json").read_text())
    meta["params"]["covariance"] = "full" if fitted.covariance == "diag" else "diag"
    (folder / "metadata.json").write_text(json.dumps(meta))
    with pytest.raises(ValueError, match="covariances_"):
        MIMM.load(folder)


def test_get_params_and_clone(fitted):
    params = fitted.get_params()
    assert params["n_classes"] == N_CLASSES and params["covariance"] in COVARIANCES
    twin = clone(fitted)
    assert twin.get_params() == params and not hasattr(twin, "weights_")
    twin.set_params(weight_concentration=3.0)
    assert twin.weight_concentration == 3.0 and fitted.weight_concentration == 2.0


def test_restarts_keep_the_best_start(fitted):
    """Start 0 is the deterministic one, so more starts never end lower; a seed repeats the fit."""
    bags, sets, _ = SYNTHETIC
    settings = {**fitted.get_params(), "n_init": 3, "random_state": 7}
    multi = MIMM(**settings).fit(bags, sets)
    assert multi.log_posterior_ >= fitted.log_posterior_
    again = MIMM(**settings).fit(bags, sets)
    np.testing.assert_array_equal(again.means_, multi.means_)


def test_fit_from_miml_data_and_convergence_warning():
    """A ``MIMLData`` fits as (bags, label sets) do; stopping at ``max_iter`` warns (one program for both)."""
    from orlr_ppl.inference.checks.diagnostics import ConvergenceWarning

    bags, sets, truth = SYNTHETIC
    data = MIMLData(bags, sets, instance_labels=truth, n_classes=N_CLASSES)
    with pytest.warns(ConvergenceWarning, match="raise max_iter"):
        short = MIMM(max_iter=1).fit(data)
    assert short.n_iter_ == 1 and not short.converged_ and len(short.history_) == 2
    with warnings.catch_warnings():
        warnings.simplefilter("error", ConvergenceWarning)
        full = MIMM().fit(data)
    assert full.class_names_ == data.class_names and full.score(data) > 0.9


def test_diagnostics_name_the_stop(fitted):
    assert fitted.diagnostics().converged and not fitted.diagnostics().problems
    stopped = clone(fitted)
    stopped.__dict__.update({k: v for k, v in vars(fitted).items() if k.endswith("_")})
    stopped.converged_, stopped.n_iter_ = False, 3  # as after a non-finite step
    assert "not finite" in stopped.diagnostics().problems[0]
    stopped.n_iter_ = stopped.max_iter
    assert "raise max_iter" in stopped.diagnostics().problems[0]


# -- bad input ------------------------------------------------------------------------


@pytest.mark.parametrize(
    "case, match",
    [
        ("nan", r"bag 1 has NaN or infinite features in instance\(s\) \[0\]"),
        ("label", r"bag 2 has label\(s\) \[7\] outside \[0, 5\)"),
        ("too_many_labels", r"bag 0 has 3 labels but only 2 instance\(s\)"),
        ("empty_set", r"bag 3 has an empty label set"),
    ],
)
def test_malformed_input_raises_naming_the_bag(case, match):
    bags, sets, _ = _synthetic(1, n_bags=6)
    bags, sets = [b.copy() for b in bags], [list(s) for s in sets]
    if case == "nan":
        bags[1][0, 1] = np.nan
    elif case == "label":
        sets[2] = [0, 7]
    elif case == "too_many_labels":
        bags[0], sets[0] = bags[0][:2], [0, 1, 2]
    else:
        sets[3] = []
    with pytest.raises(ValueError, match=match):
        MIMM(n_classes=N_CLASSES).fit(bags, sets)


@pytest.mark.parametrize(
    "kwargs, match",
    [
        ({"covariance": "spherical"}, "covariance='spherical'"),
        ({"weight_concentration": 0.5}, "weight_concentration must be at least 1"),
        ({"covariance_prior": 0.0}, "covariance_prior must be positive"),
        ({"covariance": "full", "degrees_of_freedom": 0.5}, "degrees_of_freedom must be above 1"),
        ({"mean_precision": -1.0}, "mean_precision must be positive"),
    ],
)
def test_invalid_settings_raise(kwargs, match):
    bags, sets, _ = _synthetic(1, n_bags=6)
    with pytest.raises(ValueError, match=match):
        MIMM(**kwargs).fit(bags, sets)


def test_fit_mimm_refuses_bad_arguments():
    bags, sets, _ = _synthetic(1, n_bags=6)
    data = make_model_data(bags, sets, N_CLASSES)
    prior = make_prior(np.concatenate(bags))
    with pytest.raises(ValueError, match="covariance='tied'"):
        fit_mimm(data, prior, "tied")
    with pytest.raises(ValueError, match="n_init >= 1"):
        fit_mimm(data, prior, n_init=0)


def test_cli_fits_mimm_and_predicts_and_evaluates_with_it(tmp_path, capsys):
    from orlr_ppl.cli import main

    out = tmp_path / "mimm"
    fit = ["fit", "--dataset", "digits", "--n-bags", "40", "--quiet", "--method", "mimm"]
    assert main([*fit, "--covariance", "full", "--max-iter", "40", "--out", str(out)]) == 0
    printed = capsys.readouterr().out
    assert "fitted MIMM on 40 bags" in printed
    model = MIMM.load(out)
    assert model.covariance == "full" and model.covariances_.ndim == 3
    assert main(["predict", "--model", str(out), "--dataset", "digits", "--n-bags", "20"]) == 0
    assert capsys.readouterr().out.startswith("bag_id,instance,label,p(0)")
    assert main(["evaluate", "--model", str(out), "--dataset", "digits", "--n-bags", "20", "--json"]) == 0
    assert 0.3 < json.loads(capsys.readouterr().out)["instance_accuracy_inductive"] <= 1.0
    # ORLR's options are refused, in one line, not ignored.
    assert main([*fit, "--kernel", "rbf", "--prior", "l21", "--out", str(tmp_path / "x")]) == 2
    err = capsys.readouterr().err
    assert "--prior, --kernel" in err and "Traceback" not in err and len(err.strip().splitlines()) == 1
