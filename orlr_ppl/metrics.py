"""Instance- and bag-level metrics: accuracy, ranking loss, calibration, credible intervals.

The public names of ``orlr_ppl.evaluation.metrics``, as a module of its own.
"""

from .evaluation.metrics import (  # noqa: F401
    CREDIBLE_MASS,
    UNLABELLED,
    average_precision,
    check_credible_mass,
    coverage,
    equal_tailed_interval,
    expected_calibration_error,
    hamming_loss,
    instance_accuracy,
    labelled_instances,
    macro_f1,
    multi_hot,
    novel_auc,
    one_error,
    ranking_loss,
)

__all__ = [
    "CREDIBLE_MASS",
    "UNLABELLED",
    "average_precision",
    "check_credible_mass",
    "coverage",
    "equal_tailed_interval",
    "expected_calibration_error",
    "hamming_loss",
    "instance_accuracy",
    "labelled_instances",
    "macro_f1",
    "multi_hot",
    "novel_auc",
    "one_error",
    "ranking_loss",
]
