"""orlr-ppl: exact, Bayesian instance annotation under the ORed-logistic model.

The layers, each importing only those before it::

    dp  ->  model  ->  inference  ->  estimators  ->  cli
    (data and evaluation beside them)

The names a user types are here: ``from orlr_ppl import ORLR, NUTS, MIMLData``; and
``orlr_ppl.io``, ``.datasets``, ``.metrics``, ``.plots``, ``.diagnostics`` and
``.cross_validation`` are modules of their own (``from orlr_ppl.metrics import
instance_accuracy``), imported when asked for: some load ArviZ or matplotlib.

Importing the package changes nothing in the environment. To run NUTS chains in
parallel on a CPU, call ``orlr_ppl.set_host_device_count()`` before any JAX work.
"""

import importlib as _importlib
from types import ModuleType as _ModuleType

from ._host_devices import set_host_device_count
from ._version import __version__
from .compilation_cache import enable_compilation_cache
from .data import MIMLData
from .dp import (
    DEFAULT_MAX_LABELS,
    DPResult,
    PackedBags,
    bag_log_likelihood,
    bucket_dp,
    bucket_log_likelihood,
    bucket_posteriors,
    instance_posteriors,
    pack_bags,
    packed_log_likelihood,
    packed_posteriors,
)
from .estimators import MIMM, ORLR, ORLRCV, SIM, MajorityClass, SoftmaxRegression
from .features import RBFDictionary
from .inference.methods import EM, MAP, NUTS, SVI, Laplace
from .model import BagLabelSet

PUBLIC_MODULES = ("io", "datasets", "metrics", "plots", "diagnostics", "cross_validation")
"""The package's modules a user reaches by name: ``import orlr_ppl.metrics``, or ``orlr_ppl.metrics``."""


def __getattr__(name: str) -> _ModuleType:
    # ``op.metrics`` after a plain ``import orlr_ppl as op``: imported on first use, as some load
    # ArviZ or matplotlib.
    if name in PUBLIC_MODULES:
        return _importlib.import_module(f"{__name__}.{name}")
    raise AttributeError(f"module 'orlr_ppl' has no attribute {name!r}")


def __dir__() -> list[str]:
    # What tab completion and ``dir(orlr_ppl)`` offer: the public names, not the subpackages and
    # helpers that importing them leaves in the namespace.
    return sorted([*__all__, *PUBLIC_MODULES])


__all__ = [
    "DEFAULT_MAX_LABELS",
    "EM",
    "MAP",
    "Laplace",
    "NUTS",
    "ORLRCV",
    "RBFDictionary",
    "SVI",
    "BagLabelSet",
    "DPResult",
    "MIMM",
    "MIMLData",
    "MajorityClass",
    "ORLR",
    "PackedBags",
    "SIM",
    "SoftmaxRegression",
    "__version__",
    "bag_log_likelihood",
    "bucket_dp",
    "bucket_log_likelihood",
    "bucket_posteriors",
    "enable_compilation_cache",
    "instance_posteriors",
    "pack_bags",
    "packed_log_likelihood",
    "packed_posteriors",
    "set_host_device_count",
]
