"""Instance- and bag-level metrics: accuracy, proper scores, ranking loss, calibration, credible intervals.

The public names of ``orlr_ppl.evaluation.metrics``, as a module of its own.
"""

from .evaluation.metrics import (  # noqa: F401
    CREDIBLE_MASS,
    INSTANCE_SCORES,
    SELECTIVE_COVERAGE,
    UNLABELLED,
    average_precision,
    brier_score,
    check_credible_mass,
    coverage,
    equal_tailed_interval,
    expected_calibration_error,
    hamming_loss,
    instance_accuracy,
    instance_scores,
    labelled_instances,
    log_loss,
    macro_f1,
    multi_hot,
    novel_auc,
    one_error,
    ranking_loss,
    selective_accuracy,
)

__all__ = [
    "CREDIBLE_MASS",
    "INSTANCE_SCORES",
    "SELECTIVE_COVERAGE",
    "UNLABELLED",
    "average_precision",
    "brier_score",
    "check_credible_mass",
    "coverage",
    "equal_tailed_interval",
    "expected_calibration_error",
    "hamming_loss",
    "instance_accuracy",
    "instance_scores",
    "labelled_instances",
    "log_loss",
    "macro_f1",
    "multi_hot",
    "novel_auc",
    "one_error",
    "ranking_loss",
    "selective_accuracy",
]
