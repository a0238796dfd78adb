"""Instance- and bag-level evaluation metrics for MIML instance annotation.

Bag-level ranking metrics follow Zhou & Zhang's MIML definitions (as used by
Briggs et al. 2012 and Pham et al.). ``scores`` is (B, C), larger meaning more
likely present; ``label_sets`` are the true sets (iterables of class indices,
or a (B, C) 0/1 array). Ties count against the ranker: the rank of class ``c``
in bag ``b`` is ``#{c' : scores[b, c'] >= scores[b, c]}``, so constant scores
get the worst value, never a lucky one. Lower is better for Hamming loss,
ranking loss, one-error and coverage; higher for the rest.

Where scikit-learn's multilabel metrics compute the same quantity (its ties
are pessimistic too), they are called: ``hamming_loss``, ``label_ranking_loss``,
``coverage_error`` (the MIML coverage is it minus one) and
``label_ranking_average_precision_score``. The MIML means leave out the bags a
metric is undefined for (ranking loss: bags with no (present, absent) pair;
average precision: bags with an empty set), where scikit-learn counts them as
0 or 1, so those bags are dropped before the call. One-error and ECE have no
scikit-learn counterpart.

Instance metrics (``instance_accuracy``, ``macro_f1``, ``log_loss``,
``brier_score``, ``selective_accuracy``, ``expected_calibration_error``) take B
true-label arrays (n_b,) in which -1 marks an unlabelled instance (half the HJA
birdsong segments): those instances are left out, and a ValueError says so when
none is left. ``log_loss`` and ``brier_score`` are proper scoring rules: their
expectation is best only for the true probabilities, so they, not accuracy or
ECE alone, say whether one predictive (a posterior's) is better than another (a
point estimate's). ``instance_scores`` reports them together.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

import numpy as np
from sklearn import metrics as skm

from ..data import UNLABELLED  # -1: left out of every instance metric


def multi_hot(label_sets: Sequence[Iterable[int]] | np.ndarray, n_classes: int) -> np.ndarray:
    """(B, C) 0/1 int array from label sets (or a 0/1 array, checked)."""
    if isinstance(label_sets, np.ndarray) and label_sets.ndim == 2:
        if label_sets.shape[1] != n_classes or not np.isin(label_sets, (0, 1)).all():
            raise ValueError(f"expected a (B, {n_classes}) 0/1 array of label sets")
        return label_sets.astype(np.int64)
    out = np.zeros((len(label_sets), n_classes), np.int64)
    for b, labels in enumerate(label_sets):
        idx = np.asarray(list(labels), dtype=np.int64)
        if idx.size and (idx.min() < 0 or idx.max() >= n_classes):
            raise ValueError(f"bag {b} has labels outside [0, {n_classes})")
        out[b, idx] = 1
    return out


def _truth_and_scores(label_sets, scores) -> tuple[np.ndarray, np.ndarray]:
    scores = np.asarray(scores, dtype=float)
    if scores.ndim != 2:
        raise ValueError(f"scores must be (B, C), got shape {scores.shape}")
    truth = multi_hot(label_sets, scores.shape[1])
    if truth.shape[0] != scores.shape[0]:
        raise ValueError(f"{truth.shape[0]} label sets but {scores.shape[0]} score rows")
    return truth, scores


def labelled_instances(
    true_labels: Sequence[np.ndarray], other: np.ndarray, what: str
) -> tuple[np.ndarray, np.ndarray]:
    """(m,) true labels and the m matching rows of ``other`` (n, ...), unlabelled instances removed.

    Args:
        true_labels: B int arrays (n_b,), class indices or -1 (unlabelled).
        other: (n, ...) predictions or probability rows, all bags pooled.
        what: how ``other`` is named in errors.
    """
    t = np.concatenate([np.ravel(x) for x in true_labels]) if len(true_labels) else np.zeros(0, np.int64)
    if other.shape[0] != t.size:
        raise ValueError(f"{t.size} true instance labels but {other.shape[0]} {what}")
    if t.size and t.min() < UNLABELLED:
        raise ValueError(
            f"true instance labels {np.unique(t[t < UNLABELLED]).tolist()}: use class indices, or "
            f"{UNLABELLED} for an unlabelled instance"
        )
    keep = t != UNLABELLED
    if not keep.any():
        raise ValueError(
            f"no labelled instance to score: all {t.size} true instance labels are {UNLABELLED} (unlabelled)"
        )
    return t[keep], other[keep]


def _pooled_predictions(predicted: Sequence[np.ndarray]) -> np.ndarray:
    return np.concatenate([np.ravel(x) for x in predicted]) if len(predicted) else np.zeros(0, np.int64)


def instance_accuracy(true_labels: Sequence[np.ndarray], predicted: Sequence[np.ndarray]) -> float:
    """Fraction of labelled instances whose predicted label equals the true one (all bags pooled).

    Args:
        true_labels: B int arrays (n_b,); -1 (unlabelled) instances are left out.
        predicted: B int arrays (n_b,) of predicted class indices.
    """
    t, p = labelled_instances(true_labels, _pooled_predictions(predicted), "predictions")
    return float(np.mean(t == p))


def macro_f1(true_labels: Sequence[np.ndarray], predicted: Sequence[np.ndarray]) -> float:
    """Instance-level F1 averaged over the classes that occur in truth or prediction.

    Unlabelled instances (true label -1) are left out, as in ``instance_accuracy``.
    """
    t, p = labelled_instances(true_labels, _pooled_predictions(predicted), "predictions")
    return float(skm.f1_score(t, p, average="macro", zero_division=0))


def novel_auc(true_labels: Sequence[np.ndarray], p_novel: Sequence[np.ndarray]) -> float:
    """ROC AUC of p(novel) for the unlabelled instances (true label -1) against the labelled ones.

    The detection score of a novel-class model (``ORLR(novel_class=True)``: its last
    ``predict_proba`` column), as Pham et al. (ICML 2015) report it.

    Args:
        true_labels: B int arrays (n_b,); -1 marks an unlabelled instance.
        p_novel: B float arrays (n_b,) of each instance's p(novel).

    Raises:
        ValueError: when every instance is labelled, or none is (no AUC exists).
    """
    unlabelled = np.concatenate([np.ravel(t) for t in true_labels]) == UNLABELLED
    scores = np.concatenate([np.ravel(p) for p in p_novel])
    if unlabelled.shape != scores.shape:
        raise ValueError(f"got {scores.size} p(novel) values for {unlabelled.size} instances: give one each")
    if unlabelled.all() or not unlabelled.any():
        raise ValueError("the AUC of p(novel) needs both labelled and unlabelled (-1) instances")
    return float(skm.roc_auc_score(unlabelled, scores))


def hamming_loss(label_sets, predicted_sets) -> float:
    """Mean over bags of ``|predicted symmetric-difference true| / C``."""
    pred = np.asarray(predicted_sets)
    truth = multi_hot(label_sets, pred.shape[1])
    return float(skm.hamming_loss(truth, multi_hot(pred, pred.shape[1])))


def ranking_loss(label_sets, scores) -> float:
    """Mean over bags of the fraction of (present, absent) class pairs ordered wrongly.

    A pair counts as wrong when the absent class scores at least as high as the
    present one. Bags whose set is empty or holds every class have no pairs and
    are left out of the mean (scikit-learn would count them as 0).
    """
    truth, scores = _truth_and_scores(label_sets, scores)
    has_pairs = truth.any(axis=1) & ~truth.all(axis=1)
    if not has_pairs.any():
        return 0.0
    return float(skm.label_ranking_loss(truth[has_pairs], scores[has_pairs]))


def one_error(label_sets, scores) -> float:
    """Fraction of bags whose top-scored class is not in the set (ties: worst case)."""
    truth, scores = _truth_and_scores(label_sets, scores)
    top = scores == scores.max(axis=1, keepdims=True)
    return float(np.mean(np.any(top & (truth == 0), axis=1)))


def coverage(label_sets, scores) -> float:
    """Mean over bags of how far down the ranking one must go to cover the set, minus one."""
    truth, scores = _truth_and_scores(label_sets, scores)
    return float(skm.coverage_error(truth, scores)) - 1.0


def average_precision(label_sets, scores) -> float:
    """Mean over bags of the average, over present classes c, of the fraction of
    classes ranked at or above c that are present (bags with an empty set left out)."""
    truth, scores = _truth_and_scores(label_sets, scores)
    present = truth.any(axis=1)
    return float(skm.label_ranking_average_precision_score(truth[present], scores[present]))


def expected_calibration_error(
    true_labels: Sequence[np.ndarray], probabilities: Sequence[np.ndarray], n_bins: int = 10
) -> float:
    """ECE of the top-label confidence over ``n_bins`` equal-width bins on [0, 1].

    ``sum_bins (n_bin / n) |accuracy_bin - mean confidence_bin|``, over the n
    labelled instances (true label -1: left out).

    Args:
        true_labels: B int arrays (n_b,), class indices or -1.
        probabilities: B arrays (n_b, C) of class probabilities.
        n_bins: number of equal-width confidence bins.
    """
    p = np.concatenate([np.asarray(x) for x in probabilities], axis=0)
    t, p = labelled_instances(true_labels, p, "probability rows")
    conf, pred = p.max(axis=1), p.argmax(axis=1)
    bins = np.minimum((conf * n_bins).astype(int), n_bins - 1)
    ece = 0.0
    for k in range(n_bins):
        sel = bins == k
        if sel.any():
            ece += sel.mean() * abs(np.mean(pred[sel] == t[sel]) - conf[sel].mean())
    return float(ece)


def _labelled_probabilities(
    true_labels: Sequence[np.ndarray], probabilities: Sequence[np.ndarray]
) -> tuple[np.ndarray, np.ndarray]:
    """(m,) true labels and (m, C) probability rows of the labelled instances, all bags pooled."""
    p = np.concatenate([np.asarray(x, np.float64) for x in probabilities], axis=0)
    t, p = labelled_instances(true_labels, p, "probability rows")
    if t.max() >= p.shape[1]:
        raise ValueError(f"true label {int(t.max())} but the probability rows have {p.shape[1]} classes")
    return t, p


def log_loss(true_labels: Sequence[np.ndarray], probabilities: Sequence[np.ndarray]) -> float:
    """Mean negative log probability of the true label (nats), over the labelled instances.

    The held-out log loss (NLL) of a predictive: a strictly proper score, lower is
    better. A probability below float64's smallest normal number counts as that
    number (about 1e-308), so a confident mistake costs about 708 nats, not infinity.

    Args:
        true_labels: B int arrays (n_b,), class indices or -1 (left out).
        probabilities: B arrays (n_b, C) of class probabilities.
    """
    t, p = _labelled_probabilities(true_labels, probabilities)
    return float(-np.mean(np.log(np.maximum(p[np.arange(t.size), t], np.finfo(np.float64).tiny))))


def brier_score(true_labels: Sequence[np.ndarray], probabilities: Sequence[np.ndarray]) -> float:
    """Mean over the labelled instances of ``sum_c (p_c - [y = c])**2``: the multi-class Brier score.

    A strictly proper score in [0, 2], lower is better; unlike ``log_loss`` it is
    bounded, so a few confident mistakes weigh less. Arguments as ``log_loss``.
    """
    t, p = _labelled_probabilities(true_labels, probabilities)
    onehot = np.zeros_like(p)
    onehot[np.arange(t.size), t] = 1.0
    return float(np.mean(np.sum((p - onehot) ** 2, axis=1)))


SELECTIVE_COVERAGE = 0.8
"""The share of instances ``selective_accuracy`` keeps: the most confident 80 %."""


def selective_accuracy(
    true_labels: Sequence[np.ndarray],
    probabilities: Sequence[np.ndarray],
    coverage: float = SELECTIVE_COVERAGE,
) -> float:
    """Accuracy of the top class on the ``coverage`` share of labelled instances predicted most confidently.

    What a user who labels only the instances the model is surest of gets: a better
    ranking of its confidences raises it even when plain accuracy is unchanged.
    ``ceil(coverage * m)`` instances are kept, ties in confidence broken by position.
    """
    if not 0.0 < coverage <= 1.0:
        raise ValueError(f"coverage={coverage}: give the share of instances to keep, in (0, 1]")
    t, p = _labelled_probabilities(true_labels, probabilities)
    keep = np.argsort(-p.max(axis=1), kind="stable")[: int(np.ceil(coverage * t.size))]
    return float(np.mean(p[keep].argmax(axis=1) == t[keep]))


INSTANCE_SCORES = ("accuracy", "log_loss", "brier", "ece", "selective_accuracy")
"""``instance_scores``' keys, in the order the tables show them."""


def instance_scores(
    true_labels: Sequence[np.ndarray], probabilities: Sequence[np.ndarray]
) -> dict[str, float]:
    """Accuracy, the two proper scores (``log_loss``, ``brier``), ECE and ``selective_accuracy`` (80 %).

    The comparison of a point fit's predictive with a posterior's: accuracy and ECE
    alone can favour either, the proper scores say which predicts the labels better.
    """
    pred = [np.asarray(p).argmax(axis=1) for p in probabilities]
    return {
        "accuracy": instance_accuracy(true_labels, pred),
        "log_loss": log_loss(true_labels, probabilities),
        "brier": brier_score(true_labels, probabilities),
        "ece": expected_calibration_error(true_labels, probabilities),
        "selective_accuracy": selective_accuracy(true_labels, probabilities),
    }


CREDIBLE_MASS = 0.9
"""The default mass of a credible interval, wherever the package draws or returns one."""


def check_credible_mass(prob: float) -> None:
    """ValueError unless ``0 < prob < 1``."""
    if not 0.0 < prob < 1.0:
        raise ValueError(f"prob={prob}: a credible mass lies strictly between 0 and 1, e.g. {CREDIBLE_MASS}")


def equal_tailed_interval(draws: np.ndarray, prob: float) -> np.ndarray:
    """(..., 2) equal-tailed credible interval over the leading axis of ``draws`` (S, ...).

    The bounds are the ``(1 - prob) / 2`` and ``(1 + prob) / 2`` quantiles of the S draws.
    """
    check_credible_mass(prob)
    q = [(1.0 - prob) / 2.0, (1.0 + prob) / 2.0]
    return np.moveaxis(np.quantile(np.asarray(draws, dtype=float), q, axis=0), 0, -1)
