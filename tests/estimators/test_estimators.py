"""The scikit-learn-style estimators: API, predictions, persistence, bad input."""

from __future__ import annotations

import json

import numpy as np
import pytest
from scipy.special import softmax
from sklearn.base import clone

from orlr_ppl import EM, MAP, NUTS, ORLR, SIM, MajorityClass, SoftmaxRegression
from orlr_ppl.data.datasets import make_miml_digits
from orlr_ppl.estimators.base import BagClassifier


@pytest.fixture(scope="module")
def data():
    return make_miml_digits(80, seed=5, split="train"), make_miml_digits(30, seed=6, split="test")


@pytest.fixture(scope="module")
def fitted(data):
    train, _ = data
    return ORLR(inference=EM(max_iter=30)).fit(train.bags, train.label_sets)


def test_sklearn_conventions():
    est = ORLR(inference="map", prior_scale=0.5, random_state=3)
    assert est.get_params()["prior_scale"] == 0.5
    twin = clone(est)
    assert twin.get_params() == est.get_params() and twin is not est
    est.set_params(inference=EM(max_iter=3))
    assert est.inference == EM(max_iter=3) and clone(est).inference == EM(max_iter=3)


def test_fit_predict_shapes_and_semantics(fitted, data):
    train, test = data
    assert fitted.coef_.shape == (64, 10) and fitted.intercept_.shape == (10,)
    assert fitted.n_classes_ == 10 and fitted.n_features_in_ == 64
    assert np.all(np.diff(fitted.history_) >= -1e-3)
    proba = fitted.predict_proba(test.bags)
    assert [p.shape for p in proba] == [(len(b), 10) for b in test.bags]
    np.testing.assert_allclose(np.concatenate(proba).sum(axis=1), 1.0, atol=1e-6)
    trans = fitted.predict_proba(train.bags, train.label_sets)
    for p, s in zip(trans, train.label_sets):
        assert np.all(p[:, np.setdiff1d(np.arange(10), s)] == 0)
    labels = fitted.predict(train.bags, train.label_sets)
    assert all(set(y.tolist()) <= set(s) for y, s in zip(labels, train.label_sets))
    bags01 = fitted.predict_bags(test.bags)
    assert bags01.shape == (30, 10) and set(np.unique(bags01)) <= {0, 1}
    scores = fitted.bag_scores(test.bags)
    np.testing.assert_allclose(scores, np.stack([p.max(axis=0) for p in proba]))
    assert fitted.score(test.bags, test.instance_labels) > 0.8


def test_em_and_map_estimators_agree(data):
    train, test = data
    # m_steps=30: on standardised digits (rare pixels become large values) EM's float32 log posterior
    # stops changing short of the optimum with 10 steps per M-step; 30 take it there.
    em = ORLR(inference=EM(max_iter=300, tol=1e-9, m_steps=30)).fit(train.bags, train.label_sets)
    mp = ORLR(inference="map").fit(train.bags, train.label_sets)
    assert em.log_posterior_ == pytest.approx(mp.log_posterior_, rel=1e-3)
    agree = np.mean(np.concatenate(em.predict(test.bags)) == np.concatenate(mp.predict(test.bags)))
    assert agree > 0.95


def test_reference_estimators(data):
    train, test = data
    soft = SoftmaxRegression().fit(train.bags, train.instance_labels)
    major = MajorityClass().fit(train.bags, train.instance_labels)
    assert soft.score(test.bags, test.instance_labels) > 0.9
    counts = np.bincount(np.concatenate(train.instance_labels), minlength=10)
    assert np.all(np.concatenate(major.predict(test.bags)) == counts.argmax())
    assert major.score(test.bags, test.instance_labels) < 0.3
    # Transductive majority: within the bag's own labels.
    for y, s in zip(major.predict(test.bags, test.label_sets), test.label_sets):
        assert set(y.tolist()) <= set(s)


@pytest.mark.parametrize("make", [lambda: ORLR(inference="map"), SoftmaxRegression, MajorityClass])
def test_save_load_round_trip(tmp_path, data, make):
    train, test = data
    est = make()
    est.fit(train.bags, train.label_sets if isinstance(est, ORLR) else train.instance_labels)
    folder = est.save(tmp_path / "m")
    assert sorted(p.name for p in folder.iterdir()) == ["metadata.json", "params.npz"]
    back = type(est).load(folder)
    meta = json.loads((folder / "metadata.json").read_text())
    assert {k: v for k, v in meta["training_data"].items() if k != "bag_digests"} == {
        "n_bags": 80,
        "n_instances": sum(len(b) for b in train.bags),
    }
    assert len(meta["training_data"]["bag_digests"]) == 80
    assert back.training_shape_ == est.training_shape_
    for a, b in zip(est.predict_proba(test.bags), back.predict_proba(test.bags)):
        np.testing.assert_array_equal(a, b)
    assert back.get_params() == est.get_params()
    # It knows the bags it was fitted on, and only those: in-sample scores can be told apart.
    assert back.fitted_on([train.bags[3], test.bags[0], train.bags[5]]).tolist() == [True, False, True]
    assert not back.fitted_on(test).any() and back.fitted_on(train).all()


METADATA_KEYS = {
    "package",
    "version",
    "format",
    "feature_map",
    "estimator",
    "params",
    "n_classes",
    "n_features",
    "training_data",
    "class_names",
    "feature_names",
    "fitted",
}
"""The keys of ``metadata.json``: saved models of earlier versions must keep loading, so this is fixed."""


def test_base_load_rebuilds_whichever_estimator_was_saved(tmp_path, data):
    """``BagClassifier.load`` finds the class in the registry (no import of the estimator modules)."""
    train, test = data
    models = [
        ORLR(inference="map").fit(train.bags, train.label_sets),
        SIM(lam=1e-6, n_outer=2, n_inner=20).fit(train.bags, train.label_sets),
        SoftmaxRegression().fit(train.bags, train.instance_labels),
        MajorityClass().fit(train.bags, train.instance_labels),
    ]
    for est in models:
        folder = est.save(tmp_path / type(est).__name__)
        meta = json.loads((folder / "metadata.json").read_text())
        assert set(meta) == METADATA_KEYS and meta["estimator"] == type(est).__name__
        back = BagClassifier.load(folder)
        assert type(back) is type(est) and back.get_params() == est.get_params()
        for a, b in zip(est.predict_proba(test.bags), back.predict_proba(test.bags)):
            np.testing.assert_array_equal(a, b)
        for a, b in zip(est.predict(test.bags, test.label_sets), back.predict(test.bags, test.label_sets)):
            np.testing.assert_array_equal(a, b)
        np.testing.assert_array_equal(est.bag_scores(test.bags), back.bag_scores(test.bags))
        assert type(type(est).load(folder)) is type(est)


def test_load_checks_the_estimator_name_and_every_array_shape(tmp_path, data):
    train, _ = data
    folder = SoftmaxRegression().fit(train.bags, train.instance_labels).save(tmp_path / "s")
    meta = json.loads((folder / "metadata.json").read_text())
    (folder / "metadata.json").write_text(json.dumps({**meta, "estimator": "Nope"}))
    with pytest.raises(ValueError, match="does not describe an orlr-ppl estimator"):
        BagClassifier.load(folder)
    (folder / "metadata.json").write_text(json.dumps({**meta, "n_classes": 3}))
    with pytest.raises(ValueError, match=r"params.npz holds arrays whose shapes do not match"):
        BagClassifier.load(folder)


def test_subclasses_register_for_load(tmp_path, data):
    train, test = data

    class ShiftedMajority(MajorityClass):  # defined here, unknown to orlr_ppl: joins the registry
        pass

    est = ShiftedMajority().fit(train.bags, train.instance_labels)
    back = BagClassifier.load(est.save(tmp_path / "m"))
    assert type(back) is ShiftedMajority
    np.testing.assert_array_equal(back.predict_bags(test.bags), est.predict_bags(test.bags))


def test_load_errors_name_the_file(tmp_path, fitted):
    folder = fitted.save(tmp_path / "m")
    (folder / "params.npz").unlink()
    with pytest.raises(ValueError, match=r"params.npz is missing"):
        ORLR.load(folder)
    folder = fitted.save(tmp_path / "t")
    text = (folder / "metadata.json").read_text()
    (folder / "metadata.json").write_text(text[: len(text) // 2])
    with pytest.raises(ValueError, match=r"metadata.json is not valid JSON"):
        ORLR.load(folder)
    folder = fitted.save(tmp_path / "x")
    meta = json.loads((folder / "metadata.json").read_text())
    meta["n_features"] = 3
    (folder / "metadata.json").write_text(json.dumps(meta))
    with pytest.raises(ValueError, match=r"params.npz: the feature map does not map 3 features"):
        ORLR.load(folder)
    folder = fitted.save(tmp_path / "y")
    (folder / "params.npz").write_bytes(b"not a zip")
    with pytest.raises(ValueError, match=r"params.npz is unreadable"):
        ORLR.load(folder)
    with pytest.raises(ValueError, match="holds a ORLR, not a MajorityClass"):
        MajorityClass.load(fitted.save(tmp_path / "z"))


FORMAT_1_PARAMS = {
    "method": "map", "prior_scale": "auto", "intercept_scale": 10.0, "fit_intercept": True,
    "n_classes": None, "max_labels": 8, "max_iter": 150, "m_steps": 10, "tol": 1e-6, "num_warmup": 300,
    "num_samples": 1000, "num_chains": 4, "max_num_samples": None, "dense_mass": False, "whiten": False,
    "target_accept": None, "init": "map", "guide": "normal", "svi_steps": 3000, "learning_rate": 0.01,
    "subsample_size": None, "max_predict_draws": 200, "progress_bar": True, "random_state": None,
    "standardize": True, "prune": 0.0, "bag_fraction": 1.0, "canonical_shapes": True, "novel_class": False,
    "leak": None, "prior": "normal", "kernel": None, "gamma": "auto", "dictionary_size": None,
    "nystroem": False, "cv_folds": 3, "cv_scoring": "log_likelihood",
}  # fmt: skip
"""An ORLR's ``params`` as orlr-ppl 0.1 saved them (format 1: no "format" key), with "auto" chosen."""


def test_a_model_saved_in_the_old_format_loads_and_a_newer_one_is_named(tmp_path, fitted, data):
    _, test = data
    folder = ORLR(inference=MAP(max_iter=150), prior_scale=0.3).fit(data[0]).save(tmp_path / "old")
    meta = json.loads((folder / "metadata.json").read_text())
    assert meta["format"] == 2 and meta["params"]["inference"] == {
        "method": "map",
        "max_iter": 150,
        "tol": MAP.tol,
    }
    del meta["format"]
    meta["params"] = FORMAT_1_PARAMS
    meta["fitted"]["prior_scale_"] = 0.3  # what "auto" chose, as 0.1 recorded it
    (folder / "metadata.json").write_text(json.dumps(meta))
    old = ORLR.load(folder)
    assert old.get_params()["inference"] == MAP(max_iter=150) and old.prior_scale == 0.3
    assert ORLR.load(old.save(tmp_path / "new")).get_params() == old.get_params()  # saved as format 2
    meta["format"] = 9
    (folder / "metadata.json").write_text(json.dumps(meta))
    with pytest.raises(ValueError, match=r"model format 9, saved by orlr-ppl .* reads formats 1 to 2") as err:
        ORLR.load(folder)
    assert "\n" not in str(err.value)


def test_bad_input_messages(fitted, data):
    train, _ = data
    with pytest.raises(ValueError, match="got 2 bags but 1 label sets"):
        ORLR().fit(train.bags[:2], train.label_sets[:1])
    with pytest.raises(ValueError, match="bag 0 has 5 features, expected 64"):
        fitted.predict([np.ones((2, 5))])
    with pytest.raises(ValueError, match=r"bag 0 has label\(s\) \[12\] outside \[0, 10\)"):
        fitted.predict(train.bags[:1], [[12]])
    with pytest.raises(ValueError, match=r"bag 1 has label\(s\) \[10\] outside \[0, 10\)"):
        ORLR(n_classes=10).fit(train.bags[:2], [[0], [10]])
    with pytest.raises(ValueError, match="instance labels \\[11\\] outside"):
        SoftmaxRegression(n_classes=10).fit(train.bags[:1], [np.full(len(train.bags[0]), 11)])


class Asked(Exception):
    """Raised by ``nuts_asked``'s stand-in for the chains, carrying the sampler settings they were given."""


@pytest.fixture
def nuts_asked(monkeypatch):
    """NUTS's ``Chains`` replaced by a stand-in that raises ``Asked(settings)`` (``NUTSSettings``): what
    the estimator, through ``fit_nuts``, asks the compiled sampler for."""
    from orlr_ppl.inference.posterior import nuts

    def chains(keys, inits, arrays, scales, shape, settings, *args):
        raise Asked(settings)

    monkeypatch.setattr(nuts, "Chains", chains)


def test_dense_mass_reaches_the_sampler_from_the_estimator_and_the_command_line(nuts_asked, data):
    """``NUTS(dense_mass=True)`` and ``orlr-ppl fit --dense-mass`` ask NUTS for a dense mass matrix
    (``test_nuts`` checks that the sampler then adapts one)."""
    from orlr_ppl.cli.commands import estimator_from_args
    from orlr_ppl.cli.main import build_parser

    train, _ = data
    for dense in (False, True):
        with pytest.raises(Asked) as asked:
            ORLR(inference=NUTS(init="zeros", dense_mass=dense)).fit(train.bags, train.label_sets)
        assert asked.value.args[0].dense_mass is dense
    args = build_parser().parse_args(["fit", "--method", "nuts", "--dense-mass"])
    assert estimator_from_args(args).inference.dense_mass is True
    assert (
        estimator_from_args(build_parser().parse_args(["fit", "--method", "nuts"])).inference.dense_mass
        is False
    )


def test_whiten_reaches_the_sampler_from_the_estimator_and_the_command_line(nuts_asked, data):
    """``NUTS(whiten=True)`` and ``orlr-ppl fit --whiten always`` ask NUTS for Laplace-whitened weights,
    False and ``never`` for none (``test_nuts`` checks what the sampler does with it and what "auto",
    the default, decides)."""
    from orlr_ppl.cli.commands import estimator_from_args
    from orlr_ppl.cli.main import build_parser

    train, _ = data
    for whiten in (False, True):
        with pytest.raises(Asked) as asked:
            ORLR(inference=NUTS(init="zeros", whiten=whiten)).fit(train.bags, train.label_sets)
        assert bool(asked.value.args[0].whitened) is whiten
    for flag, value in (("always", True), ("never", False), ("auto", "auto")):
        args = build_parser().parse_args(["fit", "--method", "nuts", "--whiten", flag])
        assert estimator_from_args(args).inference.whiten == value
    plain = estimator_from_args(build_parser().parse_args(["fit", "--method", "nuts"]))
    assert plain.inference.whiten == "auto" and NUTS().whiten == "auto"
    with pytest.raises(ValueError, match="--whiten: NUTS settings"):
        estimator_from_args(build_parser().parse_args(["fit", "--method", "map", "--whiten", "always"]))
    with pytest.raises(ValueError, match=r"NUTS\(whiten=1\): choose 'auto', True or False"):
        NUTS(whiten=1)


def test_old_argument_names_raise_a_type_error_naming_the_new_spelling():
    """orlr-ppl 0.1's flat arguments are refused, each with its new spelling; nothing is ignored."""
    with pytest.raises(TypeError, match=r"num_chains= is now inference=NUTS\(num_chains=\.\.\.\)"):
        ORLR(method="nuts", num_chains=2)
    with pytest.raises(TypeError, match=r"method= is now inference="):
        ORLR(method="map")
    with pytest.raises(
        TypeError, match=r"gamma= is now features=make_pipeline\(.*RBFDictionary\(gamma=.*ORLRCV"
    ):
        ORLR(kernel="rbf", gamma=0.5)
    with pytest.raises(TypeError, match=r"standardize= is now features='standard'"):
        ORLR(standardize=False)
    with pytest.raises(TypeError, match=r"cv_folds= is now ORLRCV\(cv=\.\.\.\)"):
        ORLR(cv_folds=5)
    with pytest.raises(TypeError, match=r"ORLR\(\) got argument\(s\).*no_such= is no argument"):
        ORLR(no_such=1)
    with pytest.raises(ValueError, match=r"prior_scale='auto'.*ORLRCV"):
        ORLR(prior_scale="auto").fit([np.ones((2, 3))], [[0, 1]])


def test_settings_objects_check_their_values_and_show_what_differs():
    from orlr_ppl import SVI, RBFDictionary

    assert repr(ORLR(inference=NUTS(num_chains=2), features=RBFDictionary(gamma=0.5))) == (
        "ORLR(features=RBFDictionary(gamma=0.5), inference=NUTS(num_chains=2))"
    )
    assert repr(EM()) == "EM()" and EM.max_iter == 200 and MAP.max_iter == 1000
    for bad, match in [
        (lambda: NUTS(num_chains=0), r"NUTS\(num_chains=0\)"),
        (lambda: NUTS(target_accept=1.0), "strictly between 0 and 1"),
        (lambda: NUTS(init="median"), "'map' or 'zeros'"),
        (lambda: EM(bag_fraction=0.0), r"in \(0, 1\]"),
        (lambda: SVI(guide="full"), "'normal' or 'lowrank'"),
        (lambda: SVI(init="median"), r"SVI\(init='median'\): choose 'map' or 'zeros'"),
        (lambda: RBFDictionary(gamma=-1.0).fit(np.ones((3, 2))), "positive width"),
        (lambda: MAP(tol=-1.0), "gradient tolerance >= 0"),
    ]:
        with pytest.raises(ValueError, match=match):
            bad()
    with pytest.raises(ValueError, match="inference='nope'"):
        ORLR(inference="nope").fit([np.ones((2, 3))], [[0, 1]])
    # One definition of each default: the inference functions take the settings' values.
    import inspect

    from orlr_ppl.inference.point.em import fit_em
    from orlr_ppl.inference.posterior.nuts import fit_nuts

    assert inspect.signature(fit_em).parameters["max_iter"].default == EM.max_iter
    assert inspect.signature(fit_nuts).parameters["method"].default is None  # NUTS()'s, from the object


def test_whiten_refuses_a_fit_too_large_to_whiten_before_any_fitting(nuts_asked, data, monkeypatch):
    """A whitening keeps dense (P, P) matrices: above ``MAX_WHITENED`` parameters the estimator says so,
    with P and what to change, before the MAP start or the sampler (the CLI makes it exit code 2)."""
    from orlr_ppl.inference.posterior import chain_setup

    train, _ = data
    n_classes = len(set().union(*map(set, train.label_sets)))
    n_params = (train.bags[0].shape[1] + 1) * (n_classes - 1)  # weights and intercepts, sum-to-zero basis
    monkeypatch.setattr(chain_setup, "MAX_WHITENED", n_params - 1)
    with pytest.raises(ValueError, match=f"{n_params:,} weights and intercepts.*whiten=False"):
        ORLR(inference=NUTS(init="map", whiten=True)).fit(train.bags, train.label_sets)
    monkeypatch.setattr(chain_setup, "MAX_WHITENED", n_params)
    with pytest.raises(Asked):  # at the limit it goes on to the sampler
        ORLR(inference=NUTS(init="zeros", whiten=True)).fit(train.bags, train.label_sets)


def test_target_accept_reaches_the_sampler_with_the_prior_s_default_and_is_checked(nuts_asked, data):
    """``NUTS(target_accept=...)`` / ``--target-accept`` set NUTS's step-size target; None gives 0.98
    under the horseshoe and 0.8 otherwise; a value outside (0, 1) is refused before any fitting."""
    from orlr_ppl.cli.commands import estimator_from_args
    from orlr_ppl.cli.main import build_parser

    train, _ = data
    cases = [("normal", None, 0.8), ("group_horseshoe", None, 0.98), ("group_horseshoe", 0.9, 0.9)]
    for prior, given, expected in cases:
        with pytest.raises(Asked) as asked:
            ORLR(inference=NUTS(init="zeros", target_accept=given), prior=prior).fit(
                train.bags, train.label_sets
            )
        assert asked.value.args[0].target_accept_prob == pytest.approx(expected)
    for bad in (0.0, 1.0, 1.5):
        with pytest.raises(
            ValueError, match=rf"NUTS\(target_accept={bad}\): give a probability strictly between 0 and 1"
        ):
            NUTS(target_accept=bad)
    args = build_parser().parse_args(["fit", "--method", "nuts", "--target-accept", "0.9"])
    assert estimator_from_args(args).inference.target_accept == 0.9
    plain = estimator_from_args(build_parser().parse_args(["fit", "--method", "nuts"]))
    assert plain.inference.target_accept is None


def _brute_label_set_probability(p: np.ndarray, label_set, n_named: int, leak: float = 0.0) -> float:
    """``P(Y | X)`` by enumerating every instance labelling: the named labels' union, each label of
    ``Y`` that no instance carries switched on by the leak, and no leak on a class outside ``Y``."""
    import itertools

    want, total = set(int(c) for c in label_set), 0.0
    for z in itertools.product(range(p.shape[1]), repeat=len(p)):
        union = {c for c in z if c < n_named}
        if not union <= want:
            continue
        chance = np.prod([p[i, c] for i, c in enumerate(z)])
        total += chance * leak ** len(want - union) * (1 - leak) ** (n_named - len(want))
    return float(total)


@pytest.mark.parametrize("variant", ["point", "laplace", "novel_leak"])
def test_bag_log_likelihood_is_each_label_sets_log_predictive_probability(variant):
    """Against enumeration on small bags: the point estimate's ``log P(Y_b | X_b)``, the log of its
    mean over a posterior's draws, and the relaxed union's (a novel class and a leak)."""
    rng = np.random.default_rng(0)
    labels = [rng.integers(0, 3, size=int(rng.integers(1, 4))) for _ in range(24)]
    bags = [rng.normal(size=(len(y), 2)) + y[:, None] for y in labels]
    sets = [sorted(set(y.tolist())) for y in labels]
    kwargs = {
        "point": {},
        "laplace": {"inference": "laplace"},
        "novel_leak": {"novel_class": True, "leak": 0.1},
    }
    model = ORLR(random_state=0, max_predict_draws=40, **kwargs[variant]).fit(bags, sets)
    got = model.bag_log_likelihood(bags[:6], sets[:6])
    w, b = (
        (model.coef_draws_, model.intercept_draws_)
        if variant == "laplace"
        else (model.coef_[None], model.intercept_[None])
    )
    leak = 0.1 if variant == "novel_leak" else 0.0
    for k in range(6):
        x = model.feature_map_.transform(bags[k])
        per_draw = [
            _brute_label_set_probability(softmax(x @ ws + bs, axis=1), sets[k], 3, leak)
            for ws, bs in zip(w, b)
        ]
        assert got[k] == pytest.approx(np.log(np.mean(per_draw)), rel=1e-4)
    one = [bags[0][:1]]  # one instance, two labels: possible only by the leak
    if variant == "novel_leak":
        assert np.isfinite(model.bag_log_likelihood(one, [[0, 1]])).all()
    else:
        with pytest.raises(ValueError, match="bag 0"):
            model.bag_log_likelihood(one, [[0, 1]])


def test_bag_log_likelihood_needs_probabilities(data):
    train, _ = data
    sim = SIM().fit(train.bags[:20], train.label_sets[:20])
    with pytest.raises(ValueError, match="margins, not probabilities"):
        sim.bag_log_likelihood(train.bags[:2], train.label_sets[:2])


def test_compatibility_with_0_1_is_removed_on_time():
    """0.1's arguments and folders are read until the release ``COMPAT_REMOVED_IN``: from that version
    on this test fails until ``persistence``'s compatibility section is deleted."""
    from orlr_ppl import __version__
    from orlr_ppl.estimators import persistence

    version = tuple(int(part) for part in __version__.split(".")[:2])
    assert version < persistence.COMPAT_REMOVED_IN, "remove persistence's compatibility with orlr-ppl 0.1"
