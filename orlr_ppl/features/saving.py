"""A fitted feature map as JSON and arrays, and back, without pickle.

A saved model carries its preprocessing. The map is written as a JSON
description (each transformer's class, its ``get_params()`` and its scalar
fitted attributes) beside its fitted arrays (in the model's ``.npz``, read
with ``allow_pickle=False``), and rebuilt from classes on an allow-list
(``SAVEABLE``): a model folder can never make Python run code of its own
choosing. A map with another transformer cannot be saved, and says so.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from sklearn.base import TransformerMixin
from sklearn.kernel_approximation import Nystroem
from sklearn.pipeline import Pipeline
from sklearn.preprocessing import QuantileTransformer, StandardScaler

from .rbf import RBFDictionary

SAVEABLE: dict[str, type] = {
    "StandardScaler": StandardScaler,
    "QuantileTransformer": QuantileTransformer,
    "Nystroem": Nystroem,
    "RBFDictionary": RBFDictionary,
    "Pipeline": Pipeline,
}
"""The transformers a saved model may hold, by class name."""
_SCALAR = (bool, int, float, str, type(None))
_PRIVATE_FITTED = ("_n_features_out",)  # set by fit, read by get_feature_names_out (Nystroem)


def to_saved(fmap: TransformerMixin | None, prefix: str = "feature_map") -> tuple[Any, dict[str, np.ndarray]]:
    """``(description, arrays)`` of a fitted map: a JSON-able description and its arrays by key.

    None (no map) is ``(None, {})``. A ValueError names a transformer (or a
    parameter) that cannot be written safely.
    """
    if fmap is None:
        return None, {}
    name = type(fmap).__name__
    if SAVEABLE.get(name) is not type(fmap):
        raise ValueError(
            f"the feature map holds a {name}, which orlr-ppl cannot save without pickle; use "
            f"{', '.join(SAVEABLE)} (or save the transformer yourself and fit on its output)"
        )
    if isinstance(fmap, Pipeline):
        steps, arrays = [], {}
        for i, (step_name, step) in enumerate(fmap.steps):
            described, step_arrays = to_saved(step, f"{prefix}.{i}")
            steps.append([step_name, described])
            arrays.update(step_arrays)
        return {"class": name, "steps": steps}, arrays
    params = fmap.get_params(deep=False)
    bad = {k: v for k, v in params.items() if not isinstance(v, _SCALAR)}
    if bad:
        raise ValueError(f"the feature map's {name} has parameters {bad} that cannot be saved as JSON")
    fitted, arrays = {}, {}
    names = [k for k in vars(fmap) if k.endswith("_") and not k.startswith("_")]
    for attr in [*names, *(a for a in _PRIVATE_FITTED if hasattr(fmap, a))]:
        value = getattr(fmap, attr)
        if isinstance(value, np.ndarray) and value.dtype != object:
            arrays[f"{prefix}.{attr}"] = value
        elif isinstance(value, np.generic):
            fitted[attr] = value.item()
        elif isinstance(value, _SCALAR):
            fitted[attr] = value
        elif isinstance(value, np.ndarray):  # feature_names_in_: strings
            fitted[attr] = [str(v) for v in value]
        else:
            raise ValueError(f"the feature map's {name}.{attr} is a {type(value).__name__}: cannot be saved")
    return {"class": name, "params": params, "fitted": fitted, "arrays": sorted(arrays)}, arrays


def from_saved(description: Any, arrays: dict[str, np.ndarray], where: str) -> TransformerMixin | None:
    """The fitted map ``to_saved`` described; a ValueError naming ``where`` for anything else."""
    if description is None:
        return None
    if not isinstance(description, dict) or description.get("class") not in SAVEABLE:
        raise ValueError(
            f"{where}: the feature map is {description!r}; expected one of {tuple(SAVEABLE)}: "
            "re-save the model"
        )
    cls = SAVEABLE[description["class"]]
    if cls is Pipeline:
        return Pipeline([(str(n), from_saved(d, arrays, where)) for n, d in description["steps"]])
    try:
        fmap = cls(**description["params"])
        for attr, value in description["fitted"].items():
            public = attr.isidentifier() and attr.endswith("_") and not attr.startswith("_")
            if not (public or attr in _PRIVATE_FITTED):
                raise ValueError(f"{attr!r} is no fitted attribute name")
            setattr(fmap, attr, np.asarray(value, object) if attr == "feature_names_in_" else value)
        for key in description["arrays"]:
            setattr(fmap, key.rsplit(".", 1)[1], np.asarray(arrays[key]))
    except (KeyError, TypeError, ValueError) as err:
        raise ValueError(f"{where}: the feature map cannot be rebuilt ({err!r}): re-save the model") from err
    return fmap


def array_keys(description: Any) -> list[str]:
    """Every array key a description names (its ``.npz`` entries)."""
    if not isinstance(description, dict):
        return []
    if description.get("class") == "Pipeline":
        return [k for _, d in description.get("steps", []) for k in array_keys(d)]
    return list(description.get("arrays", []))
