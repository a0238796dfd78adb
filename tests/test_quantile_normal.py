"""The quantile-normal feature map (``standardize="quantile-normal"``): scikit-learn's transform, saved.

The map against scikit-learn's ``QuantileTransformer`` (the reference), its rank-only dependence on
the training features and its treatment of a spike; then the estimators that take it: the same fit
as on features mapped by scikit-learn, identical predictions after save/load, damaged folders
refused, no raw-unit weights, and the command line.
"""

from __future__ import annotations

import json
import warnings
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy import stats
from sklearn.base import clone
from sklearn.preprocessing import QuantileTransformer

from orlr_ppl import EM, MAP, MIMM, NUTS, ORLR, SIM, MajorityClass, SoftmaxRegression
from orlr_ppl.cli import main
from orlr_ppl.data.datasets import load_hja, make_miml_digits
from orlr_ppl.data.hja import HJA_FILES
from orlr_ppl.data.quantile_normal import HEAVY_TAIL_Z, extreme_z, fit_quantiles, quantile_normal
from orlr_ppl.estimators.base import _BagClassifier
from orlr_ppl.estimators.feature_map import heavy_tail_note, heavy_tailed_features
from orlr_ppl.inference.diagnostics import ConvergenceWarning, warning_message

QN = "quantile-normal"
HJA = Path(__file__).resolve().parents[2] / "shared" / "data" / "hja"


def sklearn_map(train: np.ndarray, n_quantiles: int = 1000) -> QuantileTransformer:
    q = min(n_quantiles, len(train))
    return QuantileTransformer(output_distribution="normal", n_quantiles=q, random_state=0).fit(train)


# -- the map ---------------------------------------------------------------------------------


@st.composite
def features(draw):
    """(n, d) training features with ties and spikes, and new instances partly outside their range."""
    n = draw(st.integers(2, 120))
    d = draw(st.integers(1, 3))
    seed = draw(st.integers(0, 2**32 - 1))
    rng = np.random.default_rng(seed)
    x = rng.standard_t(2, size=(n, d)) * 10.0 ** rng.integers(-3, 4, d)
    x[rng.random((n, d)) < draw(st.sampled_from([0.0, 0.2, 0.6]))] = 0.0  # a spike, as HJA's x6
    if draw(st.booleans()):
        x = np.round(x)  # many ties
    new = np.concatenate(
        [x[: n // 2] + rng.normal(size=(n // 2, d)), (x.min(0) - 1 - 3 * np.ptp(x, axis=0))[None]]
    )
    return x, np.concatenate([new, x.max(0)[None] + 1e6])


@settings(max_examples=60, deadline=None)
@given(features(), st.sampled_from([2, 7, 1000]))
def test_the_map_is_scikit_learns_quantile_transformer(data, n_quantiles):
    train, new = data
    reference = sklearn_map(train, n_quantiles)
    quantiles = fit_quantiles(train, n_quantiles)
    np.testing.assert_array_equal(quantiles, np.maximum.accumulate(reference.quantiles_, axis=0))
    for x in (train, new):
        np.testing.assert_allclose(quantile_normal(x, quantiles), reference.transform(x), rtol=0, atol=1e-12)


def test_the_map_agrees_bit_for_bit_on_hja_features():
    if not all((HJA / name).is_file() for name in HJA_FILES.values()):
        pytest.skip(f"the published HJA birdsong files are not in {HJA}")
    x = np.concatenate(load_hja(HJA, "union", "labelled").bags)
    train, new = x[:3000], x[3000:]
    reference = sklearn_map(train)
    quantiles = fit_quantiles(train)
    np.testing.assert_array_equal(quantiles, reference.quantiles_)
    for y in (train, new, 5.0 * new):
        np.testing.assert_array_equal(quantile_normal(y, quantiles), reference.transform(y))


def test_training_scores_depend_on_the_ranks_alone():
    rng = np.random.default_rng(0)
    x = rng.normal(size=(300, 2))
    # With no more instances than levels, every training instance is a quantile: only its rank counts.
    a = quantile_normal(x, fit_quantiles(x))
    b = quantile_normal(np.exp(3 * x), fit_quantiles(np.exp(3 * x)))
    np.testing.assert_allclose(a, b, atol=1e-9)
    ranks = (np.argsort(np.argsort(x, axis=0), axis=0) + 0.0) / (len(x) - 1)
    inner = (ranks > 0) & (ranks < 1)  # the two ends go to the clip at -5.2 and 5.2
    np.testing.assert_allclose(a[inner], stats.norm.ppf(ranks[inner]), atol=1e-9)
    assert np.allclose(a[~inner], np.sign(ranks[~inner] - 0.5) * 5.199, atol=1e-3)


def test_a_spike_goes_to_the_middle_of_its_levels_and_extremes_stay_finite():
    rng = np.random.default_rng(1)
    tail = rng.lognormal(size=400)
    x = np.concatenate([-tail, np.zeros(200), tail])[:, None]  # a fifth exactly 0, inside the range
    q = fit_quantiles(x)
    z = quantile_normal(x, q)
    # The zeros are order statistics 400 to 599 of 1,000, levels 400/999 to 599/999: middle 1/2.
    np.testing.assert_array_equal(z[x[:, 0] == 0], 0.0)
    # At an end of the training range a spike goes to the clip instead, as scikit-learn's does
    # (HJA union's x8 holds a quarter of its values at its minimum 0).
    at_min = np.concatenate([np.zeros(200), tail])[:, None]
    assert np.all(quantile_normal(at_min, fit_quantiles(at_min))[:200] < -5.19)
    out = quantile_normal(np.array([[-1e300], [1e300], [np.nextafter(0.0, 1.0)]]), q)
    assert np.all(np.isfinite(out)) and out[0, 0] < -5.19 and out[1, 0] > 5.19
    assert out[2, 0] == pytest.approx(stats.norm.ppf(599 / 999), abs=1e-9)  # just above: the spike's top
    with pytest.raises(ValueError, match="at least 2 training instances"):
        fit_quantiles(x[:1])


# -- the estimators that take it -------------------------------------------------------------


@pytest.fixture(scope="module")
def digits():
    return make_miml_digits(80, seed=5, split="train", max_size=4), make_miml_digits(
        30, seed=6, split="test", max_size=4
    )


def quiet_fit(est, train):
    targets = train.label_sets if isinstance(est, (ORLR, SIM, MIMM)) else train.instance_labels
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        return est.fit(train.bags, targets)


def small(cls, **kw):
    if cls is ORLR:
        return ORLR(inference=EM(max_iter=15), **kw)
    if cls is SIM:
        return SIM(lam=1e-6, n_outer=2, n_inner=10, **kw)
    if cls is MIMM:
        return MIMM(covariance="diag", max_iter=15, **kw)
    return cls(**kw)


@pytest.mark.parametrize("method", ["em", "map"])
def test_orlr_fits_what_it_would_on_features_mapped_by_scikit_learn(digits, method):
    train, test = digits
    reference = sklearn_map(np.concatenate(train.bags))
    mapped = train.__class__([reference.transform(x) for x in train.bags], train.label_sets)
    settings = EM(max_iter=15) if method == "em" else MAP(max_iter=15)
    ours = quiet_fit(ORLR(inference=settings, standardize=QN), train)
    theirs = quiet_fit(ORLR(inference=settings), mapped)
    np.testing.assert_array_equal(np.asarray(ours.coef_), np.asarray(theirs.coef_))
    for p, q in zip(
        ours.predict_proba(test.bags), theirs.predict_proba([reference.transform(x) for x in test.bags])
    ):
        np.testing.assert_array_equal(p, q)
    # Nothing of the test bags enters the map: it is the training instances' quantiles.
    np.testing.assert_array_equal(ours.feature_quantiles_, reference.quantiles_)


@pytest.mark.parametrize("cls", [ORLR, SIM, SoftmaxRegression, MajorityClass, MIMM])
def test_the_map_is_saved_and_gives_identical_predictions(cls, digits, tmp_path):
    train, test = digits
    est = quiet_fit(small(cls, standardize=QN), train)
    assert clone(est).get_params()["standardize"] == QN
    with np.load(est.save(tmp_path / "m") / "params.npz") as arrays:
        np.testing.assert_array_equal(arrays["feature_quantiles_"], est.feature_quantiles_)
    back = _BagClassifier.load(tmp_path / "m")
    assert back.get_params() == est.get_params()
    for p, q in zip(est.predict_proba(test.bags), back.predict_proba(test.bags)):
        np.testing.assert_array_equal(p, q)
    for p, q in zip(est.predict(test.bags, test.label_sets), back.predict(test.bags, test.label_sets)):
        np.testing.assert_array_equal(p, q)


def test_the_map_changes_the_model(digits):
    train, test = digits
    plain = quiet_fit(small(ORLR), train)
    mapped = quiet_fit(small(ORLR, standardize=QN), train)
    assert not hasattr(plain, "feature_quantiles_")
    assert not np.allclose(np.asarray(plain.coef_), np.asarray(mapped.coef_), atol=1e-3)
    # A refit with standardize=True forgets the quantiles: predictions are the plain model's again.
    refit = quiet_fit(mapped.set_params(standardize=True), train)
    assert not hasattr(refit, "feature_quantiles_")
    np.testing.assert_array_equal(np.asarray(refit.coef_), np.asarray(plain.coef_))


def test_damaged_folders_and_bad_values_are_refused(digits, tmp_path):
    train, _ = digits
    est = quiet_fit(small(ORLR, standardize=QN), train)
    folder = est.save(tmp_path / "m")
    with np.load(folder / "params.npz") as arrays:
        saved = {k: arrays[k] for k in arrays.files}

    def write(**arrays):
        np.savez(folder / "params.npz", **arrays)

    write(**{k: v for k, v in saved.items() if k != "feature_quantiles_"})
    with pytest.raises(
        ValueError, match=r"params.npz has no feature_quantiles_.*standardize='quantile-normal'"
    ):
        ORLR.load(folder)
    write(**{**saved, "feature_quantiles_": saved["feature_quantiles_"][::-1]})
    with pytest.raises(ValueError, match=r"params.npz: feature_quantiles_ is not finite and non-decreasing"):
        ORLR.load(folder)
    write(**{**saved, "feature_quantiles_": saved["feature_quantiles_"][:, :5]})
    with pytest.raises(ValueError, match=r"feature_quantiles_ has shape \(\d+, 5\), not \(Q >= 2, 64\)"):
        ORLR.load(folder)
    write(**saved)
    meta = json.loads((folder / "metadata.json").read_text())
    meta["params"]["standardize"] = True
    (folder / "metadata.json").write_text(json.dumps(meta))
    with pytest.raises(
        ValueError, match=r"params.npz has feature_quantiles_, but metadata.json says standardize=True"
    ):
        ORLR.load(folder)
    with pytest.raises(ValueError, match=r"standardize='z'.*True.*False.*'quantile-normal'"):
        quiet_fit(small(ORLR, standardize="z"), train)


def test_raw_unit_parameters_are_refused_under_the_map(digits):
    train, _ = digits
    for est, call in [
        (quiet_fit(small(ORLR, standardize=QN), train), "coef_in_feature_units"),
        (quiet_fit(small(SoftmaxRegression, standardize=QN), train), "coef_in_feature_units"),
        (quiet_fit(small(MIMM, standardize=QN), train), "in_feature_units"),
    ]:
        with pytest.raises(ValueError, match="nonlinear map"):
            getattr(est, call)()


def test_the_command_line_fits_saves_and_predicts_with_the_map(tmp_path, capsys):
    from test_cli import _write_npz

    _write_npz(tmp_path / "train.npz", make_miml_digits(40, seed=0, split="train", max_size=4))
    model = tmp_path / "model"
    argv = ["fit", "--data", str(tmp_path / "train.npz"), "--method", "map", "--max-iter", "30"]
    assert main([*argv, "--standardize", QN, "--out", str(model), "--quiet"]) == 0
    assert json.loads((model / "metadata.json").read_text())["params"]["standardize"] == QN
    capsys.readouterr()
    assert main(["predict", "--model", str(model), "--data", str(tmp_path / "train.npz")]) == 0
    assert capsys.readouterr().out.startswith("bag_id,instance,label,")
    assert main([*argv, "--standardize", "none", "--out", str(tmp_path / "raw"), "--quiet"]) == 0
    assert json.loads((tmp_path / "raw" / "metadata.json").read_text())["params"]["standardize"] is False


# -- the convergence warning points at heavy-tailed features ---------------------------------


def test_extreme_z_is_the_largest_absolute_z_score_and_zero_for_a_constant_feature() -> None:
    rng = np.random.default_rng(1)
    x = np.column_stack([rng.normal(size=300), rng.normal(size=300), np.full(300, 4.0)])
    x[7, 0] = 30.0  # one instance far out: about 9 sds
    z = extreme_z(x)
    np.testing.assert_allclose(z[:2], np.abs(stats.zscore(x[:, :2])).max(0), rtol=1e-12)
    assert z[0] > HEAVY_TAIL_Z > z[1] and z[2] == 0.0
    names = ["far", "normal", "constant"]
    assert heavy_tailed_features(x, True, names) == {"far": z[0]}
    assert heavy_tailed_features(x, False, None) == {"0": z[0]}  # raw features: the same z
    assert heavy_tailed_features(x, QN, names) == {}  # already the remedy the note offers


def _short_nuts(standardize: object, extreme: float) -> ORLR:
    """A NUTS fit far too short to converge, on 20 bags whose first instance's x0 is ``extreme``."""
    rng = np.random.default_rng(0)
    centres = np.array([[3.0, 0.0], [-1.5, 2.6], [-1.5, -2.6]])
    y = rng.integers(0, 3, size=20)
    bags = [centres[[k, k, k]] + rng.normal(size=(3, 2)) for k in y]
    bags[0][0, 0] = extreme
    est = ORLR(inference=NUTS(num_warmup=5, num_samples=20, num_chains=1), standardize=standardize)
    with pytest.warns(ConvergenceWarning) as rec:
        est.fit(bags, [[k] for k in y])
    # 20 draws a chain: the warning's next step is more draws, whatever the note says.
    assert len(rec) == 1 and "Next: run more chains or longer ones" in str(rec[0].message)
    return est


def test_an_unconverged_posterior_names_the_heavy_tailed_features_its_failing_weights_sit_on() -> None:
    est = _short_nuts(True, 40.0)  # x0 reaches 7 sds from its mean; every weight fails ESS
    note = est.diagnostics().problems[-1]
    assert note == est.diagnostics().note  # the note ends the problems ...
    # ... and is the warning's next step once the chains are long enough for more draws not to be it.
    long_run = est.diagnostics()._replace(sampler={**est.diagnostics().sampler, "n_draws": 1000})
    assert f"Next: {note}." in warning_message(long_run)
    assert note.startswith("failing weights W[f, ...] sit on heavy-tailed features f")
    assert "f = 0 (7.0 sd)." in note and "standardize='quantile-normal'" in note
    # Which weights fail decides: with feature 0's weights passing, the note has nothing to say.
    diag = est.diagnostics()
    passing = diag.table.copy()
    passing.loc[passing.index.str.startswith("W[0, "), ["r_hat", "ess_bulk", "ess_tail"]] = [1.0, 1e4, 1e4]
    assert heavy_tail_note({"0": 7.0}, diag._replace(table=passing)) == ""
    assert heavy_tail_note({"1": 7.0}, diag._replace(table=passing)).endswith("HJA birdsong")
    # Mapped to a Normal already, or with no feature that far out: no note.
    for est in (_short_nuts(QN, 40.0), _short_nuts(True, 3.0)):
        assert not any("heavy-tailed" in p for p in est.diagnostics().problems)


def test_a_loaded_posterior_reports_the_heavy_tailed_features_as_the_fit_did(tmp_path) -> None:
    est = _short_nuts(True, 40.0)
    assert est.heavy_tailed_features_ == {"0": pytest.approx(7.0, abs=0.05)}
    est.save(tmp_path / "m")
    loaded = ORLR.load(tmp_path / "m")
    assert loaded.heavy_tailed_features_ == pytest.approx(est.heavy_tailed_features_)
    assert loaded.diagnostics().problems == est.diagnostics().problems
    assert "f = 0 (7.0 sd)." in loaded.diagnostics().problems[-1]

    meta_file = tmp_path / "m" / "metadata.json"
    meta = json.loads(meta_file.read_text())
    del meta["fitted"]["heavy_tailed_features_"]  # saved before the record was kept: no note, no error
    meta_file.write_text(json.dumps(meta))
    older = ORLR.load(tmp_path / "m").diagnostics().problems
    assert older == [p for p in est.diagnostics().problems if "heavy-tailed" not in p]
    meta["fitted"]["heavy_tailed_features_"] = ["0", 7.0]
    meta_file.write_text(json.dumps(meta))
    with pytest.raises(
        ValueError, match=r"metadata.json: 'fitted' holds heavy_tailed_features_ \['0', 7.0\]"
    ):
        ORLR.load(tmp_path / "m")
