"""NUTS and SVI through the estimator: InferenceData, diagnostics, averaged predictions."""

from __future__ import annotations

import inspect
import warnings

import numpy as np
import pytest
import xarray as xr

from orlr_ppl import EM, MAP, NUTS, ORLR, SVI, MajorityClass
from orlr_ppl.estimators.sim import SIM
from orlr_ppl.evaluation.metrics import CREDIBLE_MASS
from orlr_ppl.evaluation.plots import proba_intervals
from orlr_ppl.inference.checks.diagnostics import (
    ConvergenceWarning,
    Diagnostics,
    PointDiagnostics,
    chain_means,
    convergence_problems,
    convergence_table,
    diagnose,
    next_step,
    warn_if_unconverged,
    warning_message,
)
from orlr_ppl.inference.posterior import arviz_compat as azc
from orlr_ppl.inference.posterior.inference_data import thinned_draws

pytestmark = pytest.mark.arviz


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
    # max_num_samples=0: chains do not go on (the extension has its own test in test_nuts).
    est = ORLR(
        inference=NUTS(num_warmup=150, num_samples=150, num_chains=2, max_num_samples=0), random_state=0
    )
    with warnings.catch_warnings():
        # 2 x 150 draws rarely reach the 400-ESS threshold: expected for a test-sized run.
        warnings.simplefilter("ignore", ConvergenceWarning)
        return est.fit(bags, sets), (bags, sets, labels)


@pytest.fixture(scope="module")
def map_fit(nuts_fit):
    _, (bags, sets, _) = nuts_fit
    with warnings.catch_warnings():
        # With its default max_iter (500 for MAP), L-BFGS converges here: no warning.
        warnings.simplefilter("error", ConvergenceWarning)
        return ORLR(inference="map").fit(bags, sets)


def test_nuts_inference_data_and_diagnostics(nuts_fit):
    est, (bags, sets, labels) = nuts_fit
    idata = est.posterior_
    assert {"posterior", "sample_stats", "log_likelihood"} <= set(azc.groups(idata))
    assert idata.log_likelihood["Y"].shape == (2, 150, 30)
    assert idata.posterior["W"].shape == (2, 150, 2, 3)
    table = azc.summary(azc.group(idata, "unconstrained_posterior"))  # the sampler's own coordinates
    assert {"r_hat", "ess_bulk", "ess_tail"} <= set(table.columns)
    assert table["r_hat"].max() < 1.1  # chains agree on this easy posterior
    assert np.isfinite(azc.loo_estimate(idata)["elpd_loo"])
    # The per-bag log-likelihood matches the exact DP at the posterior draws.
    import orlr_ppl

    w = np.asarray(idata.posterior["W"])[0, 7]
    b = np.asarray(idata.posterior["beta"])[0, 7]
    # The weights act on the features as the estimator standardised them for the fit.
    z = [(x - est.feature_map_.mean_) / est.feature_map_.scale_ for x in bags]
    direct = orlr_ppl.bag_log_likelihood([x @ w + b for x in z], sets)
    np.testing.assert_allclose(np.asarray(idata.log_likelihood["Y"])[0, 7], direct, rtol=1e-4)


def test_posterior_predictions_and_uncertainty(nuts_fit, map_fit):
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
    # Given the bags' label sets, what is left: nothing in a bag of one label, and never more.
    given = est.predict_uncertainty(bags, sets)
    for u, s in zip(given, sets):
        assert np.all(u[:, 1] <= u[:, 0] + 1e-9) and np.all(np.isfinite(u))
        if len(s) == 1:
            np.testing.assert_allclose(u, 0.0, atol=1e-9)
    match = r"predict_uncertainty on an inference='map' fit: .*information is zero"
    with pytest.warns(UserWarning, match=match):
        point = map_fit.predict_uncertainty(bags)
    assert np.all(np.concatenate(point)[:, 1] < 1e-9)


@pytest.mark.parametrize("guide", ["normal", "lowrank"])
def test_svi_minibatch_fit(guide):
    bags, sets, labels = _clusters(seed=1)
    est = ORLR(inference=SVI(guide=guide, num_steps=800, subsample_size=12, num_draws=100), random_state=0)
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
    assert {"observed_data", "posterior_predictive"} <= set(azc.groups(back.posterior_))
    np.testing.assert_array_equal(
        back.posterior_.posterior_predictive["Y"], est.posterior_.posterior_predictive["Y"]
    )
    assert back.diagnostics().table.index.equals(est.diagnostics().table.index)
    # A posterior.nc saved before the predictive groups existed still loads and diagnoses.
    old = est.posterior_
    legacy = {g: azc.group(old, g) for g in ("posterior", "log_likelihood", "sample_stats")}
    legacy["sample_stats"] = legacy["sample_stats"][["diverging", "energy"]]
    azc.to_netcdf(azc.add_groups(azc.from_dict({}), legacy), str(folder / "posterior.nc"))
    legacy = ORLR.load(folder)
    assert "posterior_predictive" not in azc.groups(legacy.posterior_)
    stats = legacy.diagnostics().sampler
    assert stats["mcmc"] and stats["n_at_max_treedepth"] is None and stats["n_bags"] == 30
    (folder / "posterior.nc").unlink()
    with pytest.raises(ValueError, match="posterior.nc is missing"):
        ORLR.load(folder)


# -- convergence diagnostics ---------------------------------------------------


def test_convergence_table_names_and_sampler_summary(nuts_fit):
    est, _ = nuts_fit
    table = convergence_table(est.posterior_)
    assert list(table.columns) == ["mean", "sd", "r_hat", "ess_bulk", "ess_tail"]
    assert list(table.index[:2]) == ["W[0, 0]", "W[0, 1]"] and list(table.index[-3:]) == [
        "beta[0]",
        "beta[1]",
        "beta[2]",
    ]
    assert len(table) == 2 * 3 + 3  # W (d, C) and beta (C): never the raw sites
    named = convergence_table(est.posterior_, class_names=["a", "b", "j"], feature_names=["x-box", "y"])
    assert "W[x-box, j]" in named.index and "beta[j]" in named.index
    np.testing.assert_allclose(named.to_numpy(), table.to_numpy())
    with pytest.raises(ValueError, match="2 class names but the posterior has 3"):
        convergence_table(est.posterior_, class_names=["a", "b"])
    # Each chain's mean, on the table's own row labels: W row-major over (feature, class), then beta.
    means = chain_means(est.posterior_, class_names=["a", "b", "j"], feature_names=["x-box", "y"])
    assert list(means.index) == list(named.index) and list(means.columns) == [0, 1]
    post = est.posterior_.posterior
    by_chain = np.concatenate(
        [np.asarray(post["W"]).mean(1).reshape(2, -1), np.asarray(post["beta"]).mean(1)], axis=1
    )
    np.testing.assert_allclose(means.to_numpy(), by_chain.T, rtol=1e-6)
    np.testing.assert_allclose(means.mean(axis=1), table["mean"], rtol=1e-5, atol=1e-7)  # equal chains
    diag = est.diagnostics()
    assert isinstance(diag, Diagnostics) and diag is est.diagnostics()  # computed once, at fit
    assert diag.converged == (diag.problems == [])
    s = diag.sampler
    assert (s["n_chains"], s["n_draws"], s["mcmc"]) == (2, 150, True)
    assert s["n_divergent"] >= 0 and len(s["bfmi"]) == 2 and 0.0 <= s["loo_high_k_share"] <= 1.0
    lines = diag.summary_lines()
    assert lines[0].startswith("NUTS: 2 chains x 150 draws") and lines[-1].startswith("verdict: ")
    # How the chains ran (this process has a CPU device per chain: conftest).
    assert s["chain_method"] == "parallel" and ", in parallel (one device each), " in lines[0]


def _tampered(idata):
    """A copy with one divergence, two transitions at the tree-depth cap, and chain 1 of W shifted."""
    bad = azc.copy(idata)
    bad.sample_stats["diverging"].values[0, 3] = True
    depth = np.full(bad.sample_stats["diverging"].shape, 3)
    depth[1, :2] = 10
    bad.sample_stats["tree_depth"] = xr.DataArray(depth, dims=("chain", "draw"))
    bad.sample_stats.attrs["max_tree_depth"] = 10
    bad.posterior["W"].values[1] += 3.0
    return bad


def test_problems_name_the_failed_checks_and_worst_parameters(nuts_fit):
    est, _ = nuts_fit
    bad = _tampered(est.posterior_)
    with pytest.warns(ConvergenceWarning, match=r"not yet to be trusted: R-hat up to \d\.\d{3} \(W\[") as rec:
        diag = warn_if_unconverged(bad)
    # One short paragraph: each failure in a few words, then the one thing to try first.
    message = str(rec[0].message)
    assert len(rec) == 1 and message.endswith("ORLR.diagnostics() reports every check in full.")
    worst = diag.table["r_hat"].idxmax()
    assert f"R-hat up to {diag.table.loc[worst, 'r_hat']:.3f} ({worst}) against 1.01" in message
    assert "; 1 divergent transition; 2 transitions at the tree-depth cap" in message
    assert "Next: refit with a target acceptance above this fit's 0.80" in message  # divergences first
    assert len(message) < 450 and "\n" not in message
    text = " | ".join(diag.problems)
    n_div = int(bad.sample_stats["diverging"].sum())
    assert (
        f"{n_div} divergent transition{'' if n_div == 1 else 's'} ({100 * n_div / 300:.1f}% of 300 draws)"
        in text
    )
    assert "2 transitions (0.7%) hit the maximum tree depth 10" in text
    # The divergence sentence offers the remedy from the fit's own target acceptance (0.8 here).
    assert diag.sampler["target_accept_prob"] == pytest.approx(0.8)
    assert "above this fit's 0.80 (NUTS(target_accept=...), e.g. 0.95)" in text
    for target, says in ((0.97, "e.g. 0.99"), (0.99, "already high: reparametrise")):
        bad.sample_stats.attrs["target_accept_prob"] = target
        assert says in " | ".join(diagnose(bad).problems)
    del bad.sample_stats.attrs["target_accept_prob"]  # saved by an older version: no remedy, no error
    assert "target acceptance" not in " | ".join(diagnose(bad).problems)
    assert not diag.converged and diag.sampler["n_at_max_treedepth"] == 2
    rhat = next(p for p in diag.problems if p.startswith("R-hat"))
    named, spread = rhat.split("; chain means of ")
    assert named.count("W[") == 5 and named.endswith(", …")  # 5 worst named, the 6th elided
    # ... then the worst one's mean in each chain beside its sd: chain 1 sits 3 above chain 0.
    worst = diag.table["r_hat"].idxmax()
    shift = diag.chain_means.loc[worst, 1] - diag.chain_means.loc[worst, 0]
    before = chain_means(est.posterior_).loc[worst]
    np.testing.assert_allclose(shift, 3.0 + before[1] - before[0], rtol=1e-5)
    first, second = diag.chain_means.loc[worst]
    sd = diag.table.loc[worst, "sd"]
    assert spread == f"{worst}: {first:.3g}, {second:.3g} against a posterior sd of {sd:.3g})"
    # An SVI-like fit (independent draws, no sample_stats): only the PSIS-LOO check applies.
    svi_stats = {**diagnose(bad).sampler, "mcmc": False, "n_high_pareto_k": 0}
    assert convergence_problems(diag.table, svi_stats) == []


def test_a_loo_check_that_cannot_run_is_a_problem_not_a_pass(nuts_fit, monkeypatch):
    """ArviZ failing on the k-hats must not make a fit look converged (it is SVI's and Laplace's
    only check of the bags' influence)."""
    est, _ = nuts_fit
    assert diagnose(est.posterior_).sampler["loo_error"] is None

    def broken(idata):
        raise ValueError("shapes do not match")

    monkeypatch.setattr(azc, "pareto_k", broken)
    diag = diagnose(est.posterior_)
    assert not diag.converged
    assert any("could not be computed (ValueError: shapes do not match)" in p for p in diag.problems)
    assert "PSIS-LOO: not computed (ValueError: shapes do not match)" in diag.summary_lines()
    assert "PSIS-LOO's k̂ could not be computed" in warning_message(diag)


def test_a_pass_after_extending_the_chains_says_it_favours_passing(nuts_fit):
    """Chains that went on until the checks passed: the verdict says the stop favours a pass."""
    est, _ = nuts_fit
    diag = est.diagnostics()
    fixed = diag._replace(sampler={**diag.sampler, "n_draws_planned": None}, problems=[], converged=True)
    assert fixed.summary_lines()[-1] == "verdict: converged"
    ran_on = fixed._replace(sampler={**fixed.sampler, "n_draws_planned": fixed.sampler["n_draws"] // 2})
    verdict = ran_on.summary_lines()[-1]
    assert verdict.startswith("verdict: converged, after going on from") and "favours a pass" in verdict


def test_the_warning_names_one_next_step_for_each_kind_of_failure(nuts_fit):
    """Mixing passes here; each sampler statistic is set to fail alone, and the advice follows it."""
    est, _ = nuts_fit
    diag = diagnose(est.posterior_)
    table = diag.table.assign(r_hat=1.0, ess_bulk=1e4, ess_tail=1e4)
    fine = {"n_divergent": 0, "n_at_max_treedepth": 0, "bfmi": [1.0, 1.0], "n_high_pareto_k": 0}
    base = diag._replace(table=table, sampler={**diag.sampler, **fine, "n_draws": 1000})

    def advice(**sampler):
        return next_step(base._replace(sampler={**base.sampler, **sampler}))

    assert "dense_mass=True" in advice(n_at_max_treedepth=3)
    assert advice(bfmi=[0.2, 1.0]).startswith("lengthen warmup")
    assert advice(n_high_pareto_k=2, loo_high_k_share=0.1).startswith("the flagged bags pull strongly")
    assert advice(mcmc=False, n_high_pareto_k=2).startswith("fit the guide longer")
    assert advice(mcmc=False, approximation_k=0.9).startswith("fit the guide longer")
    # Far from the posterior (k-hat above 1, the README example's 5.2): straight to NUTS.
    assert advice(mcmc=False, approximation_k=5.22).startswith("sample the posterior with inference='nuts'")
    assert advice(interrupted=True, n_divergent=3) == "run the fit again and let it finish"
    # Slow mixing: more draws; after a long run the caller's note comes first.
    slow = base._replace(table=diag.table.assign(r_hat=1.2))
    assert next_step(slow).startswith("run more chains or longer ones (NUTS(num_chains=4, num_samples=2000))")
    assert next_step(slow._replace(note="drop feature 3")) == "drop feature 3"
    message = warning_message(base._replace(sampler={**base.sampler, "n_at_max_treedepth": 3}))
    assert message.startswith(
        "the NUTS posterior is not yet to be trusted: 3 transitions at the tree-depth cap."
    )
    # Chains that passed every MCMC check are not called untrustworthy for PSIS-LOO's sake alone.
    loo = {"n_high_pareto_k": 2, "loo_high_k_share": 0.1}
    assert warning_message(base._replace(sampler={**base.sampler, **loo})).startswith(
        "the NUTS chains converged, but PSIS-LOO is not to be trusted: Pareto k̂ above 0.7 for 10.0% of bags"
    )
    both = base._replace(sampler={**base.sampler, **loo, "n_at_max_treedepth": 3})
    assert warning_message(both).startswith("the NUTS posterior is not yet to be trusted: 3 transitions")
    svi = base._replace(sampler={**base.sampler, **loo, "mcmc": False})
    assert warning_message(svi).startswith("the SVI posterior is not yet to be trusted: Pareto k̂")


def test_unconverged_nuts_fit_warns():
    rng = np.random.default_rng(0)
    centres = np.array([[3.0, 0.0], [-1.5, 2.6], [-1.5, -2.6]])
    y = rng.integers(0, 3, size=8)
    bags = [centres[[k, k]] + rng.normal(size=(2, 2)) for k in y]  # one label per bag: one DP bucket
    est = ORLR(inference=NUTS(num_warmup=5, num_samples=20, num_chains=1), random_state=0)
    with pytest.warns(
        ConvergenceWarning, match=r"one chain, so R-hat cannot .*bulk ESS down to \d+ \((W|beta)\["
    ) as rec:
        est.fit(bags, [[k] for k in y])
    next_line = "Next: run more chains or longer ones (NUTS(num_chains=4, num_samples=1000))."
    assert next_line in str(rec[0].message)
    assert any(
        p.startswith("bulk ESS below 400 for 9 parameters (worst: ") for p in est.diagnostics().problems
    )
    assert not est.diagnostics().converged
    assert any("at least 2 chains" in p for p in est.diagnostics().problems)
    shown = str(est.diagnostics())
    assert shown.startswith("NUTS: 1 chain x 40 draws (extended from 20") and "verdict: NOT conv" in shown
    assert all(f"- {p}" in shown for p in est.diagnostics().problems) and "Diagnostics(" not in shown


def test_em_and_map_that_stop_early_warn(nuts_fit, map_fit):
    _, (bags, sets, _) = nuts_fit
    with pytest.warns(
        ConvergenceWarning,
        match=r"^EM stopped after 1 iteration short of an optimum: the log posterior's gradient is up to "
        r"[0-9.e+-]+, above tol=0.001; EM converges at the rate",
    ):
        em = ORLR(inference=EM(max_iter=1)).fit(bags, sets)
    diag = em.diagnostics()
    assert isinstance(diag, PointDiagnostics) and not diag.converged and diag.optimality > 1e-3
    assert em.optimality_ == diag.optimality
    assert diag.summary_lines() == [
        f"EM: 1 iteration (max_iter=1), gradient up to {diag.optimality:.2g} [<= tol=0.001]; NOT converged"
    ]
    # print() shows the summary and the problem, not a NamedTuple's repr.
    assert str(diag) == f"{diag.summary_lines()[0]}\n- {diag.problems[0]}"
    with pytest.warns(
        ConvergenceWarning, match=r"^MAP \(L-BFGS\) stopped after 1 iteration .*raise max_iter"
    ):
        ORLR(inference=MAP(max_iter=1)).fit(bags, sets)
    # The fixture's MAP fit (default max_iter) converged: no problem, and no warning was issued for it.
    assert map_fit.converged_ and map_fit.diagnostics().problems == []
    assert map_fit.get_params()["inference"] == "map" and map_fit.diagnostics().max_iter == MAP.max_iter
    assert map_fit.diagnostics().summary_lines()[0].endswith("; converged")


# -- intervals and bag scores --------------------------------------------------


def test_predict_interval_brackets_the_mean(nuts_fit, map_fit):
    est, (bags, sets, _) = nuts_fit
    for given in (None, sets):
        intervals, mean = est.predict_interval(bags, 0.9, given), est.predict_proba(bags, given)
        for iv, p, x in zip(intervals, mean, bags):
            assert iv.shape == (len(x), 3, 2)
            lo, hi = iv[..., 0], iv[..., 1]
            assert np.all(lo <= hi) and np.all(lo >= 0) and np.all(hi <= 1)
            # A mean may leave an equal-tailed interval of a skewed distribution (a few
            # draws of 1e-5 beside most of 1e-12), but not by a material amount.
            assert np.all(lo - 1e-3 <= p) and np.all(p <= hi + 1e-3)
    # Uncertain weights give intervals of non-zero width somewhere.
    assert max(np.ptp(iv, axis=-1).max() for iv in est.predict_interval(bags)) > 0.01
    for given in (None, sets):
        with pytest.warns(UserWarning, match=r"predict_interval on an inference='map' fit: .*zero width"):
            point = map_fit.predict_interval(bags, label_sets=given)
        for iv, p in zip(point, map_fit.predict_proba(bags, given)):
            np.testing.assert_array_equal(iv[..., 0], iv[..., 1])
            np.testing.assert_allclose(iv[..., 0], p, atol=1e-6)
    # One default mass everywhere: the estimator's intervals and the plots' agree.
    assert inspect.signature(est.predict_interval).parameters["prob"].default == CREDIBLE_MASS
    assert inspect.signature(proba_intervals).parameters["mass"].default == CREDIBLE_MASS
    with pytest.raises(ValueError, match="prob=1.5"):
        est.predict_interval(bags, prob=1.5)


def test_bag_scores_model_rule(nuts_fit, map_fit):
    est, (bags, sets, labels) = nuts_fit
    tiny = bags[:3]
    w, b = est.coef_draws_, est.intercept_draws_  # on the features as the fit standardised them
    scaled = [(x - est.feature_map_.mean_) / est.feature_map_.scale_ for x in tiny]
    brute = np.zeros((3, 3))
    for s in range(len(w)):
        for k, x in enumerate(scaled):
            none = np.ones(3)
            for xi in x:
                z = xi @ w[s] + b[s]
                none *= 1.0 - np.exp(z - z.max()) / np.exp(z - z.max()).sum()
            brute[k] += (1.0 - none) / len(w)
    np.testing.assert_allclose(est.bag_scores(tiny, rule="model"), brute, rtol=1e-6, atol=1e-9)
    # 1 - prod(1 - p) >= max p, bag by bag, for the point estimate.
    assert np.all(map_fit.bag_scores(bags, rule="model") >= map_fit.bag_scores(bags) - 1e-12)
    np.testing.assert_array_equal(map_fit.bag_scores(bags, rule="max"), map_fit.bag_scores(bags))
    majority = MajorityClass().fit(bags, labels)
    n_b = np.array([len(x) for x in bags])[:, None]
    np.testing.assert_allclose(
        majority.bag_scores(bags, rule="model"), 1 - (1 - majority.class_prior_) ** n_b, rtol=1e-10
    )
    with pytest.raises(ValueError, match=r"rule='mean': choose one of \('max', 'model'\)"):
        est.bag_scores(bags, rule="mean")
    with pytest.raises(ValueError, match="use rule='max' for SIM"):
        SIM().bag_scores(bags, rule="model")


# -- posterior predictive ------------------------------------------------------


def test_posterior_predictive_label_sets(nuts_fit):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    est, (bags, sets, _) = nuts_fit
    idata = est.posterior_
    obs, ppc = idata.observed_data, idata.posterior_predictive
    assert obs["Y"].dims == ("bag", "class") and obs["Y"].shape == (30, 3)
    assert ppc["Y"].dims == ("chain", "draw", "bag", "class") and ppc["Y"].shape == (2, 150, 30, 3)
    assert ppc["n_labels"].dims == ("chain", "draw", "bag")
    for b, s in enumerate(sets):
        assert np.flatnonzero(obs["Y"].values[b]).tolist() == list(s)
    np.testing.assert_array_equal(obs["n_labels"], [len(s) for s in sets])
    sim = ppc["Y"].values
    assert set(np.unique(sim)) <= {0, 1}
    np.testing.assert_array_equal(ppc["n_labels"].values, sim.sum(axis=-1))
    cap = np.minimum([len(x) for x in bags], 3)
    assert np.all(ppc["n_labels"].values >= 1) and np.all(ppc["n_labels"].values <= cap)
    drawn = azc.plot_ppc(idata, var_names=["n_labels"], num_samples=20, random_seed=0)
    assert drawn is not None and plt.get_fignums()
    plt.close("all")
    kept = thinned_draws(1000, 200)
    assert len(kept) == 200 and kept[0] == 0 and kept[-1] == 999 and np.all(np.diff(kept) > 0)


def test_a_posterior_names_bags_by_their_ids(tmp_path):
    """Fitted from a ``MIMLData``, the per-bag values (and so PSIS-LOO's worst bags) carry the bag ids."""
    from orlr_ppl import MIMLData

    bags, sets, labels = _clusters()
    ids = [f"rec-{i:02d}" for i in range(len(bags))]
    data = MIMLData(bags=bags, label_sets=sets, instance_labels=labels, n_classes=3, bag_ids=ids)
    est = ORLR(inference=NUTS(num_warmup=20, num_samples=20, num_chains=2, max_num_samples=0), prune=0.1)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)  # 20 draws: no more than a test of names
        est.fit(data)
    kept = [b for i, b in enumerate(ids) if i not in set(est.pruned_bags_)]
    assert len(kept) < len(ids)  # pruning left bags out, and the names still line up
    assert [str(b) for b in est.posterior_.log_likelihood["bag"].values] == kept
    worst = est.diagnostics().sampler["worst_pareto_k"]
    assert worst and all(name in kept for name, _ in worst)
    loaded = ORLR.load(est.save(tmp_path / "m"))  # the names survive the netCDF file
    assert [str(b) for b in loaded.posterior_.log_likelihood["bag"].values] == kept


def test_chains_start_at_a_first_order_optimum_from_float32_data():
    """The NUTS and SVI start is the MAP found in float64: on float32 data L-BFGS's line search
    stalls where round-off hides the last rises (largest gradient 9e-3 on these bags), short of
    ``MAP.tol``, and the chains' jitter and a whitening are measured from this point."""
    import jax

    from orlr_ppl.datasets import make_miml_digits
    from orlr_ppl.inference.point.map import sampler_start
    from orlr_ppl.model.log_density import potential_and_grad_on_host, prior_scales
    from orlr_ppl.model.model_data import make_model_data, split_model_data

    ds = make_miml_digits(100, max_size=4, seed=0)
    pixels = np.concatenate(ds.bags)
    xs = [(b - pixels.mean(0)) / (pixels.std(0) + 1e-3) for b in ds.bags]
    data = make_model_data([x.astype(np.float32) for x in xs], ds.label_sets, n_classes=10)
    start = sampler_start(data, 1.0, 10.0, True)
    with jax.enable_x64(True):
        wide = make_model_data(xs, ds.label_sets, n_classes=10, dtype=np.float64)
        arrays, shape = split_model_data(wide)
        params = {k: np.asarray(v, np.float64) for k, v in start.items()}
        _, grad = potential_and_grad_on_host(params, arrays, prior_scales(1.0, 10.0, np.float64), shape, True)
    assert max(float(np.abs(g).max()) for g in jax.tree_util.tree_leaves(grad)) <= MAP.tol


def _posterior_stuck_on_feature(stuck: int, n_features: int = 2, n_classes: int = 3):
    """A NUTS-shaped posterior of 4 chains x 500 iid draws, except ``W[stuck, :]``, whose chains sit
    apart (R-hat far above 1.01): the signature of a weight the chains cannot agree on."""
    rng = np.random.default_rng(0)
    w = rng.normal(size=(4, 500, n_features, n_classes))
    w[:, :, stuck] = 0.01 * w[:, :, stuck] + np.arange(4)[:, None, None]
    beta = rng.normal(size=(4, 500, n_classes))
    return azc.from_dict(
        {
            "posterior": {"W": w, "beta": beta},
            "sample_stats": {"diverging": np.zeros((4, 500), bool)},
            "log_likelihood": {"Y": -0.1 + 0.01 * rng.normal(size=(4, 500, 10))},
        },
        dims={"W": ["feature", "class"], "beta": ["class"], "Y": ["bag"]},
    )


@pytest.mark.arviz
def test_weights_on_a_constant_feature_are_left_out_of_the_convergence_checks(tmp_path):
    """A feature constant in the training data leaves its weights at the prior: their mixing says
    nothing of the fit's, so the checks skip them and the report and warning say so."""
    idata = _posterior_stuck_on_feature(1)
    judged = diagnose(idata)
    assert not judged.converged and "W[1, " in judged.problems[0] and not judged.unchecked
    skipped = diagnose(idata, constant_features=["1"])
    assert skipped.converged and skipped.unchecked == ("W[1, 0]", "W[1, 1]", "W[1, 2]")
    assert len(skipped.table) == len(judged.table)  # the rows are still reported
    assert "6 parameters checked (3 on constant features not)" in skipped.summary()
    # Another feature's constancy does not hide this one's failure.
    assert not diagnose(idata, constant_features=["0"]).converged
    # The estimator finds the constant feature in its training data, and keeps it across a save.
    rng = np.random.default_rng(1)
    bags, sets, _ = _clusters()
    bags = [np.column_stack([x, np.full(len(x), 5.0), rng.normal(size=len(x))]) for x in bags]
    est = ORLR(inference=NUTS(num_warmup=20, num_samples=20, num_chains=2, progress_bar=False))
    with pytest.warns(ConvergenceWarning, match="The 3 weights on features constant in the training data"):
        est.fit(bags, sets)
    assert est.constant_features_ == ["2"]
    assert est.diagnostics().unchecked == tuple(f"W[2, {c}]" for c in range(3))
    est.save(tmp_path / "m")
    assert ORLR.load(tmp_path / "m").diagnostics().unchecked == est.diagnostics().unchecked
    import json

    meta_file = tmp_path / "m" / "metadata.json"
    meta = json.loads(meta_file.read_text())
    meta["fitted"]["constant_features_"] = "2"
    meta_file.write_text(json.dumps(meta))
    with pytest.raises(ValueError, match=r"'fitted' holds constant_features_ '2'; expected a list"):
        ORLR.load(tmp_path / "m")
