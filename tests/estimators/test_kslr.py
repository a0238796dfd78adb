"""K-SLR: softmax regression on RBF kernel features of instance labels, the upper bound of kernel ORLR."""

from __future__ import annotations

import warnings

import numpy as np
import pytest
from sklearn.kernel_approximation import Nystroem
from sklearn.linear_model import LogisticRegression
from sklearn.metrics.pairwise import rbf_kernel as sk_rbf
from sklearn.pipeline import make_pipeline
from sklearn.preprocessing import StandardScaler

from orlr_ppl import SoftmaxRegression
from orlr_ppl.estimators.model_selection import select_by_cv
from orlr_ppl.features import RBFDictionary
from orlr_ppl.inference.checks.diagnostics import ConvergenceWarning


def _xor(n_bags: int, seed: int):
    """Instance classes by quadrant parity (XOR) and a disc: no linear model separates them."""
    rng = np.random.default_rng(seed)
    bags = [rng.uniform(-1, 1, size=(int(rng.integers(2, 6)), 3)) for _ in range(n_bags)]
    return bags, [((x[:, 0] > 0) ^ (x[:, 1] > 0)) + 2 * (np.hypot(x[:, 0], x[:, 1]) < 0.35) for x in bags]


@pytest.fixture(scope="module")
def xor():
    return _xor(60, 0), _xor(60, 1)


def rbf(gamma: float, size: int | None = None):
    """K-SLR's map: standardised features, then their RBF similarities to a dictionary."""
    return make_pipeline(StandardScaler(), RBFDictionary(gamma=gamma, n_components=size, random_state=0))


def _accuracy(model, bags, labels) -> float:
    return float(np.mean(np.concatenate(model.predict(bags)) == np.concatenate(labels)))


def test_kslr_is_logistic_regression_on_the_rbf_features(xor, tmp_path) -> None:
    (tb, tl), (vb, vl) = xor
    model = SoftmaxRegression(features=RBFDictionary(gamma=2.0), prior_scale=3.0, tol=1e-9)
    model.fit(tb, tl)
    x = np.concatenate(tb)
    assert model._kernel().dictionary_.shape == x.shape  # every training instance, by default
    # scikit-learn's multinomial fit has the same objective: C = prior_scale**2.
    ref = LogisticRegression(C=9.0, tol=1e-10, max_iter=10000).fit(
        sk_rbf(x, x, gamma=2.0), np.concatenate(tl)
    )
    np.testing.assert_allclose(model.coef_, ref.coef_.T, atol=2e-3)
    want = ref.predict_proba(sk_rbf(np.concatenate(vb), x, gamma=2.0))
    np.testing.assert_allclose(np.concatenate(model.predict_proba(vb)), want, atol=1e-4)
    assert np.abs(model.coef_.sum(axis=1)).max() < 1e-4  # rows sum to zero at the optimum
    assert model.converged_ and model.n_iter_ < model.max_iter
    linear = SoftmaxRegression().fit(tb, tl)
    assert _accuracy(model, vb, vl) > 0.85 > _accuracy(linear, vb, vl) + 0.2
    model.save(tmp_path / "kslr")
    back = SoftmaxRegression.load(tmp_path / "kslr")
    assert (back.kernel_gamma_, back.prior_scale_) == (2.0, 3.0)
    assert (back.n_iter_, back.converged_) == (model.n_iter_, True)  # the optimiser's report survives
    for a, b in zip(model.predict_proba(vb), back.predict_proba(vb)):
        np.testing.assert_array_equal(a, b)
    with pytest.raises(ValueError, match="feature units"):
        model.coef_in_feature_units()


def test_kslr_says_when_lbfgs_stops_at_its_cap(xor) -> None:
    (tb, tl), _ = xor
    model = SoftmaxRegression(features=rbf(2.0), prior_scale=30.0, max_iter=5)
    with pytest.warns(ConvergenceWarning, match="stopped after 5 iterations"):
        model.fit(tb, tl)
    assert not model.converged_ and model.n_iter_ == 5


def test_kslr_dictionary_shrinking_and_nystroem(xor, tmp_path) -> None:
    (tb, tl), (vb, vl) = xor
    small = SoftmaxRegression(features=rbf(2.0, size=50), prior_scale=3.0).fit(tb, tl)
    assert small.coef_.shape == (50, 4) and small._kernel().dictionary_.shape == (50, 3)
    nystroem = Nystroem(gamma=2.0, n_components=50, random_state=0)
    nys = SoftmaxRegression(features=make_pipeline(StandardScaler(), nystroem), prior_scale=3.0)
    nys.fit(tb, tl)
    assert nys.coef_.shape[0] == nys._kernel().normalization_.shape[1] <= 50
    assert min(_accuracy(small, vb, vl), _accuracy(nys, vb, vl)) > 0.8
    nys.save(tmp_path / "nys")
    for a, b in zip(nys.predict_proba(vb), SoftmaxRegression.load(tmp_path / "nys").predict_proba(vb)):
        np.testing.assert_array_equal(a, b)


def test_kslr_auto_selection_scores_held_out_bags(xor) -> None:
    (tb, tl), _ = xor
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)  # a choice at the grid's edge
        model = SoftmaxRegression(features="rbf", gammas="auto", prior_scale="auto", cv=2, random_state=0)
        model.fit(tb, tl)
    table = model.cv_results_
    assert len(table) == 4 * 5  # gammas x prior scales
    best = max(table, key=lambda r: r["mean_log_likelihood"])
    assert (model.kernel_gamma_, model.prior_scale_) == (best["gamma"], best["prior_scale"])
    assert best["gamma"] != min(r["gamma"] for r in table)  # the widest kernel is near linear: worse
    # One candidate, by hand: fit on one fold's bags, score the other's instances.
    from orlr_ppl.estimators.model_selection import bag_folds

    folds = bag_folds(len(tb), 2, 0)
    mean, scale = model.feature_map_.steps[0][1].mean_, model.feature_map_.steps[0][1].scale_
    cand = table[7]
    scores = []
    for f in range(2):
        tr, te = folds[1 - f], folds[f]
        ref = SoftmaxRegression(
            features=RBFDictionary(gamma=cand["gamma"], random_state=0), prior_scale=cand["prior_scale"]
        ).fit([(tb[i] - mean) / scale for i in tr], [tl[i] for i in tr])
        proba = np.concatenate(ref.predict_proba([(tb[i] - mean) / scale for i in te]))
        y = np.concatenate([tl[i] for i in te])
        scores.append(np.mean(np.log(proba[np.arange(len(y)), y])))
    assert cand["mean_log_likelihood"] == pytest.approx(np.mean(scores), rel=1e-3)


def test_select_by_cv_splits_bags_and_warns_at_the_grid_edge() -> None:
    seen = []

    def score(params, train, test):
        seen.append((train, test))
        return -abs(params["a"] - 3.0)

    with pytest.warns(UserWarning, match="edge of its grid"):
        chosen = select_by_cv(score, 10, [{"a": v} for v in (0.0, 1.0, 3.0)], 2)
    assert chosen.best == {"a": 3.0} and len(seen) == 6
    for train, test in seen:
        assert np.intersect1d(train, test).size == 0 and np.union1d(train, test).tolist() == list(range(10))


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [({"features": "rbf", "gammas": [-1.0]}, "gamma"), ({"prior_scale": 0.0}, "prior_scale")],
)
def test_bad_kslr_settings_raise(xor, kwargs, match) -> None:
    (tb, tl), _ = xor
    with pytest.raises(ValueError, match=match):
        SoftmaxRegression(**kwargs).fit(tb, tl)


def test_cli_compares_kslr_by_name() -> None:
    from orlr_ppl.cli.compare import compared_models
    from orlr_ppl.cli.main import build_parser

    args = build_parser().parse_args(["evaluate", "--dataset", "digits", "--methods", "kslr,softmax"])
    models = {name: make() for name, make in compared_models(args).items()}
    assert list(models) == ["SoftmaxRegression", "K-SLR"]
    kslr = models["K-SLR"]
    assert (kslr.features, kslr.gammas, kslr.prior_scale, kslr.random_state) == ("rbf", "auto", "auto", 0)
    assert models["SoftmaxRegression"].features == "standard"
