"""Reading and writing a saved model's files, every failure a ValueError that names the file.

A model folder holds ``metadata.json`` (the estimator, its parameters and
fitted scalars), ``params.npz`` (the fitted arrays, read without pickle) and,
for a posterior, ``posterior.nc``. A damaged file (truncated, emptied,
overwritten with something else, edited by hand) is reported with its path and
what to do, never as a ``KeyError`` or ``UnicodeDecodeError`` from deep
inside; ``ValueError`` is what the command line catches. The class-specific
steps (which class, which parameters, which shapes) stay in ``base``.
"""

from __future__ import annotations

import json
import os
import struct
import zipfile
import zlib
from collections.abc import Callable, Collection, Iterable, Mapping
from dataclasses import fields as dataclass_fields
from pathlib import Path
from typing import Any, BinaryIO

import numpy as np
from sklearn.base import clone
from sklearn.kernel_approximation import Nystroem
from sklearn.pipeline import Pipeline
from sklearn.preprocessing import QuantileTransformer, StandardScaler

from .._version import __version__
from ..features import RBFDictionary, make_feature_map
from ..features.saving import from_saved, to_saved
from ..inference import methods

MODEL_FILES = ("metadata.json", "params.npz", "posterior.nc")
"""The files ``save`` writes: a folder holding any of them holds a model."""

READ_ERRORS = (
    OSError,
    ValueError,
    EOFError,
    KeyError,
    zipfile.BadZipFile,
    zlib.error,
    struct.error,
    RuntimeError,
)
"""What NumPy, ``zipfile`` and ``zlib`` raise on a damaged ``.npz`` (they agree on no one type)."""

REQUIRED_KEYS = {"package": str, "estimator": str, "params": dict, "n_classes": int, "n_features": int}
OPTIONAL_KEYS = {
    "version": str,
    "format": int,
    "training_data": dict,
    "class_names": list,
    "feature_names": list,
    "fitted": dict,
    "feature_map": dict,
}
"""The keys of ``metadata.json`` and their JSON types (optional ones may also be null)."""

FORMAT = 2
"""The folder format ``save`` writes. 1 (no ``format`` key): orlr-ppl 0.1's flat ``ORLR`` arguments
(``method=``, ``num_chains=``, ...), read by translating them; 2: ``ORLR(inference=..., features=...)``,
the settings objects as JSON objects."""

FIX = "re-save the model with orlr-ppl (or restore the file from a backup)"


# -- writing -------------------------------------------------------------------


def prepare_folder(folder: Path, overwrite: bool) -> None:
    """Create ``folder``; refuse one that already holds a model unless ``overwrite``."""
    if folder.exists() and not folder.is_dir():
        raise ValueError(f"{folder} is a file, not a folder: choose a folder to save the model in")
    existing = [name for name in MODEL_FILES if (folder / name).exists()]
    if existing and not overwrite:
        raise ValueError(
            f"{folder} already holds a saved model ({', '.join(existing)}): pass overwrite=True to replace "
            "it (--force on the command line), or choose another folder"
        )
    folder.mkdir(parents=True, exist_ok=True)


def write_atomically(target: Path, write: Callable[[BinaryIO], None]) -> None:
    """Write through a temporary file in the same folder, then rename it over ``target``.

    A save that fails half-way (full disk, interrupted) leaves the old file
    whole, never a truncated one.
    """
    tmp = target.with_name(f".{target.stem}.tmp{target.suffix}")
    try:
        with open(tmp, "wb") as fh:
            write(fh)
        os.replace(tmp, target)
    finally:
        tmp.unlink(missing_ok=True)


def write_arrays(target: Path, arrays: Mapping[str, np.ndarray]) -> None:
    """``params.npz``: plain numeric arrays (so ``load`` needs no pickle)."""
    write_atomically(target, lambda fh: np.savez(fh, **arrays))


def write_metadata(target: Path, meta: Mapping[str, Any]) -> None:
    text = json.dumps(meta, indent=2, default=_json_default)
    write_atomically(target, lambda fh: fh.write(text.encode("utf-8")))


def _json_default(obj: Any) -> Any:
    if isinstance(obj, np.generic):
        return obj.item()
    raise TypeError(f"cannot store {type(obj).__name__} in JSON")


def check_finite(arrays: Mapping[str, np.ndarray], where: str, fix: str) -> None:
    """Every array numeric, and every float array finite; ``where`` and ``fix`` go in the message."""
    for name, a in arrays.items():
        if a.dtype.kind not in "biuf":
            raise ValueError(f"{where}: array {name!r} has dtype {a.dtype}, not numbers: {fix}")
        if a.dtype.kind == "f" and not np.all(np.isfinite(a)):
            n_bad = int(np.size(a) - np.count_nonzero(np.isfinite(a)))
            raise ValueError(f"{where}: array {name!r} holds {n_bad} NaN or infinite value(s): {fix}")


# -- reading -------------------------------------------------------------------


def read_metadata(folder: Path, estimators: Collection[str]) -> tuple[dict[str, Any], Path, Path]:
    """``(metadata, metadata.json path, params.npz path)``, the metadata checked key by key.

    ``estimators`` are the class names a folder may hold.
    """
    meta_file, param_file = folder / "metadata.json", folder / "params.npz"
    for f in (meta_file, param_file):
        if not f.is_file():
            raise ValueError(f"{f} is missing: is {folder} a saved orlr-ppl model folder?")
    try:
        text = meta_file.read_bytes().decode("utf-8")
    except UnicodeDecodeError as err:
        raise ValueError(f"{meta_file} is not UTF-8 text (binary or corrupt): {FIX}") from err
    except OSError as err:
        raise ValueError(f"{meta_file} cannot be read: {err}") from err
    try:
        meta = json.loads(text)
    except json.JSONDecodeError as err:
        raise ValueError(f"{meta_file} is not valid JSON (truncated?): {err}; {FIX}") from err
    if not isinstance(meta, dict):
        raise ValueError(f"{meta_file} holds a JSON {type(meta).__name__}, not an object: {FIX}")
    name = meta.get("estimator")
    if meta.get("package") != "orlr-ppl" or not isinstance(name, str) or name not in estimators:
        raise ValueError(f"{meta_file} does not describe an orlr-ppl estimator")
    check_metadata(meta, meta_file)
    return meta, meta_file, param_file


def check_metadata(meta: Mapping[str, Any], meta_file: Path) -> None:
    """Raise for a missing key, a value of the wrong JSON type, or names that disagree with the counts."""
    for key, kind in {**REQUIRED_KEYS, **OPTIONAL_KEYS}.items():
        if key not in meta:
            if key in REQUIRED_KEYS:
                raise ValueError(f"{meta_file} has no {key!r} entry: {FIX}")
            continue
        value = meta[key]
        ok = (value is None and key in OPTIONAL_KEYS) or (
            isinstance(value, kind) and not (kind is int and isinstance(value, bool))
        )
        if not ok:
            raise ValueError(f"{meta_file}: {key!r} is {value!r}, expected a JSON {_json_name(kind)}: {FIX}")
    for key in ("n_classes", "n_features"):
        if meta[key] < 1:
            raise ValueError(f"{meta_file}: {key!r} is {meta[key]}, expected a positive integer: {FIX}")
    for key, count in (("class_names", "n_classes"), ("feature_names", "n_features")):
        names = meta.get(key)
        if names is not None and (len(names) != meta[count] or not all(isinstance(n, str) for n in names)):
            raise ValueError(f"{meta_file}: {key!r} must be {meta[count]} strings ({count}): {FIX}")
    for name in meta.get("fitted") or {}:
        # Set as attributes by load: only fitted-attribute names, never a method or a private field.
        if not (name.isidentifier() and name.endswith("_") and not name.startswith("_")):
            raise ValueError(
                f"{meta_file}: 'fitted' holds {name!r}, which is no fitted attribute name: {FIX}"
            )


def check_format(meta: Mapping[str, Any], meta_file: Path) -> int:
    """The folder's format (1 when it names none); a ValueError naming it when this version cannot read it."""
    fmt = meta.get("format") or 1
    if not 1 <= fmt <= FORMAT:
        raise ValueError(
            f"{meta_file}: model format {fmt}, saved by orlr-ppl {meta.get('version', '?')}; this is "
            f"orlr-ppl {__version__}, which reads formats 1 to {FORMAT}: upgrade orlr-ppl to load it"
        )
    return fmt


def _json_name(kind: type) -> str:
    return {str: "string", dict: "object", int: "integer", list: "list"}[kind]


def saved_params(meta: Mapping[str, Any], allowed: Collection[str], meta_file: Path) -> dict[str, Any]:
    """The constructor arguments in ``metadata.json``, refusing one the estimator does not take.

    A ``features`` transformer, saved unfitted (``unfitted_description``), is rebuilt.
    """
    params = dict(meta["params"])
    features = params.get("features")
    if isinstance(features, dict) and "transformer" in features:
        params["features"] = from_saved(features["transformer"], {}, f"{meta_file}: 'features'")
    unknown = sorted(set(params) - set(allowed))
    if unknown:
        raise ValueError(
            f"{meta_file}: 'params' holds {unknown}, which {meta['estimator']} does not take (the model "
            f"was saved by orlr-ppl {meta.get('version', '?')}; this is {__version__}): remove them from "
            "the file, or re-fit and save the model with this version"
        )
    return params


def unfitted_description(transformer: Any) -> Any:
    """An unfitted transformer (an estimator's ``features``) as JSON: its classes and parameters."""
    return to_saved(clone(transformer))[0]


def read_posterior(nc: Path) -> Any:
    """Read a saved ``posterior.nc`` into memory (ValueError naming the file if it cannot be read)."""
    from ..inference.posterior.arviz_compat import from_netcdf

    try:
        # Eager: read into memory and close the file, so the model can be saved over its own folder.
        idata = from_netcdf(str(nc))
    except (OSError, ValueError, KeyError, RuntimeError, EOFError) as err:  # netCDF4, h5py and xarray differ
        raise ValueError(f"{nc} is unreadable (truncated or not netCDF?): {err}; re-save the model") from err
    posterior = getattr(idata, "posterior", None)
    if posterior is None or not {"W", "beta"} <= set(posterior.data_vars):
        raise ValueError(f"{nc} holds no posterior draws of W and beta: re-save the model")
    return with_raw_sites_apart(idata)


# -- compatibility with orlr-ppl 0.1, all of it here ---------------------------------------------

COMPAT_REMOVED_IN = (1, 0)
"""The release that drops what follows: 0.1's constructor arguments (``RENAMED``, whose errors
name the new spelling) and its format-1 folders. ``tests/estimators/test_estimators.py`` fails
from that version on until they go."""

RENAMED = {
    "method": "inference='em' | 'map' | 'nuts' | 'svi', or inference=EM(...), MAP(...), NUTS(...), SVI(...)",
    "max_iter": "inference=EM(max_iter=...) or MAP(max_iter=...)",
    "tol": "inference=EM(tol=...) or MAP(tol=...)",
    "m_steps": "inference=EM(m_steps=...)",
    "bag_fraction": "inference=EM(bag_fraction=...)",
    "num_warmup": "inference=NUTS(num_warmup=...)",
    "num_samples": "inference=NUTS(num_samples=...) (SVI: SVI(num_draws=...))",
    "num_chains": "inference=NUTS(num_chains=...)",
    "max_num_samples": "inference=NUTS(max_num_samples=...)",
    "dense_mass": "inference=NUTS(dense_mass=...)",
    "whiten": "inference=NUTS(whiten=...)",
    "target_accept": "inference=NUTS(target_accept=...)",
    "init": "inference=NUTS(init=...)",
    "guide": "inference=SVI(guide=...)",
    "svi_steps": "inference=SVI(num_steps=...)",
    "learning_rate": "inference=SVI(learning_rate=...)",
    "subsample_size": "inference=SVI(subsample_size=...)",
    "progress_bar": "inference=NUTS(progress_bar=...) or SVI(progress_bar=...); ORLRCV(progress_bar=...)",
    "standardize": "features='standard' | 'quantile-normal' | None",
    "kernel": "features='rbf', or a scikit-learn pipeline ending in RBFDictionary(...) or Nystroem(...)",
    "gamma": "features=make_pipeline(StandardScaler(), RBFDictionary(gamma=...)); ORLRCV(gammas=...) "
    "chooses it by cross-validation",
    "dictionary_size": "RBFDictionary(n_components=...) in features",
    "nystroem": "scikit-learn's Nystroem(...) in features",
    "cv_folds": "ORLRCV(cv=...)",
    "cv_scoring": "ORLRCV(scoring=...)",
    "canonical_shapes": "nothing: it is internal (cross_validate shares one packing layout across its folds)",
}
"""Constructor arguments of orlr-ppl 0.1's ``ORLR``, and their spelling now."""


def with_raw_sites_apart(idata: Any) -> Any:
    """A posterior saved by orlr-ppl 0.1 (its sampler's coordinates ``W_raw``, ``beta_raw``, ... in
    the ``posterior`` group) laid out as today's: those in ``unconstrained_posterior``."""
    from ..inference.posterior.arviz_compat import move_variables
    from ..inference.posterior.inference_data import RAW_SITES

    raw = [v for v in RAW_SITES if v in idata.posterior.data_vars]
    return move_variables(idata, raw, "posterior", "unconstrained_posterior") if raw else idata


def check_renamed(removed: Mapping[str, Any], owner: str = "ORLR") -> None:
    """A TypeError naming each old argument's new spelling (``RENAMED``); any other unknown name too."""
    if not removed:
        return
    lines = [f"{k}= is now {RENAMED[k]}" if k in RENAMED else f"{k}= is no argument" for k in removed]
    raise TypeError(f"{owner}() got argument(s) it no longer takes: {'; '.join(lines)}")


def params_of_format_1(old: dict[str, Any], fitted: Mapping[str, Any]) -> dict[str, Any]:
    """orlr-ppl 0.1's flat ``ORLR`` arguments (a format-1 ``metadata.json``) as today's.

    The method's settings become its settings object (the feature map's,
    ``features_of_format_1``, come first); an ``"auto"`` scale the
    value the fit chose (``fitted``); layout and CV settings, which shaped the
    fit but not the model, are dropped, and so is ``tol``, then a tolerance on the
    log posterior's relative change, now one on its gradient (the default applies).
    """
    params = dict(old)
    method = params.pop("method", "em")
    taken = {k: params.pop(k) for k in list(params) if k in RENAMED and k != "tol"}
    params.pop("tol", None)
    rename = {"svi_steps": "num_steps", "num_samples": "num_draws"} if method == "svi" else {}
    settings_class = methods.METHODS.get(method)
    if settings_class is None:
        raise ValueError(f"method={method!r} in a format-1 model: expected one of {tuple(methods.METHODS)}")
    names = {f.name for f in dataclass_fields(settings_class)}
    settings = {rename.get(k, k): v for k, v in taken.items() if rename.get(k, k) in names and v is not None}
    params["inference"] = settings_class(**settings)
    if params.get("prior_scale") == "auto":
        params["prior_scale"] = fitted.get("prior_scale_")
    return params


# -- format 1: orlr-ppl 0.1's folders -------------------------------------------------------------

FORMAT_1_MAP_ARRAYS = (
    "feature_mean_",
    "feature_scale_",
    "feature_quantiles_",
    "kernel_dictionary_",
    "kernel_projection_",
)
"""The arrays in which a format-1 folder kept its hand-written feature map."""


def features_of_format_1(params: dict[str, Any], fitted: Mapping[str, Any]) -> dict[str, Any]:
    """A format-1 estimator's ``standardize`` (and kernel settings) as today's ``features``.

    A folder saved before ``standardize`` existed holds a model fitted on raw
    features: ``features=None``, which is what it did. A kernel model's
    width is the one its fit used (``kernel_gamma_``).
    """
    params = dict(params)
    standardize = params.pop("standardize", False)
    scale = {True: "standard", False: None}.get(standardize, standardize)
    kernel = params.pop("kernel", None)
    gamma = params.pop("gamma", None)
    size, nystroem = params.pop("dictionary_size", None), bool(params.pop("nystroem", False))
    if kernel is None:
        params["features"] = scale
        return params
    gamma = fitted.get("kernel_gamma_", None if gamma == "auto" else gamma)
    step = (
        Nystroem(kernel="rbf", gamma=gamma, n_components=size or 100, random_state=params.get("random_state"))
        if nystroem
        else RBFDictionary(gamma=gamma, n_components=size, random_state=params.get("random_state"))
    )
    before = make_feature_map(scale)
    steps = (
        [] if before is None else (before.steps if isinstance(before, Pipeline) else [("standard", before)])
    )
    params["features"] = Pipeline([*steps, ("kernel", step)])
    return params


def feature_map_of_format_1(meta: Mapping[str, Any], values: dict[str, np.ndarray], param_file: Path) -> Any:
    """The fitted feature map a format-1 folder kept as arrays, as scikit-learn transformers."""
    params, fitted = meta["params"], meta.get("fitted") or {}
    d = int(meta["n_features"])
    steps: list[tuple[str, Any]] = []
    if "feature_quantiles_" in values:
        q = np.asarray(values["feature_quantiles_"], np.float64)
        quantile = QuantileTransformer(
            n_quantiles=len(q), output_distribution="normal", subsample=None, random_state=0
        )
        quantile.quantiles_, quantile.references_ = q, np.linspace(0.0, 1.0, len(q))
        quantile.n_quantiles_, quantile.n_features_in_ = len(q), d
        steps.append(("quantile", quantile))
    mean, scale = values.get("feature_mean_"), values.get("feature_scale_")
    if mean is not None and scale is not None and (np.any(mean) or np.any(scale != 1)):
        if not np.all(scale > 0):
            raise ValueError(f"{param_file}: array 'feature_scale_' must be positive; {FIX}")
        scaler = StandardScaler()
        scaler.mean_, scaler.scale_ = np.asarray(mean, np.float64), np.asarray(scale, np.float64)
        scaler.var_, scaler.n_features_in_, scaler.n_samples_seen_ = scaler.scale_**2, d, 2
        steps.append(("standard", scaler))
    if "kernel_dictionary_" in values:
        dictionary, gamma = np.asarray(values["kernel_dictionary_"]), float(fitted["kernel_gamma_"])
        projection = values.get("kernel_projection_")
        if params.get("nystroem") and projection is not None:
            # Fitted on its own dictionary for scikit-learn's fitted state, then given the saved arrays.
            kernel = Nystroem(kernel="rbf", gamma=gamma, n_components=len(dictionary), random_state=0)
            kernel.fit(dictionary)
            kernel.components_, kernel.normalization_ = dictionary, np.asarray(projection)
            kernel.component_indices_ = np.arange(len(dictionary))
        else:
            kernel = RBFDictionary(gamma=gamma)
            kernel.dictionary_, kernel.gamma_, kernel.n_features_in_ = dictionary, gamma, d
        steps.append(("kernel", kernel))
    if not steps:
        return None
    return steps[0][1] if len(steps) == 1 else Pipeline(steps)


def read_arrays(
    param_file: Path, required: Iterable[str], optional: Iterable[str] = ()
) -> dict[str, np.ndarray]:
    """The ``required`` arrays of ``params.npz``, and those of ``optional`` it holds (read without pickle)."""
    required, optional = list(required), list(optional)
    try:
        archive = np.load(param_file, allow_pickle=False)
    except READ_ERRORS as err:
        raise ValueError(
            f"{param_file} is unreadable (empty, truncated, or not an .npz archive): {err}; {FIX}"
        ) from err
    if not isinstance(archive, np.lib.npyio.NpzFile):
        raise ValueError(f"{param_file} is unreadable: it holds one .npy array, not an .npz archive; {FIX}")
    with archive:
        missing = [k for k in required if k not in archive.files]
        if missing:
            raise ValueError(f"{param_file} is incomplete: it has no array(s) {missing}; {FIX}")
        try:
            return {k: np.asarray(archive[k]) for k in required + optional if k in archive.files}
        except READ_ERRORS as err:
            raise ValueError(f"{param_file} is unreadable (truncated or corrupt): {err}; {FIX}") from err
