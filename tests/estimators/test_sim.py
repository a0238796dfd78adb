"""The rank-loss Support Instance Machine baseline (``orlr_ppl.estimators.sim``, ``sim_objective``)."""

from __future__ import annotations

import json

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from conftest import precision
from scipy.special import softmax
from sklearn.base import clone

from orlr_ppl.data.container import MIMLData
from orlr_ppl.data.datasets import make_miml_digits
from orlr_ppl.estimators.sim import LAMBDA_GRID, SIM, Scaling
from orlr_ppl.estimators.sim_objective import (
    Pairs,
    frozen_objective,
    frozen_subgradient,
    make_pairs,
    objective,
    pad_bags,
    sim_path,
    support_instances,
)
from orlr_ppl.evaluation.metrics import instance_accuracy
from orlr_ppl.features.saving import array_keys, from_saved

# -- plain-loop references of the published formulas ---------------------------


def small_problem(seed: int = 0, n_bags: int = 7, d: int = 3, n_classes: int = 5):
    """Ragged bags with varied label-set sizes, including one bag holding every class."""
    rng = np.random.default_rng(seed)
    bags, sets = [], []
    for b in range(n_bags):
        n = int(rng.integers(1, 6))
        bags.append(rng.normal(size=(n, d)))
        k = n_classes if b == 0 else int(rng.integers(1, min(n, n_classes - 1) + 1))
        sets.append(np.sort(rng.choice(n_classes, size=k, replace=False)))
    return bags, sets, n_classes


def ref_support(W, bag, c):
    scores = [float(W[:, c] @ x) for x in bag]
    top = max(scores)
    alpha = [np.exp(s - top) for s in scores]
    total = sum(alpha)
    return sum(a / total * x for a, x in zip(alpha, bag))


def ref_objective(W, bags, sets, n_classes, lam, xhat=None):
    """The SIM objective, one bag, one pair at a time (true, or frozen at ``xhat[b][c]``)."""
    loss = 0.0
    for b, (bag, labels) in enumerate(zip(bags, sets)):
        absent = [k for k in range(n_classes) if k not in labels]
        if not absent:
            continue  # no pairs; B below still counts the bag
        sup = (
            (lambda c, b=b, bag=bag: ref_support(W, bag, c)) if xhat is None else (lambda c, b=b: xhat[b][c])
        )
        for j in labels:
            for k in absent:
                margin = 1.0 - (W[:, j] @ sup(j) - W[:, k] @ sup(k))
                loss += max(0.0, margin) / (len(bags) * len(labels) * len(absent))
    return 0.5 * lam * np.sum(W**2) + loss


def ref_subgradient(W, xhat, sets, n_classes, lam):
    grad = lam * W.copy()
    for b, labels in enumerate(sets):
        absent = [k for k in range(n_classes) if k not in labels]
        for j in labels:
            for k in absent:
                if 1.0 - (W[:, j] @ xhat[b][j] - W[:, k] @ xhat[b][k]) > 0:
                    scale = 1.0 / (len(sets) * len(labels) * len(absent))
                    grad[:, j] -= scale * xhat[b][j]
                    grad[:, k] += scale * xhat[b][k]
    return grad


def jax_problem(bags, sets, n_classes):
    x, mask = pad_bags(bags)
    y = np.zeros((len(bags), n_classes), int)
    for b, s in enumerate(sets):
        y[b, s] = 1
    return jnp.asarray(x), jnp.asarray(mask), Pairs(*(jnp.asarray(a) for a in make_pairs(y)))


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_vectorised_objective_matches_loop_reference(seed):
    bags, sets, n_classes = small_problem(seed)
    rng = np.random.default_rng(100 + seed)
    with precision("float64"):
        x, mask, pairs = jax_problem(bags, sets, n_classes)
        for W in (
            np.zeros((3, n_classes)),
            rng.normal(size=(3, n_classes)),
            5 * rng.normal(size=(3, n_classes)),
        ):
            got = float(objective(jnp.asarray(W), x, mask, pairs, 0.3))
            assert got == pytest.approx(ref_objective(W, bags, sets, n_classes, 0.3), rel=1e-12, abs=1e-12)
            xhat = np.asarray(support_instances(jnp.asarray(W), x, mask))
            for b, bag in enumerate(bags):
                for c in range(n_classes):
                    np.testing.assert_allclose(xhat[b, c], ref_support(W, bag, c), rtol=1e-12, atol=1e-12)
    # At W = 0 every pair has margin 1: the loss is the share of bags with an absent class.
    assert ref_objective(np.zeros((3, n_classes)), bags, sets, n_classes, 0.3) == pytest.approx(6 / 7)


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_frozen_subgradient_matches_loop_reference_and_finite_differences(seed):
    bags, sets, n_classes = small_problem(seed)
    rng = np.random.default_rng(200 + seed)
    lam = 0.05
    with precision("float64"):
        x, mask, pairs = jax_problem(bags, sets, n_classes)
        W_freeze = rng.normal(size=(3, n_classes))
        xhat = support_instances(jnp.asarray(W_freeze), x, mask)
        xhat_np = np.asarray(xhat)
        W = rng.normal(size=(3, n_classes))
        got = np.asarray(frozen_subgradient(jnp.asarray(W), xhat, pairs, lam))
        np.testing.assert_allclose(
            got, ref_subgradient(W, xhat_np, sets, n_classes, lam), rtol=1e-12, atol=1e-14
        )
        # Frozen objective = the loop formula with the support instances held fixed.
        frozen = float(frozen_objective(jnp.asarray(W), xhat, pairs, lam))
        assert frozen == pytest.approx(ref_objective(W, bags, sets, n_classes, lam, xhat_np), rel=1e-12)
        # Away from the hinge kinks (a random W) the subgradient is the gradient.
        eps, fd = 1e-6, np.zeros_like(W)
        for idx in np.ndindex(*W.shape):
            step = np.zeros_like(W)
            step[idx] = eps
            up = float(frozen_objective(jnp.asarray(W + step), xhat, pairs, lam))
            down = float(frozen_objective(jnp.asarray(W - step), xhat, pairs, lam))
            fd[idx] = (up - down) / (2 * eps)
        np.testing.assert_allclose(got, fd, rtol=1e-6, atol=1e-8)
        auto = np.asarray(jax.grad(frozen_objective)(jnp.asarray(W), xhat, pairs, lam))
        np.testing.assert_allclose(got, auto, rtol=1e-12, atol=1e-14)
        assert np.abs(got - lam * W).max() > 1e-3  # the loss term is not trivially zero here


def test_support_instances_at_zero_are_bag_means():
    bags, sets, n_classes = small_problem(3)
    with precision("float64"):
        x, mask, _ = jax_problem(bags, sets, n_classes)
        xhat = np.asarray(support_instances(jnp.zeros((3, n_classes)), x, mask))
    for b, bag in enumerate(bags):
        np.testing.assert_allclose(xhat[b], np.tile(bag.mean(axis=0), (n_classes, 1)), atol=1e-12)


def test_projection_onto_the_pegasos_ball():
    bags, sets, n_classes = small_problem(4)
    x, mask, pairs = jax_problem(bags, sets, n_classes)
    lam = 1e-6  # the first step -g / lam lands far outside the ball: projection must act
    one = sim_path(x, mask, pairs, jnp.asarray(lam), n_outer=1, n_inner=1)
    assert np.linalg.norm(np.asarray(one.last)) == pytest.approx(np.sqrt(2 / lam), rel=1e-5)
    # After many steps (small ones too) the iterate is still inside the ball.
    path = sim_path(x, mask, pairs, jnp.asarray(lam), n_outer=3, n_inner=20)
    assert np.linalg.norm(np.asarray(path.last)) <= np.sqrt(2 / lam) * (1 + 1e-5)


def ref_path(bags, sets, n_classes, lam, n_outer, n_inner):
    """Pegasos alternation, one step at a time: (every iterate, the objective of each)."""
    W = np.zeros((bags[0].shape[1], n_classes))
    iterates, tau = [W], 0
    for _ in range(n_outer):
        xhat = [[ref_support(W, bag, c) for c in range(n_classes)] for bag in bags]  # frozen at current W
        for _ in range(n_inner):
            tau += 1  # global counter: never restarted
            W = W - ref_subgradient(W, xhat, sets, n_classes, lam) / (lam * tau)
            W = W * min(1.0, np.sqrt(2 / lam) / np.linalg.norm(W))
            iterates.append(W)
    return iterates, [ref_objective(V, bags, sets, n_classes, lam) for V in iterates]


@pytest.mark.parametrize("lam", [0.3, 0.01])
def test_path_matches_stepwise_reference_and_keeps_the_best_iterate(lam):
    bags, sets, n_classes = small_problem(5)
    iterates, objs = ref_path(bags, sets, n_classes, lam, n_outer=3, n_inner=4)
    with precision("float64"):
        x, mask, pairs = jax_problem(bags, sets, n_classes)
        path = sim_path(x, mask, pairs, jnp.asarray(lam), n_outer=3, n_inner=4)
        np.testing.assert_allclose(np.asarray(path.history), objs, rtol=1e-10)
        np.testing.assert_allclose(np.asarray(path.last), iterates[-1], rtol=1e-10, atol=1e-12)
        best = int(np.argmin(objs))
        np.testing.assert_allclose(np.asarray(path.W), iterates[best], rtol=1e-10, atol=1e-12)
        assert float(path.objective) == pytest.approx(min(objs), rel=1e-12)
        assert min(objs) <= objs[0]


def test_best_iterate_can_be_the_start():
    bags, sets, n_classes = small_problem(4)
    x, mask, pairs = jax_problem(bags, sets, n_classes)
    # One huge first step lands on the ball where lam / 2 ||W||^2 = 1 > F(0) = 6 / 7: W = 0 is kept.
    one = sim_path(x, mask, pairs, jnp.asarray(1e-6), n_outer=1, n_inner=1)
    assert float(one.history[1]) > float(one.history[0]) == pytest.approx(6 / 7)
    assert np.all(np.asarray(one.W) == 0) and np.any(np.asarray(one.last) != 0)


def test_held_out_bags_drop_out_of_the_objective():
    bags, sets, n_classes = small_problem(6, n_bags=9)
    keep = np.array([1, 2, 4, 5, 8])
    active = np.isin(np.arange(9), keep)
    y = np.zeros((9, n_classes), int)
    for b, s in enumerate(sets):
        y[b, s] = 1
    pairs = make_pairs(y, active)
    n_pos = y.sum(axis=1)
    n_pairs = n_pos * (n_classes - n_pos)  # 0 for bag 0, which holds every class
    expected = np.where(active & (n_pairs > 0), 1 / (len(keep) * np.maximum(n_pairs, 1)), 0.0)
    np.testing.assert_allclose(pairs.weight, expected)
    W = np.random.default_rng(0).normal(size=(3, n_classes))
    with precision("float64"):
        x, mask, _ = jax_problem(bags, sets, n_classes)
        full = objective(jnp.asarray(W), x, mask, Pairs(*(jnp.asarray(a) for a in pairs)), 0.2)
        xs, ms, ps = jax_problem([bags[b] for b in keep], [sets[b] for b in keep], n_classes)
        assert float(full) == pytest.approx(float(objective(jnp.asarray(W), xs, ms, ps, 0.2)), rel=1e-12)


# -- the estimator ---------------------------------------------------------------


@pytest.fixture(scope="module")
def digits():
    return make_miml_digits(150, seed=0, split="train", max_size=4), make_miml_digits(
        100, seed=1, split="test", max_size=4
    )


@pytest.fixture(scope="module")
def fitted(digits):
    train, _ = digits
    return SIM().fit(train.bags, train.label_sets)


def test_lambda_selection(fitted):
    assert fitted.lam_ in LAMBDA_GRID
    assert fitted.cv_scores_.shape == (len(LAMBDA_GRID),)
    assert np.all((fitted.cv_scores_ >= 0) & (fitted.cv_scores_ <= 1))
    assert fitted.lam_ == LAMBDA_GRID[int(np.argmin(fitted.cv_scores_))]
    assert fitted.cv_scores_.min() < 0.1  # held-out bag ranking loss: clearly learnt
    fixed = SIM(lam=1e-5, n_outer=1, n_inner=5).fit([np.ones((2, 3)), np.zeros((1, 3))], [[0, 1], [2]])
    assert fixed.lam_ == 1e-5 and fixed.cv_scores_ is None
    with pytest.raises(ValueError, match="cv=1"):
        SIM(cv=1).fit([np.ones((2, 3)), np.zeros((1, 3))], [[0, 1], [2]])
    with pytest.raises(ValueError, match="lam=-1"):
        SIM(lam=-1).fit([np.ones((2, 3))], [[0, 1]])


def test_best_iterate_is_kept_and_beats_the_mean_instance_start(fitted, digits):
    train, _ = digits
    path = fitted.objective_path_
    assert path.shape == (fitted.n_outer * fitted.n_inner + 1,)
    # Path starts at W = 0 (mean instances): every bag has absent classes, so F(0) = 1.
    assert path[0] == pytest.approx(1.0)
    assert fitted.objective_ == path.min()
    assert fitted.objective_ < 0.5 * path[0]
    # objective_ is the true objective of the returned weights (recomputed in float64),
    # on the standardised features (features="standard") scaled the authors' way.
    scaling = Scaling(fitted.scale_min_, fitted.scale_range_, fitted.center_, fitted.norm_)
    x, mask = pad_bags(
        [scaling.transform((b - fitted.feature_map_.mean_) / fitted.feature_map_.scale_) for b in train.bags]
    )
    y = np.zeros((len(x), 10), int)
    for b, s in enumerate(train.label_sets):
        y[b, s] = 1
    with precision("float64"):
        pairs = Pairs(*(jnp.asarray(a) for a in make_pairs(y)))
        value = float(
            objective(jnp.asarray(fitted.coef_), jnp.asarray(x), jnp.asarray(mask), pairs, fitted.lam_)
        )
    assert value == pytest.approx(fitted.objective_, rel=1e-3)


def test_weights_inside_the_ball_after_fit(fitted, digits):
    train, _ = digits
    assert np.linalg.norm(fitted.coef_) <= np.sqrt(2 / fitted.lam_) * (1 + 1e-5)
    big = SIM(lam=1e-4).fit(train.bags, train.label_sets)
    assert np.linalg.norm(big.coef_) <= np.sqrt(2 / 1e-4) * (1 + 1e-5)


def test_learns_easy_miml_digits(fitted, digits):
    train, test = digits
    flat = np.concatenate(test.instance_labels)
    majority = np.bincount(flat).max() / flat.size
    inductive = fitted.score(test.bags, test.instance_labels)
    transductive = instance_accuracy(test.instance_labels, fitted.predict(test.bags, test.label_sets))
    # Measured (test bags from the held-out image pool): majority 0.13, inductive 0.95, transductive 0.98.
    assert majority < 0.2
    assert inductive > 0.85
    assert transductive >= inductive
    assert instance_accuracy(train.instance_labels, fitted.predict(train.bags, train.label_sets)) > 0.9


def test_transductive_predictions_respect_label_sets(fitted, digits):
    _, test = digits
    proba = fitted.predict_proba(test.bags, test.label_sets)
    labels = fitted.predict(test.bags, test.label_sets)
    for p, y, s, bag in zip(proba, labels, test.label_sets, test.bags):
        assert p.shape == (len(bag), 10)
        np.testing.assert_allclose(p.sum(axis=1), 1.0, atol=1e-12)
        assert np.all(p[:, np.setdiff1d(np.arange(10), s)] == 0)
        assert set(y.tolist()) <= set(s)
        np.testing.assert_array_equal(y, p.argmax(axis=1))
    inductive = fitted.predict_proba(test.bags)
    np.testing.assert_allclose(np.concatenate(inductive).sum(axis=1), 1.0, atol=1e-12)
    scores = fitted.decision_function(test.bags)
    for p, s, y in zip(inductive, scores, fitted.predict(test.bags)):
        np.testing.assert_allclose(p, softmax(s, axis=1))
        np.testing.assert_array_equal(y, s.argmax(axis=1))
    np.testing.assert_allclose(fitted.bag_scores(test.bags), np.stack([s.max(axis=0) for s in scores]))
    with pytest.raises(ValueError, match="outside"):
        fitted.predict(test.bags[:1], [[10]])


def test_scaling_uses_training_statistics_only(fitted, digits):
    train, _ = digits
    raw = np.concatenate(train.bags)
    # The authors' scaling acts on the standardised features (features="standard", the default).
    np.testing.assert_allclose(fitted.feature_map_.mean_, raw.mean(axis=0), atol=1e-12)
    flat = (raw - fitted.feature_map_.mean_) / fitted.feature_map_.scale_
    np.testing.assert_array_equal(fitted.scale_min_, flat.min(axis=0))
    np.testing.assert_array_equal(fitted.scale_range_, flat.max(axis=0) - flat.min(axis=0))
    const = fitted.scale_range_ == 0
    assert const.any()  # digits have always-blank pixels
    unit = np.where(const, 0.0, (flat - fitted.scale_min_) / np.where(const, 1, fitted.scale_range_))
    np.testing.assert_allclose(fitted.center_, unit.mean(axis=0))
    assert float(fitted.norm_) == pytest.approx(np.sqrt(np.sum((unit - unit.mean(axis=0)) ** 2)))
    # A new bag, outside the training range and lighting up constant pixels, uses the stored statistics.
    rng = np.random.default_rng(9)
    new = rng.uniform(-1.0, 2.0, size=(4, 64))
    std = (new - fitted.feature_map_.mean_) / fitted.feature_map_.scale_
    z = np.where(const, 0.0, (std - fitted.scale_min_) / np.where(const, 1, fitted.scale_range_))
    expected = (z - fitted.center_) / fitted.norm_ @ fitted.coef_
    np.testing.assert_allclose(fitted.decision_function([new])[0], expected, rtol=1e-12)
    # Scores of a bag do not depend on which other bags are predicted with it.
    alone = fitted.decision_function([new[:1]])[0]
    np.testing.assert_allclose(alone, fitted.decision_function([new, train.bags[0]])[0][:1], rtol=1e-12)


def test_cross_validation_scales_each_fold_on_its_training_bags(monkeypatch):
    bags, sets, n_classes = small_problem(7, n_bags=12)
    sets = [s[: len(b)] for s, b in zip(sets, bags)]  # bag 0 (every class) may have too few instances
    seen = []
    original = Scaling.fit.__func__

    def spy(cls, flat):
        seen.append(len(flat))
        return original(cls, flat)

    monkeypatch.setattr(Scaling, "fit", classmethod(spy))
    SIM(cv=3, n_outer=1, n_inner=2, n_classes=n_classes).fit(bags, sets)
    folds = np.array_split(np.random.default_rng(0).permutation(12), 3)
    total = sum(len(b) for b in bags)
    expected = [total - sum(len(bags[i]) for i in fold) for fold in folds]
    assert seen == [*expected, total]  # one fit per fold on its training bags, then on all


def test_sklearn_conventions_and_mimldata(digits):
    est = SIM(lam=1e-6, cv=4, n_outer=2, n_inner=7, random_state=3)
    params = est.get_params()
    assert params == {
        "lam": 1e-6,
        "cv": 4,
        "n_outer": 2,
        "n_inner": 7,
        "n_classes": None,
        "max_labels": 16,
        "random_state": 3,
        "features": "standard",
    }
    twin = clone(est)
    assert twin.get_params() == params and twin is not est
    train, _ = digits
    sub = [train.bags[:40], train.label_sets[:40], train.instance_labels[:40]]
    data = MIMLData(bags=sub[0], label_sets=sub[1], instance_labels=sub[2], n_classes=10)
    from_data = clone(est).fit(data)
    from_lists = clone(est).fit(sub[0], sub[1])
    assert from_data.n_classes_ == 10 and from_data.n_features_in_ == 64
    assert from_data.class_names_ == [str(c) for c in range(10)]
    np.testing.assert_array_equal(from_data.coef_, from_lists.coef_)
    broken = MIMLData(bags=[np.ones((1, 2))], label_sets=[[0, 1]])
    with pytest.raises(ValueError, match="union assumption"):
        SIM(lam=1e-6).fit(broken)


def test_saved_arrays_restore_identical_predictions(fitted, digits, tmp_path):
    _, test = digits
    folder = fitted.save(tmp_path / "sim")
    meta = json.loads((folder / "metadata.json").read_text())
    assert meta["estimator"] == "SIM" and meta["fitted"]["lam_"] == fitted.lam_
    # Rebuild the way BagClassifier.load does, so this checks _saved_arrays is complete.
    restored = SIM(**meta["params"])
    restored.n_classes_, restored.n_features_in_ = meta["n_classes"], meta["n_features"]
    with np.load(folder / "params.npz", allow_pickle=False) as arrays:
        assert set(arrays.files) == set(SIM._saved_arrays) | set(array_keys(meta["feature_map"]))
        for k in SIM._saved_arrays:
            setattr(restored, k, np.asarray(arrays[k]))
        restored.feature_map_ = from_saved(meta["feature_map"], dict(arrays), "here")
    restored._check_loaded(folder / "params.npz")
    for a, b in zip(restored.predict_proba(test.bags), fitted.predict_proba(test.bags)):
        np.testing.assert_array_equal(a, b)
    for a, b in zip(restored.predict(test.bags, test.label_sets), fitted.predict(test.bags, test.label_sets)):
        np.testing.assert_array_equal(a, b)


def test_load_round_trip(fitted, digits, tmp_path):
    _, test = digits
    model = SIM.load(fitted.save(tmp_path / "sim"))
    np.testing.assert_array_equal(model.coef_, fitted.coef_)
    for a, b in zip(model.predict(test.bags), fitted.predict(test.bags)):
        np.testing.assert_array_equal(a, b)
