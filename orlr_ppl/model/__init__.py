"""Layer 2, the ORed-logistic model: the ``BagLabelSet`` distribution, the NumPyro model and its log density.

Every inference method evaluates this one model: MAP and EM through
``log_density``, NUTS through its potential, SVI through the model itself.
"""

from .distribution import BagLabelSet
from .numpyro_model import ModelData, make_model_data, orlr_model, sum_to_zero_basis

__all__ = ["BagLabelSet", "ModelData", "make_model_data", "orlr_model", "sum_to_zero_basis"]
