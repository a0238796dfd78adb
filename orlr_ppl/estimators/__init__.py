"""Layer 4, scikit-learn estimators: ``ORLR`` and the reference baselines.

Modules: ``base`` (the shared ``BagClassifier``: prediction interface, save/load,
input helpers), ``orlr`` (ORLR, ORLRCV and their fitting back ends),
``baselines`` (SoftmaxRegression, MajorityClass), ``sim`` and ``sim_objective``
(the SIM baseline). Importing them here also registers every estimator class
with ``BagClassifier.load``.
"""

from .baselines import MajorityClass, SoftmaxRegression
from .mimm import MIMM
from .orlr import ORLR, ORLRCV
from .sim import SIM

__all__ = ["MIMM", "ORLR", "ORLRCV", "MajorityClass", "SIM", "SoftmaxRegression"]
