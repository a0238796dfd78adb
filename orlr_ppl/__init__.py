"""orlr-ppl: exact, Bayesian instance annotation under the ORed-logistic model.

The layers, each importing only those before it::

    dp  ->  model  ->  inference  ->  estimators  ->  cli
    (data and evaluation beside them)

The names a user types are here: ``from orlr_ppl import ORLR, MIMLData``; and
``op.io``, ``op.datasets``, ``op.metrics``, ``op.plots``, ``op.diagnostics``
are the modules of the same names, imported on first use.
"""

from __future__ import annotations

import importlib
from types import ModuleType

# First, before anything starts JAX's backend: NUTS chains over the CPU cores.
from . import _host_devices  # noqa: F401
from ._version import __version__
from .compilation_cache import enable_compilation_cache
from .data import MIMLData, Standardizer
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
from .estimators import MIMM, ORLR, SIM, MajorityClass, SoftmaxRegression
from .model import BagLabelSet

_MODULES = {
    "io": "orlr_ppl.data.io",
    "datasets": "orlr_ppl.data.datasets",
    "metrics": "orlr_ppl.evaluation.metrics",
    "cross_validation": "orlr_ppl.evaluation.cross_validation",
    "plots": "orlr_ppl.evaluation.plots",
    "diagnostics": "orlr_ppl.inference.diagnostics",
    "inference_data": "orlr_ppl.inference.inference_data",
}
"""Modules reached as attributes, imported on first use (some load ArviZ or matplotlib)."""


def __getattr__(name: str) -> ModuleType:
    if name in _MODULES:
        module = importlib.import_module(_MODULES[name])
        globals()[name] = module
        return module
    raise AttributeError(f"module 'orlr_ppl' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_MODULES))


__all__ = [
    "DEFAULT_MAX_LABELS",
    "BagLabelSet",
    "DPResult",
    "MIMM",
    "MIMLData",
    "MajorityClass",
    "ORLR",
    "PackedBags",
    "SIM",
    "SoftmaxRegression",
    "Standardizer",
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
    *_MODULES,
]
