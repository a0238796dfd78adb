"""Bag-level cross-validation of several estimators on one dataset.

The public names of ``orlr_ppl.evaluation.cross_validation``, as a module of its own.
"""

from .evaluation.cross_validation import (  # noqa: F401
    PROTOCOLS,
    CVResult,
    cross_validate,
    fold_scores,
)

__all__ = [
    "CVResult",
    "PROTOCOLS",
    "cross_validate",
    "fold_scores",
]
