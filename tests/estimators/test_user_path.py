"""What a user meets first: features in any units, labels as matrices or names, saved model folders.

Scaling travels with the model (``standardize``); a 2-D label array is a
(B, C) 0/1 label matrix; string labels are class names; every damaged model
file is a ValueError naming it; a saved model is replaced only on request.
"""

from __future__ import annotations

import copy
import json
import warnings
from pathlib import Path

import numpy as np
import pytest
from scipy.special import softmax
from sklearn.base import clone

import orlr_ppl
from orlr_ppl import EM, MAP, NUTS, ORLR, ORLRCV, SIM, SVI, MajorityClass, SoftmaxRegression
from orlr_ppl.data.datasets import make_miml_digits
from orlr_ppl.estimators.base import BagClassifier
from orlr_ppl.inference.checks.diagnostics import ConvergenceWarning

ESTIMATORS = [ORLR, SIM, SoftmaxRegression, MajorityClass]
WORDS = ["zero", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine"]


@pytest.fixture(scope="module")
def data():
    # Bags of at most 4 digits: label sets up to 8 make DP programs that compile 2.6x longer, and
    # large label sets are checked against brute force in test_subset_dp.
    return make_miml_digits(100, seed=5, split="train", max_size=4), make_miml_digits(
        40, seed=6, split="test", max_size=4
    )


@pytest.fixture(scope="module")
def units():
    """Per-feature factors (10 to 1000) and shifts: the same digits in other units."""
    rng = np.random.default_rng(3)
    return rng.uniform(10.0, 1000.0, 64), rng.uniform(-5.0, 5.0, 64)


def rescale(bags, units):
    factor, shift = units
    return [x * factor + shift for x in bags]


def quiet_fit(est, *args):
    """Fit without the ConvergenceWarning of a short EM run (not what these tests are about)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        return est.fit(*args)


def fit_any(est, train):
    targets = train.label_sets if isinstance(est, (ORLR, SIM)) else train.instance_labels
    return quiet_fit(est, train.bags, targets)


def small(cls, **kw):
    """A quick-to-fit instance of each estimator."""
    if cls is ORLR:
        return ORLR(inference=EM(max_iter=20), **kw)
    if cls is SIM:
        return SIM(lam=1e-6, n_outer=2, n_inner=20, **kw)
    return cls(**kw)


@pytest.fixture(scope="module")
def em(data):
    return fit_any(small(ORLR), data[0])


# -- 1. scaling travels with the model -----------------------------------------


@pytest.mark.parametrize("cls", ESTIMATORS)
def test_the_feature_map_is_a_constructor_parameter(cls):
    assert cls().get_params()["features"] == "standard"
    est = cls(features=None)
    assert est.features is None and clone(est).get_params()["features"] is None


@pytest.mark.parametrize("cls", ESTIMATORS)
def test_scaling_is_fitted_on_the_training_instances(cls, data):
    train, _ = data
    est = fit_any(small(cls), train)
    flat = np.concatenate(train.bags)
    np.testing.assert_allclose(est.feature_map_.mean_, flat.mean(axis=0), atol=1e-12)
    sd = flat.std(axis=0)
    assert np.any(sd == 0)  # digits have always-blank pixels: scale 1, not 0
    np.testing.assert_allclose(est.feature_map_.scale_, np.where(sd == 0, 1.0, sd), rtol=1e-12)
    raw = fit_any(small(cls, features=None), train)
    assert raw.feature_map_ is None


@pytest.mark.parametrize(
    "make",
    [
        lambda: ORLR(inference=EM(max_iter=20)),
        lambda: ORLR(inference=MAP(max_iter=40)),
        lambda: SIM(lam=1e-6, n_outer=2, n_inner=20),
        SoftmaxRegression,
    ],
    ids=["orlr-em", "orlr-map", "sim", "softmax"],
)
def test_predictions_do_not_depend_on_the_features_units(make, data, units):
    train, test = data
    shifted = train.__class__(rescale(train.bags, units), train.label_sets, train.instance_labels)
    a, b = fit_any(make(), train), fit_any(make(), shifted)
    moved = rescale(test.bags, units)
    for p, q in zip(a.predict_proba(test.bags), b.predict_proba(moved)):
        np.testing.assert_allclose(p, q, atol=1e-6)
        np.testing.assert_array_equal(p.argmax(axis=1), q.argmax(axis=1))
    for p, q in zip(a.predict(test.bags, test.label_sets), b.predict(moved, test.label_sets)):
        np.testing.assert_array_equal(p, q)
    np.testing.assert_array_equal(a.predict_bags(test.bags), b.predict_bags(moved))
    np.testing.assert_allclose(a.bag_scores(test.bags), b.bag_scores(moved), atol=1e-6)
    assert a.score(test.bags, test.instance_labels) == b.score(moved, test.instance_labels)


def test_without_standardize_the_raw_features_are_the_model_inputs(data, units):
    train, test = data
    raw = fit_any(small(ORLR, features=None), train)
    for x, p in zip(test.bags, raw.predict_proba(test.bags)):
        np.testing.assert_allclose(p, softmax(x @ raw.coef_ + raw.intercept_, axis=1), rtol=1e-6)
    # Units matter then: the same prior on weights of features a thousand times larger is another model.
    moved = fit_any(small(ORLR, features=None), train.__class__(rescale(train.bags, units), train.label_sets))
    assert not np.allclose(raw.coef_, moved.coef_ * units[0][:, None], rtol=1e-2)


@pytest.mark.parametrize("cls", [ORLR, SoftmaxRegression])
def test_coefficients_in_feature_units_reproduce_the_predictions(cls, data, units):
    train, test = data
    moved = rescale(test.bags, units)
    est = fit_any(
        small(cls), train.__class__(rescale(train.bags, units), train.label_sets, train.instance_labels)
    )
    w, b = est.coef_in_feature_units()
    assert w.shape == est.coef_.shape and b.shape == est.intercept_.shape
    for x, p in zip(moved, est.predict_proba(moved)):
        np.testing.assert_allclose(softmax(x @ w + b, axis=1), p, atol=1e-8)


@pytest.mark.parametrize("cls", ESTIMATORS)
def test_saved_scaling_gives_identical_predictions(cls, data, units, tmp_path):
    train, test = data
    moved = train.__class__(rescale(train.bags, units), train.label_sets, train.instance_labels)
    est = fit_any(small(cls), moved)
    with np.load(est.save(tmp_path / "m") / "params.npz") as arrays:
        assert {"feature_map.mean_", "feature_map.scale_"} <= set(arrays.files)
    back = BagClassifier.load(tmp_path / "m")
    assert back.get_params() == est.get_params()
    np.testing.assert_array_equal(back.feature_map_.mean_, est.feature_map_.mean_)
    bags = rescale(test.bags, units)
    for p, q in zip(est.predict_proba(bags), back.predict_proba(bags)):
        np.testing.assert_array_equal(p, q)
    for p, q in zip(est.predict(bags, test.label_sets), back.predict(bags, test.label_sets)):
        np.testing.assert_array_equal(p, q)


def test_a_folder_saved_before_standardisation_still_loads(em, data, tmp_path):
    _, test = data
    raw = clone(em).set_params(features=None)
    raw = quiet_fit(raw, data[0].bags, data[0].label_sets)
    folder = raw.save(tmp_path / "old")
    # What an older version wrote (format 1): no "standardize" parameter, no scaling arrays.
    meta = json.loads((folder / "metadata.json").read_text())
    del meta["params"]["features"], meta["format"], meta["feature_map"]
    meta["params"] = {**meta["params"], "method": "em", "max_iter": 20}
    del meta["params"]["inference"]
    (folder / "metadata.json").write_text(json.dumps(meta))
    with np.load(folder / "params.npz") as arrays:
        old = {k: arrays[k] for k in ("coef_", "intercept_")}
    np.savez(folder / "params.npz", **old)
    back = ORLR.load(folder)
    assert back.features is None and back.feature_map_ is None
    for p, q in zip(raw.predict_proba(test.bags), back.predict_proba(test.bags)):
        np.testing.assert_array_equal(p, q)
    # Format 1's scaling arrays become a StandardScaler that maps as they did.
    meta["params"]["standardize"] = True
    (folder / "metadata.json").write_text(json.dumps(meta))
    mean, scale = np.full(64, 2.0), np.full(64, 4.0)
    np.savez(folder / "params.npz", **old, feature_mean_=mean, feature_scale_=scale)
    scaled = ORLR.load(folder)
    assert scaled.features == "standard"
    for p, x in zip(scaled.predict_proba(test.bags), test.bags):
        np.testing.assert_allclose(
            p, softmax(((x - 2.0) / 4.0) @ raw.coef_ + raw.intercept_, axis=1), atol=1e-6
        )


def test_nuts_and_svi_posteriors_work_on_standardised_features(tmp_path):
    """The sampler fits of this file: tiny, on features in large, shifted units."""
    rng = np.random.default_rng(0)
    centres = np.array([[3.0, 0.0], [-1.5, 2.6], [-1.5, -2.6]])
    bags, sets, labels = [], [], []
    for _ in range(30):
        y = rng.integers(0, 3, size=rng.integers(1, 4))
        bags.append((centres[y] + rng.normal(size=(len(y), 2))) * [1000.0, 20.0] + [5.0, -300.0])
        sets.append(np.unique(y))
        labels.append(y)
    est = ORLR(inference=NUTS(num_warmup=50, num_samples=50, num_chains=1, max_num_samples=0), random_state=0)
    est = quiet_fit(est, bags, sets)
    assert est.feature_map_.scale_[0] > 500 and est.score(bags, labels) > 0.85
    # The posterior's W acts on standardised features: its log-likelihood is the DP at those,
    # and predictions average the draws' softmax at those.
    z = [(x - est.feature_map_.mean_) / est.feature_map_.scale_ for x in bags]
    w, b = (np.asarray(est.posterior_.posterior[k])[0, 7] for k in ("W", "beta"))
    saved_ll = np.asarray(est.posterior_.log_likelihood["Y"])[0, 7]
    np.testing.assert_allclose(saved_ll, orlr_ppl.bag_log_likelihood([x @ w + b for x in z], sets), rtol=1e-4)
    w, b = est.coef_draws_, est.intercept_draws_
    for x, p in zip(z, est.predict_proba(bags)):
        np.testing.assert_allclose(p, softmax(np.einsum("nd,sdc->snc", x, w) + b[:, None], axis=-1).mean(0))
    interval = est.predict_interval(bags, label_sets=sets)
    assert all(np.all(i[..., 0] <= i[..., 1] + 1e-12) for i in interval)
    folder = est.save(tmp_path / "nuts")
    back = ORLR.load(folder)
    for p, q in zip(est.predict_proba(bags, sets), back.predict_proba(bags, sets)):
        np.testing.assert_allclose(p, q, rtol=1e-12)
    # SVI shares the path: its draws act on the same standardised features.
    svi = ORLR(inference=SVI(num_steps=30, num_draws=20), random_state=0)
    svi = quiet_fit(svi, bags, sets)
    np.testing.assert_array_equal(svi.feature_map_.mean_, est.feature_map_.mean_)
    w, b = svi.coef_draws_, svi.intercept_draws_
    for x, p in zip(z, svi.predict_proba(bags)):
        np.testing.assert_allclose(p, softmax(np.einsum("nd,sdc->snc", x, w) + b[:, None], axis=-1).mean(0))
    # Replacing the folder with a point estimate removes the posterior it held.
    point = quiet_fit(ORLR(inference="map"), bags, sets)
    with pytest.raises(ValueError, match="overwrite=True"):
        point.save(folder)
    point.save(folder, overwrite=True)
    assert not (folder / "posterior.nc").exists() and ORLR.load(folder).inference == "map"


# -- 2. a 2-D array is a label matrix ------------------------------------------


def test_a_label_matrix_is_read_as_a_label_matrix(em, data):
    train, test = data
    matrix = train.label_matrix()
    fitted = quiet_fit(clone(em), train.bags, matrix)
    assert fitted.n_classes_ == matrix.shape[1] == 10
    np.testing.assert_array_equal(fitted.coef_, em.coef_)
    for p, q in zip(em.predict(test.bags, test.label_sets), em.predict(test.bags, test.label_matrix())):
        np.testing.assert_array_equal(p, q)
    as_bool = quiet_fit(clone(em), train.bags, matrix.astype(bool))
    np.testing.assert_array_equal(as_bool.coef_, em.coef_)


def test_the_label_matrix_fixes_the_class_count():
    rng = np.random.default_rng(0)
    bags = [rng.normal(size=(3, 4)) for _ in range(8)]
    matrix = np.zeros((8, 5), np.int64)  # classes 3 and 4 never occur
    matrix[np.arange(8), np.arange(8) % 3] = 1
    est = SIM(lam=1e-6, n_outer=1, n_inner=5).fit(bags, matrix)
    assert est.n_classes_ == 5 and est.predict_bags(bags).shape == (8, 5)
    with pytest.raises(ValueError, match=r"label matrix has 5 columns .* n_classes=4"):
        SIM(lam=1e-6, n_classes=4).fit(bags, matrix)
    with pytest.raises(ValueError, match=r"the label matrix has 4 columns but the model has 5 classes"):
        est.predict(bags, matrix[:, :4])


@pytest.mark.parametrize("cls", [ORLR, SIM])
def test_a_2d_array_of_label_indices_is_refused(cls):
    bags = [np.ones((3, 2)), np.ones((3, 2))]
    with pytest.raises(ValueError, match=r"read as a \(B, C\) 0/1 label matrix.*list of lists"):
        cls().fit(bags, np.array([[0, 2], [1, 3]]))


# -- 3. class names ---------------------------------------------------------------


def named(label_sets):
    return [[WORDS[c] for c in s] for s in label_sets]


def test_string_label_sets_are_class_names(em, data, tmp_path):
    train, test = data
    by_name = quiet_fit(clone(em), train.bags, named(train.label_sets))
    names = sorted(WORDS)
    assert by_name.class_names_ == names and by_name.n_classes_ == 10
    # The same fit as with the indices of the sorted names.
    index = [[names.index(WORDS[c]) for c in s] for s in train.label_sets]
    by_index = quiet_fit(clone(em), train.bags, index)
    np.testing.assert_array_equal(by_name.coef_, by_index.coef_)
    # Predictions are indices into class_names_; transductive label sets may be names.
    got = by_name.predict(test.bags, named(test.label_sets))
    assert all(set(names[k] for k in y) <= set(named([s])[0]) for y, s in zip(got, test.label_sets))
    truth = [[WORDS[c] for c in y] for y in test.instance_labels]
    truth_index = [[names.index(WORDS[c]) for c in y] for y in test.instance_labels]
    assert by_name.score(test.bags, truth) == by_index.score(test.bags, truth_index)
    # Sorted names permute the classes: the same model, but a float32 EM stopped after 20 iterations
    # in another class order may flip a near tie.
    assert by_name.score(test.bags, truth) == pytest.approx(
        em.score(test.bags, test.instance_labels), abs=0.02
    )
    back = ORLR.load(by_name.save(tmp_path / "named"))
    assert back.class_names_ == names
    for p, q in zip(got, back.predict(test.bags, named(test.label_sets))):
        np.testing.assert_array_equal(p, q)


def test_unknown_and_mixed_names_are_errors(em, data):
    train, test = data
    by_name = quiet_fit(clone(em), train.bags, named(train.label_sets))
    sets = named(test.label_sets[:3])
    sets[2] = sets[2] + ["eleven"]
    with pytest.raises(ValueError, match=r"bag 2 has label 'eleven', which is not a class"):
        by_name.predict(test.bags[:3], sets)
    with pytest.raises(ValueError, match=r"bag 0 has the class name .* fitted on class indices"):
        em.predict(test.bags[:3], named(test.label_sets[:3]))
    mixed = named(train.label_sets)
    mixed[1] = [3]
    with pytest.raises(ValueError, match=r"mix class names and class indices \(bag 0 has .*, bag 1 has 3\)"):
        ORLR().fit(train.bags, mixed)
    with pytest.raises(ValueError, match=r"n_classes=12, but the label sets name 10 classes"):
        ORLR(n_classes=12).fit(train.bags, named(train.label_sets))
    with pytest.raises(ValueError, match=r"label set of bag 0 is the string 'cat'"):
        ORLR().fit(train.bags[:2], ["cat", ["dog"]])


@pytest.mark.parametrize("cls", [SoftmaxRegression, MajorityClass])
def test_string_instance_labels_are_class_names(cls, data):
    train, test = data
    names = sorted(WORDS)
    words = [np.array([WORDS[c] for c in y]) for y in train.instance_labels]
    by_name = cls().fit(train.bags, words)
    assert by_name.class_names_ == names
    by_index = cls().fit(
        train.bags, [np.array([names.index(WORDS[c]) for c in y]) for y in train.instance_labels]
    )
    for p, q in zip(by_name.predict_proba(test.bags), by_index.predict_proba(test.bags)):
        np.testing.assert_array_equal(p, q)
    mixed = [list(w) for w in words]
    mixed[0][0] = 1
    with pytest.raises(ValueError, match=r"instance labels mix class names and class indices"):
        cls().fit(train.bags, mixed)


def test_score_refuses_a_class_the_model_lacks(em, data):
    """A true label outside the model's classes is an error naming the bag, not a low accuracy."""
    _, test = data
    truth = [np.asarray(y).copy() for y in test.instance_labels]
    truth[2][0] = em.n_classes_ + 3
    with pytest.raises(ValueError, match=rf"bag 2 has the instance label {em.n_classes_ + 3}"):
        em.score(test.bags, truth)
    truth[2][0] = -1  # unlabelled: left out, as instance_accuracy does
    assert 0.0 <= em.score(test.bags, truth) <= 1.0


# -- 4, 5. damaged model files ----------------------------------------------------


def _cut(path: Path) -> None:
    path.write_bytes(path.read_bytes()[: path.stat().st_size // 2])


def _edit_meta(change):
    def damage(folder: Path) -> None:
        meta = json.loads((folder / "metadata.json").read_text())
        (folder / "metadata.json").write_text(json.dumps(change(meta)))

    return damage


def _nonfinite(name: str, value: float):
    def damage(folder: Path) -> None:
        with np.load(folder / "params.npz") as arrays:
            saved = {k: arrays[k] for k in arrays.files}
        saved[name] = np.asarray(saved[name], dtype=np.float64).copy()
        saved[name].flat[1] = value
        np.savez(folder / "params.npz", **saved)

    return damage


def _drop(key):
    return lambda meta: {k: v for k, v in meta.items() if k != key}


DAMAGE = {
    "params-truncated": ("params.npz", lambda f: _cut(f / "params.npz")),
    "params-empty": ("params.npz", lambda f: (f / "params.npz").write_bytes(b"")),
    "params-not-zip": ("params.npz", lambda f: (f / "params.npz").write_bytes(b"not a zip at all")),
    "params-npy": ("params.npz", lambda f: np.save(open(f / "params.npz", "wb"), np.ones(3))),
    "params-array-missing": ("params.npz", lambda f: np.savez(f / "params.npz", intercept_=np.ones(10))),
    "meta-no-n_classes": ("metadata.json", _edit_meta(_drop("n_classes"))),
    "meta-no-params": ("metadata.json", _edit_meta(_drop("params"))),
    "meta-unknown-param": (
        "metadata.json",
        _edit_meta(lambda m: {**m, "params": {**m["params"], "nope": 1}}),
    ),
    "meta-list": ("metadata.json", lambda f: (f / "metadata.json").write_text("[1, 2]")),
    "meta-binary": ("metadata.json", lambda f: (f / "metadata.json").write_bytes(b"\x89PNG\xff\xfe\x00\x01")),
    "meta-n_classes-text": ("metadata.json", _edit_meta(lambda m: {**m, "n_classes": "ten"})),
    "meta-n_features-bool": ("metadata.json", _edit_meta(lambda m: {**m, "n_features": True})),
    "meta-class-names": ("metadata.json", _edit_meta(lambda m: {**m, "class_names": ["a", "b"]})),
    "meta-fitted-method": ("metadata.json", _edit_meta(lambda m: {**m, "fitted": {"predict": 1}})),
    "meta-estimator-list": ("metadata.json", _edit_meta(lambda m: {**m, "estimator": ["ORLR"]})),
    "nan-coef": ("params.npz.*'coef_'.*NaN", _nonfinite("coef_", np.nan)),
    "inf-intercept": ("params.npz.*'intercept_'.*infinite", _nonfinite("intercept_", np.inf)),
    "nan-scale": ("params.npz.*'feature_map.scale_'", _nonfinite("feature_map.scale_", np.nan)),
    "zero-scale": (
        "params.npz: the feature map gives non-finite values",
        _nonfinite("feature_map.scale_", 0.0),
    ),
}


@pytest.fixture(scope="module")
def saved(em, tmp_path_factory):
    return em.save(tmp_path_factory.mktemp("saved") / "em")


@pytest.mark.parametrize("loader", [BagClassifier.load, ORLR.load], ids=["base", "orlr"])
@pytest.mark.parametrize("case", list(DAMAGE))
def test_every_damaged_model_file_is_a_value_error_naming_it(case, loader, saved, tmp_path):
    folder = tmp_path / "m"
    folder.mkdir()
    for f in saved.iterdir():
        (folder / f.name).write_bytes(f.read_bytes())
    match, damage = DAMAGE[case]
    damage(folder)
    with pytest.raises(ValueError, match=match):
        loader(folder)


def test_a_model_with_nonfinite_weights_is_not_saved(em, tmp_path):
    broken = copy.deepcopy(em)
    broken.coef_[0, 0] = np.nan
    with pytest.raises(ValueError, match=r"ORLR: array 'coef_' holds 1 NaN"):
        broken.save(tmp_path / "m")
    assert not (tmp_path / "m").exists()


# -- 6. overwriting ---------------------------------------------------------------


def test_saving_over_a_model_needs_overwrite(em, data, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    folder = em.save()
    assert folder == Path("models") / "orlr-em"
    with pytest.raises(
        ValueError, match=r"orlr-em already holds a saved model .*pass overwrite=True.*--force"
    ):
        em.save()
    other = quiet_fit(clone(em).set_params(prior_scale=0.1), data[0])
    other.save(overwrite=True)
    np.testing.assert_array_equal(ORLR.load(folder).coef_, other.coef_)
    (tmp_path / "file").write_text("x")
    with pytest.raises(ValueError, match="is a file, not a folder"):
        em.save(tmp_path / "file")


def test_an_interrupted_save_leaves_the_old_model_whole(em, tmp_path, monkeypatch):
    folder = em.save(tmp_path / "m")
    before = {f.name: f.read_bytes() for f in folder.iterdir()}

    def fail(*args, **kwargs):
        raise OSError("disk full")

    monkeypatch.setattr(np, "savez", fail)
    with pytest.raises(OSError, match="disk full"):
        em.save(folder, overwrite=True)
    assert {f.name: f.read_bytes() for f in folder.iterdir()} == before  # no temporary file left either


@pytest.mark.parametrize("cls", [SoftmaxRegression, MajorityClass])
def test_unlabelled_instances_are_left_out_of_training(cls, data):
    train, test = data
    hidden = [np.where(np.arange(len(y)) % 2 == 0, y, -1) for y in train.instance_labels]
    kept = [y[np.arange(len(y)) % 2 == 0] for y in train.instance_labels]
    partial = cls().fit(train.bags, hidden)
    only = cls().fit([x[::2] for x in train.bags], kept)
    if cls is MajorityClass:
        np.testing.assert_array_equal(partial.class_prior_, only.class_prior_)
    else:
        assert partial.score(test.bags, test.instance_labels) > 0.8
    with pytest.raises(ValueError, match=r"all \d+ instance labels are -1 \(unlabelled\)"):
        cls().fit(train.bags, [np.full(len(y), -1) for y in train.instance_labels])


def test_pruning_leaves_out_the_costliest_bags_and_says_which(tmp_path):
    """``prune`` drops the bags with the most DP work, n_b |Y_b| 2^|Y_b|; the fit is that of the rest."""
    rng = np.random.default_rng(5)
    sizes = [(3, 1), (6, 3), (2, 2), (8, 1), (5, 3), (4, 2), (7, 2), (3, 3)]  # work 6, 144, 16, 16, 120, ...
    bags = [rng.normal(size=(n, 3)) for n, _ in sizes]
    sets = [sorted(rng.choice(4, k, replace=False).tolist()) for _, k in sizes]
    # Without standardising: the pruned bags' features would still count for the scaling.
    model = ORLR(inference="map", prune=0.25, n_classes=4, features=None).fit(bags, sets)
    assert model.pruned_bags_ == [1, 4]  # the two bags with 3 labels and the most instances
    keep = [0, 2, 3, 5, 6, 7]
    alone = ORLR(inference="map", n_classes=4, features=None)
    alone.fit([bags[i] for i in keep], [sets[i] for i in keep])
    np.testing.assert_allclose(model.coef_, alone.coef_, rtol=1e-5, atol=1e-6)
    assert alone.pruned_bags_ == [] and "prune" in model.get_params()
    back = ORLR.load(model.save(tmp_path / "m"))
    assert back.pruned_bags_ == [1, 4] and back.get_params()["prune"] == 0.25
    with pytest.raises(ValueError, match=r"prune=1.0: give the fraction of bags to leave out, in \[0, 1\)"):
        ORLR(prune=1.0).fit(bags, sets)


def test_stochastic_em_is_an_option_with_its_own_report(data, tmp_path):
    """``bag_fraction`` runs a fixed budget of stochastic EM: seeded, no warning, an honest report."""
    train, test = data
    with warnings.catch_warnings():
        warnings.simplefilter("error", ConvergenceWarning)  # a fixed budget is not a failure
        model = ORLR(inference=EM(bag_fraction=0.5, max_iter=30), random_state=1).fit(
            train.bags, train.label_sets
        )
    assert model.n_iter_ == 30 and not model.converged_ and len(model.history_) == 31
    report = model.diagnostics()
    assert report.problems == [] and report.bag_fraction == 0.5
    assert "stochastic EM (0.5 of the bags per iteration): 30 iterations" in report.summary()
    full = quiet_fit(ORLR(inference=EM(max_iter=30)), train.bags, train.label_sets)
    assert model.score(test.bags, test.instance_labels) > full.score(test.bags, test.instance_labels) - 0.05
    assert model.log_posterior_ == pytest.approx(full.log_posterior_, rel=0.05)
    again = ORLR(inference=EM(bag_fraction=0.5, max_iter=30), random_state=1).fit(
        train.bags, train.label_sets
    )
    np.testing.assert_array_equal(again.coef_, model.coef_)
    back = ORLR.load(model.save(tmp_path / "m"))
    assert back.get_params()["inference"] == EM(bag_fraction=0.5, max_iter=30)
    np.testing.assert_array_equal(back.predict_proba(test.bags)[0], model.predict_proba(test.bags)[0])
    for bad in (0.0, 1.5):
        with pytest.raises(ValueError, match=r"EM\(bag_fraction=.*\): give the fraction of bags"):
            EM(bag_fraction=bad)


@pytest.mark.parametrize("method", ["nuts", "svi"])
def test_a_sampler_fit_says_what_it_is_doing_by_default(capsys, method):
    """Progress is on by default: a line before the compiling that no bar shows, then the bar."""
    rng = np.random.default_rng(1)
    centres = np.array([[3.0, 0.0], [-1.5, 2.6], [-1.5, -2.6]])
    ys = [rng.integers(0, 3, size=2) for _ in range(12)]
    bags, sets = [centres[y] + rng.normal(size=(2, 2)) for y in ys], [np.unique(y) for y in ys]

    def settings(**kw):
        if method == "nuts":
            return NUTS(num_warmup=10, num_samples=10, num_chains=1, max_num_samples=0, **kw)
        return SVI(num_steps=20, num_draws=10, **kw)

    quiet_fit(ORLR(inference=settings()), bags, sets)
    err = capsys.readouterr().err
    if method == "nuts":
        assert "NUTS: finding the MAP to start from (compiling)…" in err
        assert "NUTS, 1 chain:" in err and "compiling…" in err and "sampling" in err and "20/20" in err
    else:
        assert "SVI: compiling the ELBO and its gradient…" in err and "20/20" in err
    quiet_fit(ORLR(inference=settings(progress_bar=False)), bags, sets)
    assert capsys.readouterr().err == ""


def test_a_cross_validated_choice_shows_its_progress(capsys):
    rng = np.random.default_rng(2)
    centres = np.array([[3.0, 0.0], [-1.5, 2.6], [-1.5, -2.6]])
    ys = [rng.integers(0, 3, size=2) for _ in range(12)]
    bags, sets = [centres[y] + rng.normal(size=(2, 2)) for y in ys], [np.unique(y) for y in ys]
    model = quiet_fit(ORLRCV(cv=2, inference=EM(max_iter=10)), bags, sets)
    err = capsys.readouterr().err
    n_fits = 2 * len(model.cv_results_)
    assert "choosing prior_scale by 2-fold CV" in err and f"{n_fits}/{n_fits}" in err
    quiet_fit(ORLRCV(cv=2, progress_bar=False, inference=EM(max_iter=10)), bags, sets)
    assert capsys.readouterr().err == ""


def test_labels_that_leave_a_class_unnamed_are_said():
    """1-based ids (as in the HJA files) would add an empty class 0: fit and MIMLData say so."""
    from orlr_ppl import MIMLData

    rng = np.random.default_rng(0)
    bags = [rng.normal(size=(3, 2)) for _ in range(6)]
    one_based = [[1], [2], [1, 2], [3], [1, 3], [2]]
    with pytest.warns(UserWarning, match=r"fit: class\(es\) \[0\] appear in no label set.*1-based"):
        model = ORLR(inference="map").fit(bags, one_based)
    assert model.n_classes_ == 4
    with pytest.warns(UserWarning, match=r"MIMLData: class\(es\) \[0\] appear in no label set"):
        MIMLData(bags=bags, label_sets=one_based)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # every class named, or n_classes given: nothing to say
        ORLR(inference="map").fit(bags, [[c - 1 for c in s] for s in one_based])
        ORLR(inference="map", n_classes=4).fit(bags, one_based)
        MIMLData(bags=bags, label_sets=one_based, n_classes=4)
