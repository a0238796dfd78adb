"""The l2,1 (group Laplace) prior and its proximal fits, and kernel ORLR (issue 13, items 1-2, 5)."""

from __future__ import annotations

import math
import warnings

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from scipy import integrate
from sklearn.base import clone
from sklearn.kernel_approximation import Nystroem
from sklearn.metrics.pairwise import rbf_kernel as sk_rbf
from sklearn.pipeline import make_pipeline
from sklearn.preprocessing import StandardScaler

import orlr_ppl
from orlr_ppl import EM, MAP, NUTS, ORLR, ORLRCV, SVI
from orlr_ppl.features import RBFDictionary, median_gamma
from orlr_ppl.features.rbf import rbf_kernel
from orlr_ppl.inference.point.em import fit_em
from orlr_ppl.inference.point.map import fit_map
from orlr_ppl.inference.point.prox import fista, group_soft_threshold, proximal_steps
from orlr_ppl.model.log_density import potential, prior_scales
from orlr_ppl.model.numpyro_model import make_model_data, split_model_data, sum_to_zero_basis
from orlr_ppl.model.priors import (
    HORSESHOE_SITES,
    GroupLaplace,
    group_laplace_log_normalizer,
    horseshoe_start,
    horseshoe_weights,
)

# -- the prior and the proximal map -------------------------------------------------------------


@pytest.mark.parametrize("k", [1, 2, 3, 5])
def test_group_laplace_normaliser_integrates_its_density(k: int) -> None:
    scale = 0.7
    # In polar form: surface of the unit sphere in R^k times the radial integral.
    sphere = 2 * math.pi ** (k / 2) / math.gamma(k / 2)
    radial, _ = integrate.quad(lambda r: r ** (k - 1) * math.exp(-r / scale), 0, np.inf)
    assert float(group_laplace_log_normalizer(k, scale)) == pytest.approx(math.log(sphere * radial), rel=1e-5)


def test_group_laplace_samples_and_log_prob() -> None:
    d = GroupLaplace(0.5, 3, validate_args=True)
    x = np.asarray(d.sample(jax.random.PRNGKey(0), (40000,)))
    norms = np.linalg.norm(x, axis=1)
    # ||w|| ~ Gamma(k, scale): mean k * scale; directions uniform (mean ~ 0).
    assert norms.mean() == pytest.approx(1.5, rel=0.02)
    assert np.abs(x.mean(axis=0)).max() < 0.03
    assert np.mean(np.sum(x**2, axis=1)) == pytest.approx(float(np.sum(d.variance)), rel=0.03)
    w = np.array([[0.3, -0.4, 0.0]])
    want = -0.5 / 0.5 - float(group_laplace_log_normalizer(3, 0.5))
    assert float(d.log_prob(w)[0]) == pytest.approx(want, rel=1e-6)


def test_group_soft_threshold_is_the_proximal_map() -> None:
    rng = np.random.default_rng(0)
    v = rng.normal(size=(6, 3)).astype(np.float32)
    v[2] *= 0.05  # a short row: to zero
    t = 0.4
    got = np.asarray(group_soft_threshold(jnp.asarray(v), t))
    for row, out in zip(v, got):
        norm = np.linalg.norm(row)
        np.testing.assert_allclose(out, 0.0 if norm <= t else row * (1 - t / norm), rtol=1e-6, atol=1e-7)
    assert np.all(got[2] == 0)
    # The prox minimises t * ||w|| + ||w - v||^2 / 2, row by row: no random point does better.
    obj = lambda w: t * np.linalg.norm(w, axis=-1) + 0.5 * np.sum((w - v) ** 2, axis=-1)  # noqa: E731
    for _ in range(200):
        assert np.all(obj(got) <= obj(got + 0.05 * rng.normal(size=v.shape)) + 1e-6)


def test_proximal_steps_and_fista_reach_the_group_lasso_minimum() -> None:
    # f(w) = ||w - v||^2 / 2 has the prox of v as the exact minimiser of f + lam * l21.
    rng = np.random.default_rng(1)
    v = rng.normal(size=(5, 2))
    v[[1, 3]] *= 0.1
    lam = 0.5
    want = np.asarray(group_soft_threshold(jnp.asarray(v), lam))
    loss = lambda p: 0.5 * jnp.sum((p["W_raw"] - v) ** 2)  # noqa: E731
    start = {"W_raw": jnp.zeros((5, 2))}
    # L = 1 here: steps of at least 1 / L keep float32 round-off from stalling the search.
    steps = jax.jit(
        lambda p: proximal_steps(loss, p, jnp.asarray(lam), jnp.asarray(30), jnp.asarray(0.3), 1.0)
    )
    got, _ = steps(start)
    # float32: at the minimum every step size passes the bound, so the search grows the step, and
    # the long steps' round-off leaves the iterate within 1e-4 of the minimiser.
    np.testing.assert_allclose(got["W_raw"], want, atol=1e-4)
    res = jax.jit(lambda p: fista(loss, p, jnp.asarray(lam), 200, jnp.asarray(1e-9), 0.05, 1.0))(start)
    np.testing.assert_allclose(res.params["W_raw"], want, atol=1e-4)
    assert np.all(np.asarray(res.params["W_raw"])[[1, 3]] == 0)


# -- l2,1 fits on data with irrelevant rows -----------------------------------------------------


def _irrelevant_rows(seed: int = 0, n_bags: int = 120, d_rel: int = 3, d_irr: int = 7, c: int = 4):
    rng = np.random.default_rng(seed)
    w = rng.normal(size=(d_rel, c)) * 3
    bags, sets = [], []
    for _ in range(n_bags):
        n = int(rng.integers(2, 6))
        x = rng.normal(size=(n, d_rel + d_irr))
        p = np.exp(x[:, :d_rel] @ w)
        p /= p.sum(axis=1, keepdims=True)
        bags.append(x)
        sets.append(sorted({int(rng.choice(c, p=pi)) for pi in p}))
    return bags, sets, c


@pytest.fixture(scope="module")
def l21_fits():
    bags, sets, c = _irrelevant_rows()
    with jax.enable_x64(True):  # as the estimators fit: float64, to a first-order optimum
        data = make_model_data(bags, sets, c, weight_prior="l21", dtype=np.float64)
        em = fit_em(data, 0.05, 10.0, max_iter=1000, tol=1e-4)
        mp = fit_map(data, 0.05, 10.0, max_iter=1000, tol=1e-6)
    return data, em, mp


def test_l21_em_and_map_zero_the_irrelevant_rows_and_agree(l21_fits) -> None:
    _, em, mp = l21_fits
    for res in (em, mp):
        norms = np.linalg.norm(res.W, axis=1)
        assert np.all(norms[:3] > 0.1), norms
        assert np.all(norms[3:] == 0.0), norms  # exactly: the prox, not a small gradient step
        assert res.converged
    np.testing.assert_allclose(em.W, mp.W, atol=5e-3)
    assert em.log_posterior == pytest.approx(mp.log_posterior, abs=1e-3)


# One program per shape: evaluated eagerly, each of the model's ~200 operations compiles on its own.
minibatch_potential = jax.jit(potential, static_argnums=3)


def test_l21_log_posterior_is_the_model_s_under_the_group_laplace_prior(l21_fits) -> None:
    data, em, _ = l21_fits
    basis = sum_to_zero_basis(data.n_outputs)
    params = {
        "W_raw": jnp.asarray(em.W @ basis, jnp.float32),
        "beta_raw": jnp.asarray(em.beta @ basis, jnp.float32),
    }
    arrays, shape = split_model_data(data)
    model_value = -float(minibatch_potential(params, arrays, prior_scales(0.05, 10.0), shape))
    assert em.log_posterior == pytest.approx(model_value, abs=1e-3)
    # The group Laplace prior, not the Normal of the same scale: that one gives another value.
    normal_shape = shape._replace(weight_prior="normal")
    assert model_value != pytest.approx(
        -float(minibatch_potential(params, arrays, prior_scales(0.05, 10.0), normal_shape))
    )


def test_l21_em_history_never_falls() -> None:
    bags, sets, c = _irrelevant_rows(seed=2, n_bags=60)
    res = fit_em(make_model_data(bags, sets, c, weight_prior="l21"), 0.1, 10.0, max_iter=40, m_steps=1)
    assert np.all(np.diff(res.history) >= -1e-4 * np.abs(res.history[1:]))


def test_orlr_l21_reports_row_inclusion_and_selects_features() -> None:
    bags, sets, _ = _irrelevant_rows()
    model = ORLR(prior="l21", prior_scale=0.05).fit(bags, sets)
    # Row 0's weights are real but small (norm ~0.26): under the default effect (half a nat per sd)
    # it does not count, at a tenth of a nat it does; the zeroed rows count at neither.
    np.testing.assert_array_equal(model.row_inclusion(), [0, 1, 1, 0, 0, 0, 0, 0, 0, 0])
    np.testing.assert_array_equal(model.row_inclusion(effect=0.1), [1, 1, 1, 0, 0, 0, 0, 0, 0, 0])
    normal = ORLR(prior_scale=0.05).fit(bags, sets)
    assert np.all(np.linalg.norm(normal.coef_[3:], axis=1) > 0)  # an l2 prior shrinks but never zeroes


# -- kernel features ------------------------------------------------------------------------------


def test_rbf_kernel_matches_scikit_learn() -> None:
    rng = np.random.default_rng(0)
    x, z = rng.normal(size=(50, 4)), rng.normal(size=(7, 4))
    np.testing.assert_allclose(rbf_kernel(x, z, 0.3), sk_rbf(x, z, gamma=0.3), rtol=1e-5)
    assert np.allclose(np.diag(rbf_kernel(x, x, 2.0)), 1.0)


def test_the_dictionary_map_is_a_scikit_learn_transformer() -> None:
    """RBFDictionary: the kernel columns of a random subset of the training instances, cloneable."""
    rng = np.random.default_rng(0)
    x = rng.normal(size=(60, 3))
    whole = RBFDictionary(gamma=0.5).fit(x)
    np.testing.assert_allclose(whole.transform(x), sk_rbf(x, x, gamma=0.5), rtol=1e-5)
    part = clone(RBFDictionary(gamma=0.5, n_components=20, random_state=3)).fit(x)
    assert part.dictionary_.shape == (20, 3) and part.transform(x).shape == (60, 20)
    assert {tuple(r) for r in part.dictionary_} <= {tuple(r) for r in x.astype(np.float32)}
    assert RBFDictionary().fit(x).gamma_ == pytest.approx(median_gamma(x))
    with pytest.raises(ValueError, match="n_components=0"):
        RBFDictionary(n_components=0).fit(x)


def test_median_gamma_is_the_median_heuristic() -> None:
    rng = np.random.default_rng(0)
    x = rng.normal(size=(80, 5))
    sq = np.sum((x[:, None] - x[None]) ** 2, axis=-1)[np.triu_indices(80, 1)]
    assert median_gamma(x, max_pairs=200000) == pytest.approx(1 / np.median(sq), rel=0.03)
    with pytest.raises(ValueError, match="identical"):
        median_gamma(np.ones((5, 2)))


def rbf(gamma: float, size: int | None = None):
    """Kernel ORLR's map: standardised features, then their RBF similarities to a dictionary."""
    return make_pipeline(StandardScaler(), RBFDictionary(gamma=gamma, n_components=size, random_state=0))


def _xor_bags(n_bags: int, seed: int):
    """Classes by quadrant parity (XOR) and a disc: no linear model separates them."""
    rng = np.random.default_rng(seed)
    bags, sets, labels = [], [], []
    for _ in range(n_bags):
        n = int(rng.integers(2, 6))
        x = rng.uniform(-1, 1, size=(n, 2))
        y = ((x[:, 0] > 0) ^ (x[:, 1] > 0)).astype(int) + 2 * (np.hypot(*x.T) < 0.35)
        bags.append(np.c_[x, rng.normal(size=(n, 3))])
        sets.append(sorted({int(v) for v in y}))
        labels.append(y)
    return bags, sets, labels


def _accuracy(model: ORLR, bags, labels) -> float:
    return float(np.mean(np.concatenate(model.predict(bags)) == np.concatenate(labels)))


@pytest.fixture(scope="module")
def xor():
    return _xor_bags(150, 0), _xor_bags(100, 1)


def test_kernel_orlr_learns_what_linear_cannot_and_round_trips(xor, tmp_path) -> None:
    (tb, ts, _), (vb, _, vl) = xor
    linear = ORLR(prior_scale=1.0).fit(tb, ts)
    kernel = ORLR(features=rbf(1.0), prior_scale=1.0).fit(tb, ts)
    assert kernel.coef_.shape == (sum(len(x) for x in tb), 4)  # a row per dictionary element
    assert _accuracy(kernel, vb, vl) > 0.8 > _accuracy(linear, vb, vl) + 0.2
    kernel.save(tmp_path / "k")
    back = ORLR.load(tmp_path / "k")
    for a, b in zip(kernel.predict_proba(vb), back.predict_proba(vb)):
        np.testing.assert_array_equal(a, b)
    with pytest.raises(ValueError, match="feature units"):
        kernel.coef_in_feature_units()


def test_kernel_orlr_on_scikit_learn_s_nystroem_round_trips(xor, tmp_path) -> None:
    """Any kernel step works: Nystroem's columns are directions, so rows cannot be pruned."""
    (tb, ts, _), (vb, _, vl) = xor
    nys = make_pipeline(StandardScaler(), Nystroem(gamma=1.0, n_components=60, random_state=0))
    model = ORLR(features=nys, prior_scale=1.0).fit(tb, ts)
    assert model.coef_.shape == (60, 4) and model.kernel_gamma_ == 1.0
    linear = ORLR(prior_scale=1.0).fit(tb, ts)
    assert _accuracy(model, vb, vl) > _accuracy(linear, vb, vl) + 0.05
    back = ORLR.load(model.save(tmp_path / "n"))
    assert isinstance(back.features[-1], Nystroem) and back.features[-1].n_components == 60
    for a, b in zip(model.predict_proba(vb), back.predict_proba(vb)):
        np.testing.assert_array_equal(a, b)
    with pytest.raises(ValueError, match="Nystroem features mix dictionary elements"):
        model.prune_rows()


def test_kernel_l21_drops_dictionary_elements_without_changing_predictions(xor) -> None:
    (tb, ts, _), (vb, _, vl) = xor
    model = ORLR(features=rbf(1.0), prior="l21", prior_scale=3.0).fit(tb, ts)
    n_inst = sum(len(x) for x in tb)
    assert 0 < model.coef_.shape[0] < n_inst  # zero rows pruned after the fit ...
    assert model.n_pruned_rows_ == n_inst - model.coef_.shape[0]
    assert model._kernel().dictionary_.shape[0] == model.coef_.shape[0]  # ... with their elements
    assert _accuracy(model, vb, vl) > 0.7
    # Pruning more rows through prune_rows changes the model only through the rows it drops.
    before = model.predict_proba(vb)
    model.prune_rows(min_inclusion=0.0)  # keeps every row: nothing changes
    for a, b in zip(before, model.predict_proba(vb)):
        np.testing.assert_allclose(a, b, rtol=1e-6)


def test_auto_selection_uses_bag_labels_only_and_picks_the_best_candidate(xor) -> None:
    (tb, ts, tl), _ = xor
    from orlr_ppl.data import MIMLData

    small = dict(features="rbf", cv=2, inference=EM(max_iter=30))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        a = ORLRCV(**small).fit(tb[:60], ts[:60])
        with_labels = MIMLData(tb[:60], ts[:60], n_classes=4, instance_labels=tl[:60])
        b = ORLRCV(**small).fit(with_labels)
    table = a.cv_results_
    assert len(table) == 20
    best = max(table, key=lambda r: r["mean_log_likelihood"])
    assert (a.kernel_gamma_, a.prior_scale_) == (best["gamma"], best["prior_scale"])
    assert [r["mean_log_likelihood"] for r in table] == [r["mean_log_likelihood"] for r in b.cv_results_]


def test_auto_selection_by_ranking_loss_scores_held_out_bag_rankings(xor) -> None:
    (tb, ts, _), _ = xor
    tb, ts = tb[60:120], ts[60:120]  # 60 bags on which the two scores choose differently
    from orlr_ppl.estimators.model_selection import bag_folds
    from orlr_ppl.evaluation.metrics import average_precision, ranking_loss

    small = dict(features="rbf", cv=2, inference=EM(max_iter=30), random_state=0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        by_rank = ORLRCV(**small, scoring="ranking_loss").fit(tb, ts)
        by_ll = ORLRCV(**small).fit(tb, ts)
    table = by_rank.cv_results_
    # The fits are the same whichever score decides; only the choice differs.
    for col in ("mean_log_likelihood", "ranking_loss", "average_precision"):
        assert [r[col] for r in table] == [r[col] for r in by_ll.cv_results_]
    best = min(table, key=lambda r: r["ranking_loss"])  # the first minimum, as the selection
    assert (by_rank.kernel_gamma_, by_rank.prior_scale_) == (best["gamma"], best["prior_scale"])
    # On these data the two scores disagree, so the choice shows which one decided.
    assert (by_ll.kernel_gamma_, by_ll.prior_scale_) != (by_rank.kernel_gamma_, by_rank.prior_scale_)
    # One candidate by hand: the whole map and the model fitted on one fold's raw bags alone (no
    # held-out bag in the scaling), the other fold's classes ranked by max_i p(y_i = c).
    cand = table[6]
    folds = bag_folds(60, 2, 0)
    losses, precisions, likelihoods = [], [], []
    for f in range(2):
        tr, te = folds[1 - f], folds[f]
        ref = ORLR(
            inference=EM(max_iter=30),
            features=make_pipeline(StandardScaler(), RBFDictionary(gamma=cand["gamma"], random_state=0)),
            prior_scale=cand["prior_scale"],
            random_state=0,
            n_classes=4,
        )
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            ref.fit([tb[i] for i in tr], [ts[i] for i in tr])
        assert not np.allclose(ref.feature_map_.steps[0][1].mean_, by_rank.feature_map_.steps[0][1].mean_)
        scores = ref.bag_scores([tb[i] for i in te], rule="max")
        losses.append(ranking_loss([ts[i] for i in te], scores))
        precisions.append(average_precision([ts[i] for i in te], scores))
        # The exact DP on the fold model's instance probabilities (log-softmax logits).
        logp = [np.log(p) for p in ref.predict_proba([tb[i] for i in te])]
        likelihoods.append(np.mean(orlr_ppl.bag_log_likelihood(logp, [ts[i] for i in te])))
    assert cand["ranking_loss"] == pytest.approx(np.mean(losses), abs=1e-6)
    assert cand["average_precision"] == pytest.approx(np.mean(precisions), abs=1e-6)
    assert cand["mean_log_likelihood"] == pytest.approx(np.mean(likelihoods), abs=1e-5)
    assert cand["sd"] == pytest.approx(np.std(losses), abs=1e-6)  # the deciding score's sd


def test_select_by_cv_minimises_a_loss_and_refuses_unknown_scores() -> None:
    from orlr_ppl.estimators.model_selection import select_by_cv

    def score(params, train, test):
        return {
            "mean_log_likelihood": params["a"],
            "ranking_loss": abs(params["a"] - 1.0),
            "average_precision": 0.5,
        }

    grid = [{"a": v} for v in (0.0, 1.0, 2.0, 3.0)]
    assert select_by_cv(score, 8, grid, 2, scoring="ranking_loss").best == {"a": 1.0}
    with pytest.warns(UserWarning, match="edge of its grid"):
        assert select_by_cv(score, 8, grid, 2).best == {"a": 3.0}
    # Ties go to the earlier candidate, the stronger prior.
    assert select_by_cv(score, 8, grid, 2, scoring="average_precision").best == {"a": 0.0}
    with pytest.raises(ValueError, match="scoring='accuracy'"):
        select_by_cv(score, 8, grid, 2, scoring="accuracy")


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"features": "poly"}, "features='poly'"),
        ({"features": "rbf", "scoring": "accuracy"}, "scoring='accuracy': choose one of"),
        ({"features": "rbf", "gammas": [-1.0]}, "gamma=-1.0"),
        ({"prior": "horseshoe"}, "prior='horseshoe'"),
        ({"novel_class": True}, "explicit prior_scale"),
        ({"prior_scales": [0.0]}, "positive scale"),
    ],
)
def test_bad_row_settings_raise(kwargs, match) -> None:
    bags, sets, _ = _xor_bags(10, 0)
    with pytest.raises(ValueError, match=match):
        ORLRCV(**kwargs).fit(bags, sets)


# -- the group horseshoe (NUTS, SVI) --------------------------------------------------------------


def test_horseshoe_start_reproduces_its_weights() -> None:
    rng = np.random.default_rng(0)
    w = rng.normal(size=(6, 2)) * np.array([[2.0], [0.5], [0.01], [1.0], [0.0], [0.3]])
    start = horseshoe_start(w, 3.0)
    back = np.asarray(horseshoe_weights(*(jnp.asarray(start[k]) for k in HORSESHOE_SITES)))
    np.testing.assert_allclose(back, w, rtol=2e-5, atol=1e-7)


def test_horseshoe_has_no_point_estimate() -> None:
    bags, sets, _ = _irrelevant_rows(n_bags=10)
    for method in ("em", "map"):
        with pytest.raises(ValueError, match="no MAP"):
            ORLR(inference=method, prior="group_horseshoe").fit(bags, sets)
    with pytest.raises(ValueError, match="fit ORLR with a prior_scale"):
        ORLRCV(inference="nuts", prior="group_horseshoe").fit(bags, sets)


def test_horseshoe_nuts_converges_and_shrinks_the_irrelevant_rows() -> None:
    bags, sets, _ = _irrelevant_rows(n_bags=60, d_irr=4, c=3)
    model = ORLR(
        inference=NUTS(num_warmup=300, num_samples=400),
        prior="group_horseshoe",
        prior_scale=3.0,
        random_state=0,
    )
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # PSIS-LOO may flag a bag of 60: not a mixing check
        model.fit(bags, sets)
    d = model.diagnostics()
    table = d.table[d.table["sd"] > 0]
    assert table["r_hat"].max() <= 1.01
    assert table["ess_bulk"].min() >= 400 and table["ess_tail"].min() >= 400
    assert d.sampler["n_divergent"] == 0
    assert {"tau", "lam"} <= set(model.posterior_.posterior.data_vars)
    assert any(str(i).startswith("tau") for i in table.index)  # the global scale is checked too
    inclusion = model.row_inclusion()
    assert inclusion[1:3].min() >= 0.95 and inclusion[3:].max() < 0.5  # relevant rows in (nearly) every draw
    norms = np.linalg.norm(model.coef_, axis=1)
    assert norms[3:].max() < 0.3 * norms[1:3].min()


def test_horseshoe_svi_fits_and_names_its_scales() -> None:
    bags, sets, _ = _irrelevant_rows(n_bags=40, d_irr=3, c=3)
    model = ORLR(inference=SVI(num_steps=500), prior="group_horseshoe", prior_scale=3.0, random_state=0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        model.fit(bags, sets)
    post = model.posterior_.posterior
    assert post["lam"].shape[-1] == 6 and np.all(post["tau"].values > 0)
    assert (
        np.isfinite(model.losses_[-100:]).all() and model.losses_[-100:].mean() < model.losses_[:100].mean()
    )
    norms = np.linalg.norm(model.coef_, axis=1)
    assert norms[3:].max() < norms[:3].max()


# -- the command line ------------------------------------------------------------------------------


def test_cli_fits_kernel_l21_models_and_refuses_a_horseshoe_point_fit(tmp_path, capsys) -> None:
    from orlr_ppl.cli import main
    from orlr_ppl.cli.compare import compared_models
    from orlr_ppl.cli.main import build_parser

    out = tmp_path / "k"
    fit = ["fit", "--dataset", "digits", "--n-bags", "30", "--quiet", "--max-iter", "30"]
    assert (
        main(
            [
                *fit,
                "--kernel",
                "rbf",
                "--gamma",
                "0.02",
                "--prior",
                "l21",
                "--prior-scale",
                "3",
                "--out",
                str(out),
            ]
        )
        == 0
    )
    model = ORLR.load(out)
    assert (model.prior, model.kernel_gamma_) == ("l21", 0.02)
    assert model._kernel().dictionary_.shape[0] == model.coef_.shape[0]
    capsys.readouterr()
    assert main(["predict", "--model", str(out), "--dataset", "digits", "--n-bags", "30"]) == 0
    assert capsys.readouterr().out.startswith("bag_id,instance,label,p(0)")
    assert main([*fit, "--prior", "group_horseshoe", "--out", str(tmp_path / "h")]) == 2
    err = capsys.readouterr().err
    assert "no MAP" in err and "Traceback" not in err and len(err.strip().splitlines()) == 1
    evaluate = ["evaluate", "--dataset", "digits", "--methods", "korlr,korlr-l21,mimm"]
    models = {name: make() for name, make in compared_models(build_parser().parse_args(evaluate)).items()}
    assert list(models) == ["K-ORLR", "K-ORLR-l21", "MIMM"]
    assert all(isinstance(m, ORLRCV) for m in list(models.values())[:2])  # width and scale by CV
    assert [(m.features, m.prior, m.gammas, m.scoring) for m in list(models.values())[:2]] == [
        ("rbf", "normal", None, "log_likelihood"),
        ("rbf", "l21", None, "log_likelihood"),
    ]
    ranked = compared_models(build_parser().parse_args([*evaluate, "--cv-scoring", "average_precision"]))
    assert [ranked[k]().scoring for k in ("K-ORLR", "K-ORLR-l21")] == ["average_precision"] * 2
    from orlr_ppl.estimators.model_selection import CV_SCORINGS

    for name in CV_SCORINGS:  # every library score is a CLI choice
        assert build_parser().parse_args([*fit, "--cv-scoring", name]).cv_scoring == name
    assert models["MIMM"].covariance == "full"


@pytest.mark.parametrize(("method", "prior"), [("em", "normal"), ("map", "l21")])
def test_padded_kernel_rows_change_nothing(xor, method, prior, monkeypatch) -> None:
    (tb, ts, _), (vb, _, _) = xor
    settings = EM(max_iter=40, tol=1e-9) if method == "em" else MAP(max_iter=40, tol=1e-9)
    kw = dict(features=rbf(1.0), prior_scale=3.0, inference=settings, prior=prior)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        padded = ORLR(**kw).fit(tb[:50], ts[:50])
        with monkeypatch.context() as m:  # the same fit with no zero rows added
            m.setattr(ORLR, "_pad_rows", lambda self, feats, canonical: (feats, 0))
            tight = ORLR(**kw).fit(tb[:50], ts[:50])
    # 180 dictionary elements pad to 192 zero-feature rows in the canonical fit, cut off after it.
    assert padded.coef_.shape[0] == tight.coef_.shape[0] <= 180
    np.testing.assert_allclose(padded.coef_, tight.coef_, rtol=2e-4, atol=5e-4)  # jax 0.12: 2.2e-4 apart
    assert padded.log_posterior_ == pytest.approx(tight.log_posterior_, rel=1e-5)
    for a, b in zip(padded.predict_proba(vb), tight.predict_proba(vb)):
        # float32: the padded matmuls sum in another order (jax 0.12: up to 1.3e-4 apart)
        np.testing.assert_allclose(a, b, atol=5e-4)


@pytest.mark.parametrize("method", ["nuts", "svi"])
def test_kernel_orlr_samples_with_nuts_and_svi_and_round_trips(xor, method, tmp_path) -> None:
    (tb, ts, _), (vb, _, vl) = xor
    budget = NUTS(num_warmup=60, num_samples=30, num_chains=1) if method == "nuts" else SVI(num_steps=300)
    model = ORLR(inference=budget, features=rbf(1.0, size=24), prior_scale=1.0, random_state=0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # a 30-draw chain misses the R-hat/ESS targets: not checked here
        model.fit(tb[:30], ts[:30])
    assert model.coef_draws_.shape[1:] == (24, 4) and model._kernel().dictionary_.shape == (24, 5)
    assert len(np.unique(model.coef_draws_[:, 0, 0])) > 10  # draws, not one point repeated
    linear = ORLR(prior_scale=1.0).fit(tb[:30], ts[:30])
    assert _accuracy(model, vb, vl) > _accuracy(linear, vb, vl) + 0.1
    model.save(tmp_path / method)
    back = ORLR.load(tmp_path / method)
    for a, b in zip(model.predict_proba(vb[:10]), back.predict_proba(vb[:10])):
        np.testing.assert_array_equal(a, b)


def test_a_format_1_nystroem_map_loads_as_a_fitted_nystroem(tmp_path) -> None:
    """A format-1 folder kept the Nystroem step as its dictionary and projection: the loaded step
    maps as those arrays say, and is fitted in scikit-learn's own sense (feature names too)."""
    from sklearn.metrics.pairwise import rbf_kernel

    from orlr_ppl.estimators.persistence import feature_map_of_format_1

    rng = np.random.default_rng(0)
    dictionary, projection = rng.normal(size=(6, 3)), rng.normal(size=(6, 6))
    meta = {"params": {"nystroem": True}, "fitted": {"kernel_gamma_": 0.7}, "n_features": 3}
    values = {"kernel_dictionary_": dictionary, "kernel_projection_": projection}
    kernel = feature_map_of_format_1(meta, values, tmp_path / "params.npz")
    x = rng.normal(size=(4, 3))
    np.testing.assert_allclose(
        kernel.transform(x), rbf_kernel(x, dictionary, gamma=0.7) @ projection.T, rtol=1e-12
    )
    assert len(kernel.get_feature_names_out()) == 6 and kernel.n_features_in_ == 3
