"""Layer 1, the exact subset DP: validation, packing of ragged bags into buckets, and the DP itself.

Nothing here knows about features, weights or NumPyro: the input is instance
logits and label sets, the output bag log-likelihoods and instance posteriors.
"""

from .bucket import bucket_dp, bucket_log_likelihood, bucket_posteriors
from .packing import PackedBags, pack_bags
from .ragged import bag_log_likelihood, instance_posteriors, packed_log_likelihood, packed_posteriors
from .subset_dp import BucketInputs, DPResult, buckets_dp
from .validation import DEFAULT_MAX_LABELS, check_features, check_label_sets

__all__ = [
    "DEFAULT_MAX_LABELS",
    "BucketInputs",
    "DPResult",
    "PackedBags",
    "bag_log_likelihood",
    "bucket_dp",
    "bucket_log_likelihood",
    "bucket_posteriors",
    "buckets_dp",
    "check_features",
    "check_label_sets",
    "instance_posteriors",
    "pack_bags",
    "packed_log_likelihood",
    "packed_posteriors",
]
