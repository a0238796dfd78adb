"""orlr-ppl: exact, Bayesian instance annotation under the ORed-logistic model."""

__version__ = "0.1.0"

# First, before anything starts JAX's backend: NUTS chains over the CPU cores.
from . import _host_devices  # noqa: F401
from .bags import (
    DEFAULT_MAX_LABELS,
    PackedBags,
    bag_log_likelihood,
    instance_posteriors,
    pack_bags,
    packed_log_likelihood,
    packed_posteriors,
)
from .compilation_cache import enable_compilation_cache
from .estimator import ORLR, MajorityClass, SoftmaxRegression
from .subset_dp import DPResult, bucket_dp, bucket_log_likelihood, bucket_posteriors

__all__ = [
    "DEFAULT_MAX_LABELS",
    "DPResult",
    "MajorityClass",
    "ORLR",
    "SoftmaxRegression",
    "bucket_dp",
    "PackedBags",
    "__version__",
    "bag_log_likelihood",
    "bucket_log_likelihood",
    "bucket_posteriors",
    "enable_compilation_cache",
    "instance_posteriors",
    "pack_bags",
    "packed_log_likelihood",
    "packed_posteriors",
]
