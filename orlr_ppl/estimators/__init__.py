"""Layer 4, scikit-learn estimators: ``ORLR`` and the reference baselines."""

from .base import ORLR, MajorityClass, SoftmaxRegression
from .sim import SIM

__all__ = ["ORLR", "MajorityClass", "SIM", "SoftmaxRegression"]
