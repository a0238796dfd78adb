"""The shared scikit-learn base of every estimator: prediction interface, save and load.

All share one prediction interface over ragged bags (a list of (n_b, d)
arrays, or a ``MIMLData``, whose bags are used): ``predict_proba``/``predict`` per instance (inductive, or
transductive given the bags' label sets), ``predict_bags`` (the union of
predicted instance labels), ``bag_scores`` (per-class bag scores for ranking
metrics: by default the max over instances of ``p(y = c | x)``; ``rule="model"``
the model's own ``P(c in Y_b | X_b)``) and ``score`` (instance accuracy).

Every estimator maps its features (``features``, a scikit-learn transformer or
a name for one, ``orlr_ppl.features``): ``fit`` fits the map on the training
instances (``feature_map_``), and every prediction applies it first
(``_check_bags``), so the map is saved and loaded with the model.
Labels may be class indices, class names or a (B, C) 0/1 label matrix
(``inputs``); saving and loading is ``persistence``.

This module imports none of the estimators built on it: ``BagClassifier.load``
finds the class a saved folder names in a registry that every subclass joins
when it is defined (``__init_subclass__``).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path
from typing import Any, ClassVar, Self

import numpy as np
from scipy.special import logsumexp
from sklearn.base import BaseEstimator
from sklearn.utils.validation import check_is_fitted

from .._version import __version__
from ..data import UNLABELLED
from ..data.container import MIMLData
from ..dp.ragged import bag_log_likelihood, instance_posteriors
from ..dp.validation import check_features, check_label_sets
from ..evaluation.metrics import instance_accuracy
from ..features import fit_bags, make_feature_map, transform_bags
from ..features.maps import linear_scaling
from ..features.saving import array_keys, from_saved, to_saved
from . import persistence
from .inputs import (
    bag_digests,
    check_instance_labels,
    check_scored_labels,
    fit_inputs,
    fit_instance_labels,
    fit_label_sets,
    flat_instances,
    infer_n_classes,
    predict_label_sets,
    score_instance_labels,
    shape_of,
)

BAG_SCORE_RULES = ("max", "model")

Bags = Sequence[np.ndarray] | MIMLData
"""A list of (n_b, d) instance arrays, or a ``MIMLData`` (its bags)."""

_REGISTRY: dict[str, type[BagClassifier]] = {}
"""Estimator classes by name, as ``metadata.json`` stores them (filled by ``__init_subclass__``)."""


# -- input helpers -------------------------------------------------------------


def _bags_of(bags: Bags) -> Sequence[np.ndarray]:
    return bags.bags if isinstance(bags, MIMLData) else bags


def _check_bag_score_rule(rule: str) -> None:
    if rule not in BAG_SCORE_RULES:
        raise ValueError(f"rule={rule!r}: choose one of {BAG_SCORE_RULES}")


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


# -- the base class ------------------------------------------------------------


class BagClassifier(BaseEstimator):
    """Predictions from per-instance class probabilities (``_inductive_proba``).

    Subclasses supply ``_inductive_proba`` and may refine the other hooks
    (``_transductive_proba``, ``_draw_proba``, ``_logits``, ``_ranking_scores``);
    every public prediction method is defined here, once. The hooks receive
    standardised features: ``_check_bags`` applies ``feature_mean_`` and
    ``feature_scale_``, so no hook ever sees raw ones.

    ``_saved_arrays`` maps each fitted array that ``save`` writes to its shape,
    in symbols: "d" (``n_features_in_``), "C" (``n_classes_``) and "K"
    (the outputs: ``C``, plus one for a novel class).
    ``_calibrated`` is False for a model whose probabilities are only a
    monotone transform of scores (``bag_scores(rule="model")`` refuses it).
    """

    _saved_arrays: ClassVar[dict[str, tuple[str, ...]]] = {}
    _optional_arrays: ClassVar[tuple[str, ...]] = ()  # of ``_saved_arrays``: older folders may lack them
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

    def _leak_draws(self, n_draws: int) -> np.ndarray | None:
        """(S,) the chance a leak switches a label on, per draw; None: labels come from instances alone."""
        return None

    def _draw_log_likelihoods(self, feats: list[np.ndarray], sets: list[np.ndarray]) -> Iterator[np.ndarray]:
        """Per posterior draw (a point estimate is one), (B,) ``log p(Y_b | X_b, theta_s)``: the DP on
        the log of ``_draw_proba``'s instance probabilities."""
        probs = self._draw_proba(feats)
        for s in range(len(probs[0])):
            logits = [np.log(np.clip(p[s], 1e-300, None)) for p in probs]
            yield bag_log_likelihood(logits, sets, self.max_labels)

    def _ranking_scores(self, feats: list[np.ndarray]) -> list[np.ndarray]:
        """B arrays (n_b, C) whose max over instances is the ``rule="max"`` bag score."""
        return self._inductive_proba(feats)

    # -- shared input checks ---------------------------------------------------

    def _forget_fit(self) -> None:
        """Drop every fitted attribute, so a refit keeps nothing (names, draws) of the last fit."""
        for name in [k for k in vars(self) if k.endswith("_") and not k.startswith("__")]:
            delattr(self, name)

    def _fit_features(self, feats: list[np.ndarray]) -> list[np.ndarray]:
        """Fit ``feature_map_`` (``features``) on every training instance; the bags mapped."""
        self.n_features_in_ = feats[0].shape[1]
        fmap = make_feature_map(self.features, getattr(self, "random_state", None))
        self.feature_map_ = fmap
        return list(feats) if fmap is None else fit_bags(fmap, feats)

    def _linear_scaling(self) -> tuple[np.ndarray, np.ndarray]:
        """``(mean, scale)``, each (d,), when the map centres and scales only: for raw-unit weights."""
        return linear_scaling(getattr(self, "feature_map_", None), self.n_features_in_)

    def _start_fit(
        self, bags: Bags, targets: Any, what: str, parse: Any
    ) -> tuple[list[np.ndarray], Any, int | None]:
        """Forget the last fit; checked features, targets parsed by ``parse`` (``inputs``), class count.

        ``what`` is "label_sets" or "instance_labels"; named labels set ``class_names_``.
        """
        self._forget_fit()
        bags, targets, n_classes = fit_inputs(self, bags, targets, what)
        targets, n_classes, names = parse(targets, n_classes)
        if names is not None:
            self.class_names_ = names
        return check_features(bags), targets, n_classes

    def _label_set_training_data(
        self, bags: Bags, label_sets: Any
    ) -> tuple[list[np.ndarray], list[Any], int]:
        """Standardised features, label sets as class indices, and the class count (ORLR, SIM).

        Label sets may be index lists, name lists (``class_names_`` becomes
        the sorted names) or a (B, C) 0/1 matrix; see ``inputs``.
        """
        feats, label_sets, n_classes = self._start_fit(bags, label_sets, "label_sets", fit_label_sets)
        if len(feats) != len(label_sets):
            raise ValueError(f"got {len(feats)} bags but {len(label_sets)} label sets: give one per bag")
        self.training_shape_ = shape_of(feats)
        return self._fit_features(feats), label_sets, infer_n_classes(label_sets, n_classes)

    def _instance_training_data(
        self, bags: Bags, instance_labels: Any
    ) -> tuple[np.ndarray, np.ndarray, int, np.ndarray]:
        """Standardised flat (n, d) features, (n,) class indices, the class count, (n,) each one's bag.

        For the reference models. Instances labelled -1 (unlabelled) are left
        out of training (their features still count for the standardisation).
        """
        feats, instance_labels, n_classes = self._start_fit(
            bags, instance_labels, "instance_labels", fit_instance_labels
        )
        x, y = flat_instances(self._fit_features(feats), instance_labels)
        # -1 marks an unlabelled instance (as in MIMLData and the metrics): nothing to learn from.
        labelled = y != UNLABELLED
        if not labelled.any():
            raise ValueError(
                f"all {y.size} instance labels are {UNLABELLED} (unlabelled): nothing to train on"
            )
        bag_of = np.repeat(np.arange(len(feats)), [len(f) for f in feats])[labelled]
        x, y = x[labelled], y[labelled]
        n_classes = infer_n_classes([y], n_classes)
        check_instance_labels(y, n_classes)
        self.training_shape_ = shape_of(feats)
        return x, y, n_classes, bag_of

    def _check_bags(self, bags: Bags) -> list[np.ndarray]:
        """Validated bags, standardised as in training: every prediction goes through here."""
        check_is_fitted(self, "n_classes_")
        feats = check_features(_bags_of(bags), self.n_features_in_)
        return transform_bags(getattr(self, "feature_map_", None), feats)

    def _check_sets(self, feats: list[np.ndarray], label_sets: Any) -> list[np.ndarray]:
        """Label sets (indices, names or a 0/1 matrix) as sorted int arrays, checked against the bags."""
        sets = predict_label_sets(label_sets, self.n_classes_, getattr(self, "class_names_", None))
        leak, novel = getattr(self, "leak", None) is not None, bool(getattr(self, "novel_class", False))
        return check_label_sets(sets, [len(x) for x in feats], self.n_classes_, self.max_labels, leak, novel)

    # -- predictions -----------------------------------------------------------

    def predict_proba(
        self, bags: Bags, label_sets: Sequence[Iterable[int]] | np.ndarray | None = None
    ) -> list[np.ndarray]:
        """B arrays (n_b, C) of ``p(y = c | x)``, or of ``p(y = c | Y_b, X_b)`` given label sets.

        Label sets: per bag, class indices or class names (of ``class_names_``),
        or a (B, C) 0/1 label matrix. The transductive probabilities are zero
        outside each bag's label set (for the probabilistic models they come
        from the exact DP).
        """
        feats = self._check_bags(bags)
        if label_sets is None:
            return self._inductive_proba(feats)
        return self._transductive_proba(feats, self._check_sets(feats, label_sets))

    def predict(
        self, bags: Bags, label_sets: Sequence[Iterable[int]] | np.ndarray | None = None
    ) -> list[np.ndarray]:
        """B int arrays (n_b,) of instance labels (transductive given ``label_sets``).

        The labels are class indices (into ``class_names_`` where the model has names).

        With a ``MIMLData``, pass ``data.label_sets`` for transductive prediction.
        """
        return [p.argmax(axis=1) for p in self.predict_proba(bags, label_sets)]

    def fitted_on(self, bags: Bags) -> np.ndarray | None:
        """(B,) bool: which of ``bags`` the model was fitted on (the same features, by digest).

        Scores on such bags are in-sample, not held out; ``orlr-ppl evaluate --model`` says so.
        None for a model saved before the digests were kept.
        """
        check_is_fitted(self, "n_classes_")
        known = (getattr(self, "training_shape_", None) or {}).get("bag_digests")
        if known is None:
            return None
        return np.isin(bag_digests(list(_bags_of(bags))), known)

    def predict_bags(self, bags: Bags) -> np.ndarray:
        """(B, C) 0/1 predicted label sets: the union of predicted instance labels."""
        out = np.zeros((len(_bags_of(bags)), self.n_classes_), np.int64)
        for b, y in enumerate(self.predict(bags)):
            out[b, y[y < self.n_classes_]] = 1  # a novel class (index C) names no label
        return out

    def bag_log_likelihood(self, bags: Bags, label_sets: Sequence[Iterable[Any]] | np.ndarray) -> np.ndarray:
        """(B,) ``log p(Y_b | X_b)``: the log probability of each bag's label set under the model.

        The label set is the union of the instances' labels, and its probability
        the exact DP's; for a posterior, the log of its mean over the draws (the
        posterior predictive). It needs bag labels only, so it is the held-out
        proper score for data labelled by bag: ``ORLRCV`` chooses by its mean.
        ``label_sets`` as in ``predict_proba``; a bag its model cannot explain
        (fewer instances than labels, without a leak) is a ValueError naming it.
        """
        if not self._calibrated:
            raise ValueError(
                f"{type(self).__name__}'s scores are margins, not probabilities: it has no likelihood"
            )
        feats = self._check_bags(bags)
        per_draw = np.stack(list(self._draw_log_likelihoods(feats, self._check_sets(feats, label_sets))))
        return logsumexp(per_draw.astype(np.float64), axis=0) - np.log(len(per_draw))

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
        c = self.n_classes_  # the named classes: a novel class is never a bag label
        if rule == "max":
            return np.stack([s.max(axis=0)[:c] for s in self._ranking_scores(feats)])
        scores = []
        for p in self._draw_proba(feats):
            leak = self._leak_draws(len(p))
            probs = label_probability(p)[:, :c]
            if leak is not None:  # a label is on unless neither an instance nor the leak switched it on
                probs = 1.0 - (1.0 - leak[:, None]) * (1.0 - probs)
            scores.append(probs.mean(axis=0))
        return np.stack(scores)

    def score(self, bags: Bags, instance_labels: Sequence[Any] | None = None) -> float:
        """Inductive instance accuracy (a ``MIMLData`` brings its instance labels; names are mapped)."""
        if instance_labels is None:
            if not isinstance(bags, MIMLData) or bags.instance_labels is None:
                raise ValueError("score needs instance labels: pass them, or a MIMLData that has them")
            instance_labels = bags.instance_labels
        check_is_fitted(self, "n_classes_")
        truth = score_instance_labels(instance_labels, getattr(self, "class_names_", None))
        check_scored_labels(truth, self._n_outputs())
        return instance_accuracy(truth, self.predict(bags))

    # -- persistence -------------------------------------------------------------

    def _default_name(self) -> str:
        return type(self).__name__.lower()

    def save(self, path: str | Path | None = None, overwrite: bool = False) -> Path:
        """Write the fitted model to a folder: ``metadata.json`` + ``params.npz`` (+ ``posterior.nc``).

        ``path`` defaults to ``models/<name>`` (``models/orlr-<method>`` for
        ORLR). A folder that already holds a saved model is replaced only with
        ``overwrite=True`` (else a ValueError). Only JSON, ``.npz`` (loaded
        without pickle) and netCDF are written, each through a temporary file,
        ``metadata.json`` last: an interrupted save never leaves a folder that
        pairs new metadata with old arrays.
        """
        check_is_fitted(self, "n_classes_")
        folder = Path("models") / self._default_name() if path is None else Path(path)
        arrays = {name: np.asarray(getattr(self, name)) for name in self._saved_arrays}
        feature_map, map_arrays = to_saved(getattr(self, "feature_map_", None))
        arrays.update(map_arrays)
        persistence.check_finite(
            arrays, type(self).__name__, "the fit diverged; re-fit (e.g. with a prior) first"
        )
        persistence.prepare_folder(folder, overwrite)
        persistence.write_arrays(folder / "params.npz", arrays)
        self._save_extra(folder)
        meta = {
            "package": "orlr-ppl",
            "version": __version__,
            "estimator": type(self).__name__,
            "format": persistence.FORMAT,
            "params": self._params_json(),
            "n_classes": int(self.n_classes_),
            "n_features": int(self.n_features_in_),
            "training_data": getattr(self, "training_shape_", None),
            "class_names": getattr(self, "class_names_", None),
            "feature_names": getattr(self, "feature_names_", None),
            "fitted": self._fitted_metadata(),
            "feature_map": feature_map,
        }
        persistence.write_metadata(folder / "metadata.json", meta)
        return folder

    def _params_json(self) -> dict[str, Any]:
        """The constructor arguments as JSON values, for ``metadata.json``: a transformer given as
        ``features`` is written unfitted, as ``orlr_ppl.features.saving`` describes it."""
        params = dict(self.get_params(deep=False))
        if params.get("features") is not None and not isinstance(params["features"], str):
            params["features"] = {"transformer": persistence.unfitted_description(params["features"])}
        return params

    @classmethod
    def _params_from_json(cls, meta: dict[str, Any], meta_file: Path) -> dict[str, Any]:
        """The constructor arguments saved in ``metadata.json`` (the inverse of ``_params_json``)."""
        params = dict(meta["params"])
        if persistence.check_format(meta, meta_file) == 1:
            params = persistence.features_of_format_1(params, meta.get("fitted") or {})
        return persistence.saved_params({**meta, "params": params}, cls._get_param_names(), meta_file)

    def _save_extra(self, folder: Path) -> None:
        """Write files beyond ``params.npz`` (ORLR: ``posterior.nc``), before ``metadata.json``."""

    def _fitted_metadata(self) -> dict[str, Any]:
        """Fitted scalars kept in ``metadata.json`` (``"fitted"``), set back as attributes by ``load``."""
        return {}

    @classmethod
    def load(cls, path: str | Path) -> Self:
        """Restore a model written by ``save``; predictions are identical.

        ``BagClassifier.load`` returns whichever estimator the folder holds;
        ``ORLR.load`` (etc.) insists on its own class. A damaged or edited
        file raises a ValueError naming it: a missing or mistyped entry of
        ``metadata.json``, an unknown parameter, an unreadable ``params.npz``,
        arrays of the wrong shape, or NaN/infinite weights.
        """
        folder = Path(path)
        meta, meta_file, param_file = persistence.read_metadata(folder, _REGISTRY)
        target = _saved_class(cls, meta["estimator"], meta_file)
        model = target(**target._params_from_json(meta, meta_file))
        model.n_classes_, model.n_features_in_ = meta["n_classes"], meta["n_features"]
        optional = [k for k in model._optional_arrays if k in model._saved_arrays]
        required = [k for k in model._saved_arrays if k not in optional]
        fmt = persistence.check_format(meta, meta_file)
        map_keys = array_keys(meta.get("feature_map")) if fmt >= 2 else list(persistence.FORMAT_1_MAP_ARRAYS)
        values = persistence.read_arrays(param_file, required, [*optional, *map_keys])
        persistence.check_finite(values, str(param_file), persistence.FIX)
        if fmt >= 2:
            model.feature_map_ = from_saved(meta.get("feature_map"), values, str(meta_file))
        else:
            model.feature_map_ = persistence.feature_map_of_format_1(meta, values, param_file)
        for k in map_keys:
            values.pop(k, None)
        for k, v in values.items():
            setattr(model, k, v)
        for k, v in (meta.get("fitted") or {}).items():
            setattr(model, k, v)
        model._check_loaded(param_file)  # after the fitted scalars, so that it can check them too
        if meta.get("training_data"):
            model.training_shape_ = meta["training_data"]
        if meta.get("class_names"):
            model.class_names_ = list(meta["class_names"])
        if meta.get("feature_names"):
            model.feature_names_ = list(meta["feature_names"])
        return model

    def _array_dims(self) -> dict[str, int]:
        """The sizes the symbols of ``_saved_arrays`` stand for in this fitted model."""
        dims = {"d": self.n_features_in_, "C": self.n_classes_}
        dims["K"] = self._n_outputs()
        return dims

    def _n_outputs(self) -> int:
        """K, the classes a prediction ranges over: ``n_classes_``, plus one for a novel class."""
        return self.n_classes_ + int(bool(getattr(self, "novel_class", False)))

    def _check_loaded(self, param_file: Path) -> None:
        """Raise if a loaded array's shape disagrees with ``metadata.json`` (see ``_saved_arrays``), or the
        feature map cannot map ``n_features_in_`` features to finite values."""
        fmap = getattr(self, "feature_map_", None)
        if fmap is not None:
            try:
                probe = np.asarray(fmap.transform(np.zeros((1, self.n_features_in_))))
            except Exception as err:  # a damaged map fails in whatever way its arrays make it
                raise ValueError(
                    f"{param_file}: the feature map does not map {self.n_features_in_} features "
                    f"({type(err).__name__}: {err}); {persistence.FIX}"
                ) from err
            if not np.all(np.isfinite(probe)):
                raise ValueError(f"{param_file}: the feature map gives non-finite values; {persistence.FIX}")
        dims = self._array_dims()
        for name, symbols in self._saved_arrays.items():
            if name in self._optional_arrays and not hasattr(self, name):
                continue
            want = tuple(dims[s] for s in symbols)
            if np.shape(getattr(self, name)) != want:
                raise ValueError(
                    f"{param_file} holds arrays whose shapes do not match metadata.json: {name!r} has shape "
                    f"{np.shape(getattr(self, name))}, expected {want}; {persistence.FIX}"
                )


def _saved_class(cls: type[BagClassifier], name: str, meta_file: Path) -> type[BagClassifier]:
    """The class to rebuild: the registered ``name``, which must be ``cls`` or a subclass of it."""
    target = _REGISTRY.get(name)
    if target is None or not issubclass(target, cls):  # ORLR.load reads an ORLRCV (a kind of ORLR) too
        raise ValueError(f"{meta_file} holds a {name}, not a {cls.__name__}")
    return target
