"""Layer 4, scikit-learn estimators: ``ORLR`` and the reference baselines.

Modules: ``base`` (the shared ``BagClassifier``: prediction interface, save/load,
input helpers), ``orlr`` (ORLR, ORLRCV; each fit is its settings object's ``fit``),
``model_selection`` (bag-level cross-validation), ``persistence`` (model folders, and what is
read of orlr-ppl 0.1), ``feature_notes`` (heavy-tailed features in a convergence report),
``baselines`` (SoftmaxRegression, MajorityClass), ``sim`` and ``sim_objective``
(the SIM baseline). Importing them here also registers every estimator class
with ``BagClassifier.load``.
"""

from .baselines import MajorityClass, SoftmaxRegression
from .mimm import MIMM
from .orlr import ORLR, ORLRCV
from .sim import SIM

__all__ = ["MIMM", "ORLR", "ORLRCV", "MajorityClass", "SIM", "SoftmaxRegression"]
