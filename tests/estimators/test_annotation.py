"""Active annotation: acquisition scores, the one-per-bag batch, and ``ORLR.query`` against enumeration."""

from __future__ import annotations

import itertools
import warnings

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from reference import brute_force_variants
from scipy.special import softmax

from orlr_ppl import ORLR, SVI, MIMLData
from orlr_ppl.estimators.annotation import acquisition_scores, diverse_order, entropy, with_known_labels
from orlr_ppl.inference.checks.diagnostics import ConvergenceWarning


def _clusters(n_bags: int = 24, seed: int = 0):
    rng = np.random.default_rng(seed)
    centres = np.array([[2.0, 0.0], [-1.0, 1.7], [-1.0, -1.7]])
    labels = [rng.integers(0, 3, size=rng.integers(1, 5)) for _ in range(n_bags)]
    bags = [centres[y] + rng.normal(size=(len(y), 2)) for y in labels]
    return bags, [np.unique(y) for y in labels], labels


@pytest.fixture(scope="module")
def map_fit():
    bags, sets, labels = _clusters()
    return ORLR(inference="map", random_state=0).fit(bags, sets), (bags, sets, labels)


@pytest.fixture(scope="module")
def svi_fit():
    bags, sets, labels = _clusters()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        model = ORLR(inference=SVI(num_steps=300, num_draws=60, progress_bar=False), random_state=0)
        return model.fit(bags, sets), (bags, sets, labels)


# -- the scores and the batch ---------------------------------------------------


def test_scores_are_the_formulas():
    # Two draws that disagree (instance 0) against two that agree on the same mean (instance 1).
    per_draw = np.array([[[0.9, 0.1, 0.0], [0.5, 0.5, 0.0]], [[0.1, 0.9, 0.0], [0.5, 0.5, 0.0]]])
    rng = np.random.default_rng(0)
    np.testing.assert_allclose(acquisition_scores(per_draw, "entropy", rng), [np.log(2)] * 2)
    h_draw = -(0.9 * np.log(0.9) + 0.1 * np.log(0.1))
    np.testing.assert_allclose(
        acquisition_scores(per_draw, "bald", rng), [np.log(2) - h_draw, 0.0], atol=1e-12
    )
    np.testing.assert_allclose(acquisition_scores(per_draw, "margin", rng), [1.0, 1.0])
    assert acquisition_scores(per_draw[:1], "bald", rng) == pytest.approx([0.0, 0.0])  # one draw: no MI
    assert acquisition_scores(per_draw[:1], "margin", rng) == pytest.approx([0.2, 1.0])
    random = acquisition_scores(per_draw, "random", rng)
    assert random.shape == (2,) and np.all((0 <= random) & (random < 1))
    assert entropy(np.array([1.0, 0.0, 0.0])) == 0.0
    with pytest.raises(ValueError, match="strategy='best'"):
        acquisition_scores(per_draw, "best", rng)


def test_diverse_order_takes_each_bags_best_before_any_second():
    scores = np.array([0.9, 0.8, 0.1, 0.5, 0.7, 0.2])
    bags = np.array([0, 0, 0, 1, 2, 2])
    # Round 1: each bag's best (0.9, 0.7, 0.5) by score; round 2: 0.8, 0.2; round 3: 0.1.
    assert diverse_order(scores, bags).tolist() == [0, 4, 3, 1, 5, 2]


@given(st.lists(st.tuples(st.integers(0, 4), st.floats(0, 1)), min_size=1, max_size=30))
def test_diverse_order_is_a_permutation_by_rounds(items):
    bags = np.array([b for b, _ in items])
    scores = np.array([s for _, s in items])
    order = diverse_order(scores, bags)
    assert sorted(order.tolist()) == list(range(len(items)))
    seen: dict[int, int] = {}
    rounds = []
    for i in order:
        seen[bags[i]] = seen.get(bags[i], 0) + 1
        rounds.append(seen[bags[i]])
    assert rounds == sorted(rounds)  # every bag's k-th pick before any bag's (k+1)-th
    for b in set(bags.tolist()):  # within a bag, best first
        picked = scores[[i for i in order if bags[i] == b]]
        assert np.all(np.diff(picked) <= 0)


def test_known_labels_are_point_masses():
    logits = np.zeros((2, 3, 4))
    out = with_known_labels(logits, np.array([-1, 2, -1]))
    np.testing.assert_array_equal(out[:, [0, 2]], 0.0)
    assert softmax(out[0, 1]) == pytest.approx([0, 0, 1, 0], abs=0)
    np.testing.assert_array_equal(logits, 0.0)  # the input is untouched


# -- ORLR.query ------------------------------------------------------------------


def _enumerated_posterior(logits: np.ndarray, label_set: np.ndarray, known: np.ndarray) -> np.ndarray:
    """(n, C) p(y_i = c | Y_b, y_known) by enumerating every labelling of the bag."""
    p = softmax(logits.astype(np.float64), axis=1)
    n, c = p.shape
    out = np.zeros((n, c))
    for ys in itertools.product(range(c), repeat=n):
        if set(ys) != set(label_set.tolist()) or any(k >= 0 and y != k for y, k in zip(ys, known)):
            continue
        weight = np.prod([p[i, y] for i, y in enumerate(ys)])
        out[np.arange(n), ys] += weight
    return out / out.sum(axis=1, keepdims=True)


@pytest.mark.parametrize("fit", ["map_fit", "svi_fit"])
def test_posteriors_given_known_labels_match_enumeration(fit, request):
    model, (bags, sets, labels) = request.getfixturevalue(fit)
    feats = model._check_bags(bags)
    checked = model._check_sets(feats, sets)
    big = [b for b in range(len(bags)) if len(bags[b]) >= 3 and len(sets[b]) >= 2][:3]
    known = [np.full(len(x), -1) for x in bags]
    for b in big:
        known[b][0] = labels[b][0]
    per_draw = model._conditioned_on_known(feats, checked, known, model._posteriors_per_draw(feats, checked))
    w, beta = model._draws()
    for b in big:
        for s in range(0, len(w), max(len(w) // 4, 1)):
            expected = _enumerated_posterior(feats[b] @ w[s] + beta[s], sets[b], known[b])
            np.testing.assert_allclose(per_draw[b][s], expected, atol=2e-5)


RELAXATIONS = [{"leak": "learn"}, {"leak": 0.05, "novel_class": True}]


@pytest.mark.parametrize("relaxation", RELAXATIONS)
def test_relaxed_models_condition_on_known_labels_exactly(relaxation):
    """With a leak or a novel class, a known label conditions its bag-mates as the relaxed union
    says: enumeration over labellings and leak patterns (``reference.brute_force_variants``)."""
    bags, sets, labels = _clusters(seed=1)
    model = ORLR(inference="map", random_state=0, **relaxation).fit(bags, sets)
    feats = model._check_bags(bags)
    checked = model._check_sets(feats, sets)
    n_classes = model.n_classes_
    big = [b for b in range(len(bags)) if len(bags[b]) >= 3 and len(sets[b]) >= 2][:3]
    known = [np.full(len(x), -1) for x in bags]
    for j, b in enumerate(big):  # with a novel class, one bag's known instance takes it
        known[b][0] = n_classes if relaxation.get("novel_class") and j == 0 else labels[b][0]
    per_draw = model._conditioned_on_known(feats, checked, known, model._posteriors_per_draw(feats, checked))
    w, beta = model._draws()
    eps = model._leak_draws(1)
    optional = (n_classes,) if relaxation.get("novel_class") else ()
    for b in big:
        leak = None if eps is None else [eps[0]] * len(sets[b])
        _, expected = brute_force_variants(feats[b] @ w[0] + beta[0], sets[b], optional, leak, known[b])
        np.testing.assert_allclose(per_draw[b][0], expected, atol=2e-5)
        assert per_draw[b][0][0, known[b][0]] == pytest.approx(1.0)
    table = model.query(bags, 5, "entropy", label_sets=sets, instance_labels=known)
    assert len(table) == 5 and not {(b, 0) for b in big} & set(zip(table["bag_id"], table["instance"]))


def test_query_skips_labelled_instances_and_takes_one_per_bag(map_fit):
    model, (bags, sets, labels) = map_fit
    table = model.query(bags, 6, "entropy", label_sets=sets)
    assert len(table) == 6 and table["bag_id"].is_unique
    assert list(table.columns[:3]) == ["bag_id", "instance", "score"]
    assert np.all(np.diff(table["score"]) <= 0)
    # A bag with one label leaves nothing uncertain.
    singles = {b for b, s in enumerate(sets) if len(s) == 1}
    assert not singles & set(table["bag_id"])
    known = [np.full(len(x), -1) for x in bags]
    for bag, i in zip(table["bag_id"], table["instance"]):
        known[bag][i] = labels[bag][i]
    again = model.query(bags, 6, "entropy", label_sets=sets, instance_labels=known)
    queried = set(zip(table["bag_id"], table["instance"]))
    assert not queried & set(zip(again["bag_id"], again["instance"]))
    # Everything labelled: nothing left to ask.
    assert model.query(bags, 3, "random", label_sets=sets, instance_labels=labels).empty


def test_a_two_label_pair_is_resolved_by_labelling_one(map_fit):
    model, _ = map_fit
    bags = [np.array([[0.5, 0.3], [0.4, 0.2]])]
    before = model.query(bags, 2, "entropy", label_sets=[[0, 1]])
    assert before["score"].min() > 0
    after = model.query(bags, 2, "entropy", label_sets=[[0, 1]], instance_labels=[[0, -1]])
    assert after["instance"].tolist() == [1] and after["score"].iloc[0] == pytest.approx(0.0, abs=1e-9)
    assert after["class_1"].iloc[0] == "1" and after["p_1"].iloc[0] == pytest.approx(1.0)


def test_bald_needs_a_posterior_and_ranks_by_mutual_information(map_fit, svi_fit):
    model, (bags, sets, _) = map_fit
    with pytest.raises(ValueError, match="needs a posterior.*inference='laplace', 'nuts'"):
        model.query(bags, 3, "bald", label_sets=sets)
    posterior, _ = svi_fit
    table = posterior.query(bags, 5, "bald", label_sets=sets)
    mi = np.concatenate([u[:, 1] for u in posterior.predict_uncertainty(bags, sets)])
    offsets = np.r_[0, np.cumsum([len(x) for x in bags])]
    np.testing.assert_allclose(table["score"], mi[offsets[table["bag_id"]] + table["instance"]], rtol=1e-6)


def test_query_reads_a_miml_data_and_refuses_bad_input(map_fit):
    model, (bags, sets, labels) = map_fit
    data = MIMLData(bags, sets, labels, bag_ids=[f"rec{b}" for b in range(len(bags))])
    table = model.query(data, 4, "margin")
    assert all(str(b).startswith("rec") for b in table["bag_id"])
    with pytest.raises(ValueError, match="strategy='best'"):
        model.query(data, 4, "best")
    with pytest.raises(ValueError, match="n=0"):
        model.query(data, 0, "entropy")
    wrong = [np.full(len(x), -1) for x in bags]
    b = next(b for b, s in enumerate(sets) if len(s) < 3)
    wrong[b][0] = next(c for c in range(3) if c not in sets[b])
    with pytest.raises(ValueError, match=f"bag {b}, instance 0 has known label"):
        model.query(data, 4, "entropy", instance_labels=wrong)
