"""The shared scikit-learn base of every estimator, and the input helpers they share.

All share one prediction interface over ragged bags (a list of (n_b, d)
arrays, or a ``MIMLData``, whose bags are used): ``predict_proba``/``predict`` per instance (inductive, or
transductive given the bags' label sets), ``predict_bags`` (the union of
predicted instance labels), ``bag_scores`` (per-class bag scores for ranking
metrics: by default the max over instances of ``p(y = c | x)``; ``rule="model"``
the model's own ``P(c in Y_b | X_b)``) and ``score`` (instance accuracy).

This module imports none of the estimators built on it: ``_BagClassifier.load``
finds the class a saved folder names in a registry that every subclass joins
when it is defined (``__init_subclass__``).
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any, ClassVar, Self

import numpy as np
from sklearn.base import BaseEstimator
from sklearn.utils.validation import check_is_fitted

from .._version import __version__
from ..data.container import MIMLData
from ..dp.ragged import instance_posteriors
from ..dp.validation import check_features, check_label_sets
from ..evaluation.metrics import instance_accuracy

BAG_SCORE_RULES = ("max", "model")

Bags = Sequence[np.ndarray] | MIMLData
"""A list of (n_b, d) instance arrays, or a ``MIMLData`` (its bags)."""

_REGISTRY: dict[str, type[_BagClassifier]] = {}
"""Estimator classes by name, as ``metadata.json`` stores them (filled by ``__init_subclass__``)."""


# -- input helpers -------------------------------------------------------------


def _bags_of(bags: Bags) -> Sequence[np.ndarray]:
    return bags.bags if isinstance(bags, MIMLData) else bags


def _fit_inputs(
    estimator: _BagClassifier, data: Bags, targets: Sequence[Any] | None, what: str
) -> tuple[Sequence[np.ndarray], Sequence[Any], int | None]:
    """``(bags, targets, n_classes)`` from ``fit(bags, targets)`` or ``fit(MIMLData)``.

    ``what`` is "label_sets" or "instance_labels". A ``MIMLData`` is first
    checked for bags that break the union assumption (all listed in one error).
    """
    if not isinstance(data, MIMLData):
        if targets is None:
            raise ValueError(f"fit needs (bags, {what}) or a MIMLData")
        return data, targets, estimator.n_classes
    if targets is not None:
        raise ValueError(f"give either a MIMLData or (bags, {what}), not both")
    if what == "label_sets":
        data.check_fittable()
    elif data.instance_labels is None:
        raise ValueError(f"{type(estimator).__name__} trains on instance labels; this MIMLData has none")
    estimator.class_names_ = list(data.class_names)
    estimator.feature_names_ = list(data.feature_names)
    n_classes = data.n_classes if estimator.n_classes is None else estimator.n_classes
    return data.bags, getattr(data, what), n_classes


def _infer_n_classes(label_sets: Sequence[Iterable[int]], n_classes: int | None) -> int:
    if n_classes is not None:
        return int(n_classes)
    top = max((int(max(s)) for s in label_sets if len(list(s))), default=-1)
    if top < 1:
        raise ValueError("cannot infer n_classes from labels: pass n_classes (at least 2)")
    return top + 1


def _flat_instances(
    feats: list[np.ndarray], instance_labels: Sequence[np.ndarray]
) -> tuple[np.ndarray, np.ndarray]:
    """(n, d) features and (n,) int labels of all bags, end to end."""
    if len(feats) != len(instance_labels):
        raise ValueError(f"got {len(feats)} bags but {len(instance_labels)} instance-label arrays")
    for b, (x, y) in enumerate(zip(feats, instance_labels)):
        if np.shape(y) != (len(x),):
            raise ValueError(f"bag {b} has {len(x)} instances but instance labels of shape {np.shape(y)}")
    return np.concatenate(feats), np.concatenate([np.asarray(y, dtype=np.int64) for y in instance_labels])


def _shape_of(bags: Sequence[np.ndarray]) -> dict[str, int]:
    """Training data shape kept in the saved metadata."""
    return {"n_bags": len(bags), "n_instances": int(sum(len(b) for b in bags))}


def _check_instance_labels(y: np.ndarray, n_classes: int) -> None:
    bad = y[(y < 0) | (y >= n_classes)]
    if bad.size:
        raise ValueError(f"instance labels {np.unique(bad).tolist()} outside [0, {n_classes})")


def _check_bag_score_rule(rule: str) -> None:
    if rule not in BAG_SCORE_RULES:
        raise ValueError(f"rule={rule!r}: choose one of {BAG_SCORE_RULES}")


def split_by_bag(flat: np.ndarray, feats: Sequence[np.ndarray], axis: int = 0) -> list[np.ndarray]:
    """Cut an array laid out over all bags' instances (length n on ``axis``) back into B per-bag arrays."""
    return np.split(flat, np.cumsum([len(x) for x in feats])[:-1], axis=axis)


def label_probability(proba: np.ndarray) -> np.ndarray:
    """``P(c in Y_b) = 1 - prod_i (1 - p_ic)``: the chance that some instance of the bag takes label c.

    Args:
        proba: (..., n_b, C) instance class probabilities of one bag.
    Returns:
        (..., C). Computed as ``-expm1(sum_i log1p(-p_ic))``, which keeps its
        precision when every ``p_ic`` is small (where ``1 - prod`` would cancel)
        and gives exactly 1 when some ``p_ic`` is 1.
    """
    with np.errstate(divide="ignore"):  # log1p(-1) = -inf is the right answer
        log_none = np.log1p(-np.clip(proba, 0.0, 1.0)).sum(axis=-2)
    return -np.expm1(log_none)


def _json_default(obj: Any) -> Any:
    if isinstance(obj, np.generic):
        return obj.item()
    raise TypeError(f"cannot store {type(obj).__name__} in JSON")


# -- the base class ------------------------------------------------------------


class _BagClassifier(BaseEstimator):
    """Predictions from per-instance class probabilities (``_inductive_proba``).

    Subclasses supply ``_inductive_proba`` and may refine the other hooks
    (``_transductive_proba``, ``_draw_proba``, ``_logits``, ``_ranking_scores``);
    every public prediction method is defined here, once.

    ``_saved_arrays`` maps each fitted array that ``save`` writes to its shape,
    in symbols: "d" (``n_features_in_``) and "C" (``n_classes_``).
    ``_calibrated`` is False for a model whose probabilities are only a
    monotone transform of scores (``bag_scores(rule="model")`` refuses it).
    """

    _saved_arrays: ClassVar[dict[str, tuple[str, ...]]] = {}
    _calibrated: ClassVar[bool] = True

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)  # scikit-learn's metadata routing hooks in here too
        # The registry, not an import, is how load() reaches the subclasses: they import this module.
        # Importing any estimator module runs the package __init__, which imports them all.
        if not cls.__name__.startswith("_"):
            _REGISTRY[cls.__name__] = cls

    # -- hooks -----------------------------------------------------------------

    def _inductive_proba(self, feats: list[np.ndarray]) -> list[np.ndarray]:
        """B arrays (n_b, C) of ``p(y = c | x)``."""
        raise NotImplementedError

    def _transductive_proba(self, feats: list[np.ndarray], sets: list[np.ndarray]) -> list[np.ndarray]:
        """B arrays (n_b, C) of ``p(y = c | Y_b, X_b)`` given validated label sets: the exact DP."""
        return instance_posteriors(self._logits(feats), sets, self.max_labels)

    def _draw_proba(self, feats: list[np.ndarray]) -> list[np.ndarray]:
        """B arrays (S, n_b, C) of ``p(y | x, theta_s)`` per posterior draw; a point estimate is S = 1."""
        return [p[None] for p in self._inductive_proba(feats)]

    def _logits(self, feats: list[np.ndarray]) -> list[np.ndarray]:
        """B arrays (n_b, C) of class scores for the DP (any per-instance shift is harmless)."""
        return [np.log(np.clip(p, 1e-300, None)) for p in self._inductive_proba(feats)]

    def _ranking_scores(self, feats: list[np.ndarray]) -> list[np.ndarray]:
        """B arrays (n_b, C) whose max over instances is the ``rule="max"`` bag score."""
        return self._inductive_proba(feats)

    # -- shared input checks ---------------------------------------------------

    def _instance_training_data(
        self, bags: Bags, instance_labels: Sequence[np.ndarray] | None
    ) -> tuple[np.ndarray, np.ndarray, int]:
        """Validated flat (n, d) features, (n,) labels and the class count (reference models)."""
        bags, instance_labels, n_classes = _fit_inputs(self, bags, instance_labels, "instance_labels")
        feats = check_features(bags)
        x, y = _flat_instances(feats, instance_labels)
        n_classes = _infer_n_classes([y], n_classes)
        _check_instance_labels(y, n_classes)
        self.training_shape_ = _shape_of(feats)
        return x, y, n_classes

    def _check_bags(self, bags: Bags) -> list[np.ndarray]:
        check_is_fitted(self, "n_classes_")
        return check_features(_bags_of(bags), self.n_features_in_)

    def _check_sets(self, feats: list[np.ndarray], label_sets: Sequence[Iterable[int]]) -> list[np.ndarray]:
        """Label sets as sorted int arrays, checked against the bags and the fitted classes."""
        return check_label_sets(label_sets, [len(x) for x in feats], self.n_classes_, self.max_labels)

    # -- predictions -----------------------------------------------------------

    def predict_proba(
        self, bags: Bags, label_sets: Sequence[Iterable[int]] | None = None
    ) -> list[np.ndarray]:
        """B arrays (n_b, C) of ``p(y = c | x)``, or of ``p(y = c | Y_b, X_b)`` given label sets.

        The transductive probabilities are zero outside each bag's label set
        (for the probabilistic models they come from the exact DP).
        """
        feats = self._check_bags(bags)
        if label_sets is None:
            return self._inductive_proba(feats)
        return self._transductive_proba(feats, self._check_sets(feats, label_sets))

    def predict(self, bags: Bags, label_sets: Sequence[Iterable[int]] | None = None) -> list[np.ndarray]:
        """B int arrays (n_b,) of instance labels (transductive given ``label_sets``).

        With a ``MIMLData``, pass ``data.label_sets`` for transductive prediction.
        """
        return [p.argmax(axis=1) for p in self.predict_proba(bags, label_sets)]

    def predict_bags(self, bags: Bags) -> np.ndarray:
        """(B, C) 0/1 predicted label sets: the union of predicted instance labels."""
        out = np.zeros((len(_bags_of(bags)), self.n_classes_), np.int64)
        for b, y in enumerate(self.predict(bags)):
            out[b, y] = 1
        return out

    def bag_scores(self, bags: Bags, rule: str = "max") -> np.ndarray:
        """(B, C) per-class bag scores for ranking the classes of each bag.

        Args:
            rule: "max" (the paper's): ``max_i p(y_bi = c | x_bi)`` (for SIM the
                raw scores ``max_i w_c . x_bi``). "model": the bag-label
                probability under the model itself,
                ``P(c in Y_b | X_b) = 1 - prod_i (1 - p(y_bi = c | x_bi))``
                (instances labelled independently), computed per posterior
                draw and averaged over draws (a point estimate is one draw).
                It is at least the "max" score, and grows with the bag's size.
        """
        _check_bag_score_rule(rule)
        if rule == "model" and not self._calibrated:
            name = type(self).__name__
            raise ValueError(
                f"rule='model' needs instance probabilities, and {name}'s scores are margins (its softmax "
                f"is not calibrated): use rule='max' for {name}"
            )
        feats = self._check_bags(bags)
        if rule == "max":
            return np.stack([s.max(axis=0) for s in self._ranking_scores(feats)])
        return np.stack([label_probability(p).mean(axis=0) for p in self._draw_proba(feats)])

    def score(self, bags: Bags, instance_labels: Sequence[np.ndarray] | None = None) -> float:
        """Inductive instance accuracy (a ``MIMLData`` brings its instance labels)."""
        if instance_labels is None:
            if not isinstance(bags, MIMLData) or bags.instance_labels is None:
                raise ValueError("score needs instance labels: pass them, or a MIMLData that has them")
            instance_labels = bags.instance_labels
        return instance_accuracy(instance_labels, self.predict(bags))

    # -- persistence -------------------------------------------------------------

    def _default_name(self) -> str:
        return type(self).__name__.lower()

    def save(self, path: str | Path | None = None) -> Path:
        """Write the fitted model to a folder: ``metadata.json`` + ``params.npz``.

        ``path`` defaults to ``models/<name>`` (``models/orlr-<method>`` for ORLR).
        Only JSON, ``.npz`` (loaded without pickle) and netCDF are written.
        """
        check_is_fitted(self, "n_classes_")
        folder = Path("models") / self._default_name() if path is None else Path(path)
        folder.mkdir(parents=True, exist_ok=True)
        meta = {
            "package": "orlr-ppl",
            "version": __version__,
            "estimator": type(self).__name__,
            "params": self.get_params(),
            "n_classes": int(self.n_classes_),
            "n_features": int(self.n_features_in_),
            "training_data": getattr(self, "training_shape_", None),
            "class_names": getattr(self, "class_names_", None),
            "feature_names": getattr(self, "feature_names_", None),
            "fitted": self._fitted_metadata(),
        }
        (folder / "metadata.json").write_text(json.dumps(meta, indent=2, default=_json_default))
        np.savez(folder / "params.npz", **{name: getattr(self, name) for name in self._saved_arrays})
        return folder

    def _fitted_metadata(self) -> dict[str, Any]:
        """Fitted scalars kept in ``metadata.json`` (``"fitted"``), set back as attributes by ``load``."""
        return {}

    @classmethod
    def load(cls, path: str | Path) -> Self:
        """Restore a model written by ``save``; predictions are identical.

        ``_BagClassifier.load`` returns whichever estimator the folder holds;
        ``ORLR.load`` (etc.) insists on its own class.
        """
        folder = Path(path)
        meta, meta_file, param_file = _read_metadata(folder)
        model = _saved_class(cls, meta.get("estimator"), meta_file)(**meta["params"])
        values = _read_arrays(param_file, model._saved_arrays)
        model.n_classes_, model.n_features_in_ = int(meta["n_classes"]), int(meta["n_features"])
        for k, v in values.items():
            setattr(model, k, v)
        model._check_loaded(param_file)
        for k, v in meta.get("fitted", {}).items():
            setattr(model, k, v)
        if meta.get("training_data"):
            model.training_shape_ = meta["training_data"]
        if meta.get("class_names"):
            model.class_names_ = list(meta["class_names"])
        if meta.get("feature_names"):
            model.feature_names_ = list(meta["feature_names"])
        return model

    def _check_loaded(self, param_file: Path) -> None:
        """Raise if a loaded array's shape disagrees with ``metadata.json`` (see ``_saved_arrays``)."""
        dims = {"d": self.n_features_in_, "C": self.n_classes_}
        for name, symbols in self._saved_arrays.items():
            if np.shape(getattr(self, name)) != tuple(dims[s] for s in symbols):
                raise ValueError(f"{param_file} holds arrays whose shapes do not match metadata.json")


def _read_metadata(folder: Path) -> tuple[dict[str, Any], Path, Path]:
    """``(metadata, metadata.json path, params.npz path)`` of a saved model folder."""
    meta_file, param_file = folder / "metadata.json", folder / "params.npz"
    for f in (meta_file, param_file):
        if not f.is_file():
            raise ValueError(f"{f} is missing: is {folder} a saved orlr-ppl model folder?")
    try:
        meta = json.loads(meta_file.read_text())
    except json.JSONDecodeError as err:
        raise ValueError(f"{meta_file} is not valid JSON (truncated?): {err}") from err
    if meta.get("package") != "orlr-ppl" or meta.get("estimator") not in _REGISTRY:
        raise ValueError(f"{meta_file} does not describe an orlr-ppl estimator")
    return meta, meta_file, param_file


def _saved_class(cls: type[_BagClassifier], name: str, meta_file: Path) -> type[_BagClassifier]:
    """The class to rebuild: the registered ``name``, which must be ``cls`` unless ``cls`` is the base."""
    target = _REGISTRY[name] if cls is _BagClassifier else cls
    if target.__name__ != name:
        raise ValueError(f"{meta_file} holds a {name}, not a {target.__name__}")
    return target


def _read_arrays(param_file: Path, names: Iterable[str]) -> dict[str, np.ndarray]:
    """The named arrays of ``params.npz``, read without pickle."""
    try:
        with np.load(param_file, allow_pickle=False) as arrays:
            return {k: np.asarray(arrays[k]) for k in names}
    except (OSError, ValueError, KeyError) as err:
        raise ValueError(f"{param_file} is unreadable or incomplete: {err}") from err
