"""Layer 2, the ORed-logistic model: the ``BagLabelSet`` distribution, the NumPyro model and its log density.

Every inference method evaluates this one model: MAP and EM through
``log_density``, NUTS through its potential, SVI through the model itself.
``sharding`` splits the packed bags over devices (data parallelism).
"""

from .distribution import BagLabelSet
from .numpyro_model import ModelData, make_model_data, make_model_data_flat, orlr_model, sum_to_zero_basis
from .sharding import bag_mesh, shard_model_data

__all__ = [
    "BagLabelSet",
    "ModelData",
    "bag_mesh",
    "make_model_data",
    "make_model_data_flat",
    "orlr_model",
    "shard_model_data",
    "sum_to_zero_basis",
]
