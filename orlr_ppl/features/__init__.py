"""Instance feature maps: scikit-learn transformers fitted on the training instances, applied to bags.

Every estimator takes its map as ``features`` (``maps``: "standard",
"quantile-normal", "rbf", None, or any transformer), fits it on the training
instances and applies it before every prediction through one adapter
(``bags``), and saves it with the model (``saving``). Kernel ORLR's dictionary
map, which scikit-learn lacks, is ``rbf.RBFDictionary``; its Nystroem map is
scikit-learn's own.
"""

from .bags import fit_bags, split_by_bag, transform_bags
from .maps import FEATURE_MAPS, kernel_step, make_feature_map, split_kernel
from .rbf import RBFDictionary, median_gamma

__all__ = [
    "FEATURE_MAPS",
    "RBFDictionary",
    "fit_bags",
    "kernel_step",
    "make_feature_map",
    "median_gamma",
    "split_by_bag",
    "split_kernel",
    "transform_bags",
]
