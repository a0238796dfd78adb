"""The quantile-normal feature map (``features="quantile-normal"``): scikit-learn's transform, saved.

The map is scikit-learn's ``QuantileTransformer`` then ``StandardScaler``. Its estimators fit as on
features mapped by scikit-learn, predict identically after save/load; damaged folders are refused,
weights have no raw-unit form; the command line takes it; and the convergence warning offers it for
heavy-tailed features.
"""

from __future__ import annotations

import json
import warnings
from pathlib import Path

import numpy as np
import pytest
from scipy import stats
from sklearn.base import clone
from sklearn.preprocessing import QuantileTransformer

from orlr_ppl import EM, MAP, MIMM, NUTS, ORLR, SIM, MajorityClass, SoftmaxRegression
from orlr_ppl.cli import main
from orlr_ppl.data.datasets import make_miml_digits
from orlr_ppl.estimators.base import BagClassifier
from orlr_ppl.estimators.feature_notes import heavy_tail_note, heavy_tailed_features
from orlr_ppl.features import fit_bags, make_feature_map
from orlr_ppl.features.maps import HEAVY_TAIL_Z, extreme_z
from orlr_ppl.inference.checks.diagnostics import ConvergenceWarning, warning_message

QN = "quantile-normal"
HJA = Path(__file__).resolve().parents[3] / "shared" / "data" / "hja"


def sklearn_map(train: np.ndarray, n_quantiles: int = 1000) -> QuantileTransformer:
    q = min(n_quantiles, len(train))
    return QuantileTransformer(output_distribution="normal", n_quantiles=q, random_state=0).fit(train)


# -- the map ---------------------------------------------------------------------------------


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
    ours = quiet_fit(ORLR(inference=settings, features=QN), train)
    theirs = quiet_fit(ORLR(inference=settings, features="standard"), mapped)
    np.testing.assert_array_equal(np.asarray(ours.coef_), np.asarray(theirs.coef_))
    for p, q in zip(
        ours.predict_proba(test.bags), theirs.predict_proba([reference.transform(x) for x in test.bags])
    ):
        np.testing.assert_array_equal(p, q)
    # Nothing of the test bags enters the map: it is the training instances' quantiles.
    np.testing.assert_array_equal(ours.feature_map_.steps[0][1].quantiles_, reference.quantiles_)


@pytest.mark.parametrize("cls", [ORLR, SIM, SoftmaxRegression, MajorityClass, MIMM])
def test_the_map_is_saved_and_gives_identical_predictions(cls, digits, tmp_path):
    train, test = digits
    est = quiet_fit(small(cls, features=QN), train)
    assert clone(est).get_params()["features"] == QN
    with np.load(est.save(tmp_path / "m") / "params.npz") as arrays:
        quantiles = est.feature_map_.steps[0][1].quantiles_
        np.testing.assert_array_equal(arrays["feature_map.0.quantiles_"], quantiles)
    back = BagClassifier.load(tmp_path / "m")
    assert back.get_params() == est.get_params()
    for p, q in zip(est.predict_proba(test.bags), back.predict_proba(test.bags)):
        np.testing.assert_array_equal(p, q)
    for p, q in zip(est.predict(test.bags, test.label_sets), back.predict(test.bags, test.label_sets)):
        np.testing.assert_array_equal(p, q)


def test_the_map_changes_the_model(digits):
    train, test = digits
    plain = quiet_fit(small(ORLR), train)
    mapped = quiet_fit(small(ORLR, features=QN), train)
    assert not np.allclose(np.asarray(plain.coef_), np.asarray(mapped.coef_), atol=1e-3)
    # A refit with features="standard" forgets the quantiles: predictions are the plain model's again.
    refit = quiet_fit(mapped.set_params(features="standard"), train)
    assert type(refit.feature_map_) is type(plain.feature_map_)
    np.testing.assert_array_equal(np.asarray(refit.coef_), np.asarray(plain.coef_))


def test_damaged_folders_and_bad_values_are_refused(digits, tmp_path):
    train, _ = digits
    est = quiet_fit(small(ORLR, features=QN), train)
    folder = est.save(tmp_path / "m")
    with np.load(folder / "params.npz") as arrays:
        saved = {k: arrays[k] for k in arrays.files}

    def write(**arrays):
        np.savez(folder / "params.npz", **arrays)

    write(**{k: v for k, v in saved.items() if k != "feature_map.0.quantiles_"})
    with pytest.raises(ValueError, match=r"metadata.json: the feature map cannot be rebuilt"):
        ORLR.load(folder)
    write(**{**saved, "feature_map.0.quantiles_": saved["feature_map.0.quantiles_"][:, :5]})
    with pytest.raises(ValueError, match=r"params.npz: the feature map does not map 64 features"):
        ORLR.load(folder)
    write(**saved)
    meta = json.loads((folder / "metadata.json").read_text())
    meta["feature_map"]["steps"][0][1]["class"] = "os.system"
    (folder / "metadata.json").write_text(json.dumps(meta))
    with pytest.raises(ValueError, match=r"the feature map is .*os.system.*expected one of"):
        ORLR.load(folder)
    with pytest.raises(
        ValueError, match=r"features='z': give one of \('standard', 'quantile-normal', 'rbf'\)"
    ):
        quiet_fit(small(ORLR, features="z"), train)


def test_raw_unit_parameters_are_refused_under_the_map(digits):
    train, _ = digits
    for est, call in [
        (quiet_fit(small(ORLR, features=QN), train), "coef_in_feature_units"),
        (quiet_fit(small(SoftmaxRegression, features=QN), train), "coef_in_feature_units"),
        (quiet_fit(small(MIMM, features=QN), train), "in_feature_units"),
    ]:
        with pytest.raises(ValueError, match="not a centring and scaling"):
            getattr(est, call)()


def test_the_command_line_fits_saves_and_predicts_with_the_map(tmp_path, capsys):
    from helpers import write_npz as _write_npz

    _write_npz(tmp_path / "train.npz", make_miml_digits(40, seed=0, split="train", max_size=4))
    model = tmp_path / "model"
    argv = ["fit", "--data", str(tmp_path / "train.npz"), "--method", "map", "--max-iter", "30"]
    assert main([*argv, "--features", QN, "--out", str(model), "--quiet"]) == 0
    assert json.loads((model / "metadata.json").read_text())["params"]["features"] == QN
    capsys.readouterr()
    assert main(["predict", "--model", str(model), "--data", str(tmp_path / "train.npz")]) == 0
    assert capsys.readouterr().out.startswith("bag_id,instance,label,")
    assert main([*argv, "--features", "none", "--out", str(tmp_path / "raw"), "--quiet"]) == 0
    assert json.loads((tmp_path / "raw" / "metadata.json").read_text())["params"]["features"] is None


# -- the convergence warning points at heavy-tailed features ---------------------------------


def test_extreme_z_is_the_largest_absolute_z_score_and_zero_for_a_constant_feature() -> None:
    rng = np.random.default_rng(1)
    x = np.column_stack([rng.normal(size=300), rng.normal(size=300), np.full(300, 4.0)])
    x[7, 0] = 30.0  # one instance far out: about 9 sds
    z = extreme_z(x)
    np.testing.assert_allclose(z[:2], np.abs(stats.zscore(x[:, :2])).max(0), rtol=1e-12)
    assert z[0] > HEAVY_TAIL_Z > z[1] and z[2] == 0.0
    names = ["far", "normal", "constant"]
    standard, quantile = make_feature_map("standard"), make_feature_map(QN)
    fit_bags(quantile, [x])
    assert heavy_tailed_features(x, standard, names) == {"far": z[0]}
    assert heavy_tailed_features(x, None, None) == {"0": z[0]}  # raw features: the same z
    assert heavy_tailed_features(x, quantile, names) == {}  # already the remedy the note offers


def _short_nuts(features: object, extreme: float) -> ORLR:
    """A NUTS fit far too short to converge, on 20 bags whose first instance's x0 is ``extreme``."""
    rng = np.random.default_rng(0)
    centres = np.array([[3.0, 0.0], [-1.5, 2.6], [-1.5, -2.6]])
    y = rng.integers(0, 3, size=20)
    bags = [centres[[k, k, k]] + rng.normal(size=(3, 2)) for k in y]
    bags[0][0, 0] = extreme
    est = ORLR(inference=NUTS(num_warmup=5, num_samples=20, num_chains=1), features=features)
    with pytest.warns(ConvergenceWarning) as rec:
        est.fit(bags, [[k] for k in y])
    # 20 draws a chain: the warning's next step is more draws, whatever the note says.
    assert len(rec) == 1 and "Next: run more chains or longer ones" in str(rec[0].message)
    return est


def test_an_unconverged_posterior_names_the_heavy_tailed_features_its_failing_weights_sit_on() -> None:
    est = _short_nuts("standard", 40.0)  # x0 reaches 7 sds from its mean; every weight fails ESS
    note = est.diagnostics().problems[-1]
    assert note == est.diagnostics().note  # the note ends the problems ...
    # ... and is the warning's next step once the chains are long enough for more draws not to be it.
    long_run = est.diagnostics()._replace(sampler={**est.diagnostics().sampler, "n_draws": 1000})
    assert f"Next: {note}." in warning_message(long_run)
    assert note.startswith("failing weights W[f, ...] sit on heavy-tailed features f")
    assert "f = 0 (7.0 sd)." in note and "ORLR(features='quantile-normal')" in note
    # Which weights fail decides: with feature 0's weights passing, the note has nothing to say.
    diag = est.diagnostics()
    passing = diag.table.copy()
    passing.loc[passing.index.str.startswith("W[0, "), ["r_hat", "ess_bulk", "ess_tail"]] = [1.0, 1e4, 1e4]
    assert heavy_tail_note({"0": 7.0}, diag._replace(table=passing)) == ""
    assert heavy_tail_note({"1": 7.0}, diag._replace(table=passing)).endswith("HJA birdsong")
    # Mapped to a Normal already, or with no feature that far out: no note.
    for est in (_short_nuts(QN, 40.0), _short_nuts("standard", 3.0)):
        assert not any("heavy-tailed" in p for p in est.diagnostics().problems)


def test_a_loaded_posterior_reports_the_heavy_tailed_features_as_the_fit_did(tmp_path) -> None:
    est = _short_nuts("standard", 40.0)
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
