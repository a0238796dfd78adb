"""Metrics on examples computed by hand."""

from __future__ import annotations

import numpy as np
import pytest

from orlr_ppl import metrics

SETS = [[0, 2], [1]]
SCORES = np.array([[0.9, 0.1, 0.5, 0.3], [0.8, 0.6, 0.2, 0.7]])
# Bag 0 ranks 0, 2, 3, 1: perfect. Bag 1 ranks 0, 3, 1, 2 with truth {1}:
# two of its three (present, absent) pairs wrong, top class wrong, class 1 at rank 3.


def test_ranking_metrics_by_hand():
    assert metrics.ranking_loss(SETS, SCORES) == pytest.approx((0 + 2 / 3) / 2)
    assert metrics.one_error(SETS, SCORES) == pytest.approx(0.5)
    assert metrics.coverage(SETS, SCORES) == pytest.approx((1 + 2) / 2)
    assert metrics.average_precision(SETS, SCORES) == pytest.approx((1 + 1 / 3) / 2)


def test_ties_count_against_the_ranker():
    flat = np.ones((1, 3))
    assert metrics.ranking_loss([[0]], flat) == 1.0
    assert metrics.one_error([[0]], flat) == 1.0
    assert metrics.coverage([[0]], flat) == 2.0
    assert metrics.average_precision([[0]], flat) == pytest.approx(1 / 3)


def test_perfect_scores():
    scores = np.array([[3.0, 0.0, 2.0], [0.0, 1.0, 0.5]])
    assert metrics.ranking_loss([[0, 2], [1]], scores) == 0.0
    assert metrics.average_precision([[0, 2], [1]], scores) == 1.0
    assert metrics.coverage([[0, 2], [1]], scores) == pytest.approx((1 + 0) / 2)


def test_hamming_loss_by_hand():
    predicted = np.array([[1, 0, 0, 0], [0, 1, 0, 1]])
    assert metrics.hamming_loss(SETS, predicted) == pytest.approx(0.25)
    assert metrics.hamming_loss(SETS, metrics.multi_hot(SETS, 4)) == 0.0


def test_instance_metrics_by_hand():
    true = [np.array([0, 0]), np.array([1, 1])]
    pred = [np.array([0, 1]), np.array([1, 1])]
    assert metrics.instance_accuracy(true, pred) == 0.75
    assert metrics.macro_f1(true, pred) == pytest.approx((2 / 3 + 0.8) / 2)


def test_expected_calibration_error_by_hand():
    true = [np.array([0, 1]), np.array([1, 0])]
    probs = [np.array([[0.9, 0.1], [0.6, 0.4]]), np.array([[0.2, 0.8], [0.3, 0.7]])]
    # One instance per bin: |1-.9|, |0-.6|, |1-.8|, |0-.7|, each weighted 1/4.
    assert metrics.expected_calibration_error(true, probs) == pytest.approx(0.4)
    perfect = [np.array([[1.0, 0.0], [0.0, 1.0]])]
    assert metrics.expected_calibration_error([np.array([0, 1])], perfect) == 0.0


def test_bad_shapes_raise():
    with pytest.raises(ValueError, match="2 label sets but 1 score rows"):
        metrics.ranking_loss(SETS, SCORES[:1])
    with pytest.raises(ValueError, match="bag 0 has labels outside"):
        metrics.multi_hot([[5]], 4)
    with pytest.raises(ValueError, match="3 true instance labels but 2"):
        metrics.instance_accuracy([np.array([0, 1, 2])], [np.array([0, 1])])


def _pessimistic_ranks(scores):
    return (scores[:, None, :] >= scores[:, :, None]).sum(axis=2)


def test_sklearn_backed_ranking_metrics_keep_the_miml_definitions():
    """Against the definitions written out, on scores with many ties and some degenerate bags."""
    rng = np.random.default_rng(0)
    for _ in range(50):
        truth = (rng.random((25, 6)) < 0.4).astype(int)
        truth[0] = 1  # every class: no (present, absent) pair
        scores = rng.integers(0, 4, size=(25, 6)).astype(float)
        ranks = _pessimistic_ranks(scores)
        y = truth.astype(bool)
        some = y.any(axis=1)  # bags with an empty set, if any, are left out of average precision
        pairs = some & ~y.all(axis=1)
        rl = [np.mean(scores[b][y[b]][:, None] <= scores[b][~y[b]][None, :]) for b in np.flatnonzero(pairs)]
        ap = [
            np.mean([(ranks[b][y[b]] <= ranks[b, c]).sum() / ranks[b, c] for c in np.flatnonzero(y[b])])
            for b in np.flatnonzero(some)
        ]
        cover = np.max(np.where(y, ranks, 0), axis=1) - 1
        assert metrics.ranking_loss(truth, scores) == pytest.approx(np.mean(rl))
        assert metrics.average_precision(truth, scores) == pytest.approx(np.mean(ap))
        assert metrics.coverage(truth[some], scores[some]) == pytest.approx(np.mean(cover[some]))
        predicted = (scores > 1).astype(int)
        assert metrics.hamming_loss(truth, predicted) == pytest.approx(np.mean(truth != predicted))


def test_novel_auc_counts_pairs_of_unlabelled_over_labelled():
    true = [np.array([-1, 0, 1]), np.array([2, -1])]
    p_novel = [np.array([0.9, 0.2, 0.6]), np.array([0.6, 0.5])]
    # unlabelled {0.9, 0.5} vs labelled {0.2, 0.6, 0.6}: 0.9 beats all 3; 0.5 beats 0.2 only -> 4/6
    assert metrics.novel_auc(true, p_novel) == pytest.approx(4 / 6)
    with pytest.raises(ValueError, match="both labelled and unlabelled"):
        metrics.novel_auc([np.array([0, 1])], [np.array([0.1, 0.2])])
    with pytest.raises(ValueError, match="give one each"):
        metrics.novel_auc(true, [np.array([0.1])])


def test_proper_scores_and_selective_accuracy_by_hand():
    truth = [np.array([0, 1]), np.array([2, -1])]  # the -1 instance is left out
    proba = [np.array([[0.7, 0.2, 0.1], [0.5, 0.4, 0.1]]), np.array([[0.2, 0.2, 0.6], [1.0, 0.0, 0.0]])]
    assert metrics.log_loss(truth, proba) == pytest.approx(-np.mean(np.log([0.7, 0.4, 0.6])))
    brier = np.mean([0.3**2 + 0.2**2 + 0.1**2, 0.5**2 + 0.6**2 + 0.1**2, 0.2**2 + 0.2**2 + 0.4**2])
    assert metrics.brier_score(truth, proba) == pytest.approx(brier)
    # The two most confident of three (0.7 and 0.6, both right) at 2/3 coverage; all three at 1.
    assert metrics.selective_accuracy(truth, proba, coverage=2 / 3) == 1.0
    assert metrics.selective_accuracy(truth, proba, coverage=1.0) == pytest.approx(2 / 3)
    scores = metrics.instance_scores(truth, proba)
    assert list(scores) == list(metrics.INSTANCE_SCORES) and scores["accuracy"] == pytest.approx(2 / 3)
    # Proper: the true distribution scores best in expectation; a confident mistake costs a bounded 708 nats.
    rng = np.random.default_rng(0)
    p = rng.dirichlet(np.ones(3), size=4000)
    y = [np.array([rng.choice(3, p=row) for row in p])]
    for score in (metrics.log_loss, metrics.brier_score):
        assert score(y, [p]) < score(y, [np.full_like(p, 1 / 3)]) < score(y, [np.roll(p, 1, axis=1)])
    assert metrics.log_loss([np.array([1])], [np.array([[1.0, 0.0]])]) == pytest.approx(708.4, abs=0.1)
    with pytest.raises(ValueError, match="coverage"):
        metrics.selective_accuracy(truth, proba, coverage=0.0)
    with pytest.raises(ValueError, match="true label 3"):
        metrics.log_loss([np.array([3])], [np.array([[0.5, 0.5]])])
