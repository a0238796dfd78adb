"""Reference baselines trained on instance labels: ``SoftmaxRegression`` (upper bound), ``MajorityClass``.

Both fit on what a MIML learner never sees (the instance labels), to bracket
ORLR's accuracy; they predict through the shared ``BagClassifier`` interface,
so transductive prediction uses the same exact DP as ORLR.
"""

from __future__ import annotations

import warnings
from collections.abc import Sequence
from typing import Any

import numpy as np
from scipy.special import log_softmax, softmax
from sklearn.base import TransformerMixin
from sklearn.utils.validation import check_is_fitted

from ..dp.validation import DEFAULT_MAX_LABELS
from ..features import make_feature_map, median_gamma
from ..features.maps import kernel_step, to_feature_units
from ..inference.checks.diagnostics import ConvergenceWarning
from . import model_selection  # its grids read at fit time, so one assignment changes both estimators'
from .base import BagClassifier, Bags
from .kernel_features import KernelFeatures
from .model_selection import select_by_cv
from .softmax_solver import SoftmaxFit, fit_softmax


class SoftmaxRegression(KernelFeatures, BagClassifier):
    """Softmax regression trained on instance labels: the upper-bound baseline (SLR, and K-SLR).

    l2-regularised multinomial logistic regression, fitted by L-BFGS
    (``softmax_solver``), with penalty ``||W||^2 / (2 prior_scale**2)``: the
    same prior as ORLR's (scikit-learn's multinomial ``C = prior_scale**2``);
    intercepts unpenalised.
    ``fit(bags, instance_labels)`` takes one array per bag of class indices,
    or of class names (``class_names_``: the sorted names; predictions are
    indices into it).

    With a kernel step in ``features`` (``"rbf"``, or a pipeline ending in
    ``RBFDictionary`` or ``Nystroem``) it is K-SLR, the kernel version the
    JMLR paper bounds kernel ORLR with: the same RBF features against a
    dictionary of training instances as kernel ORLR's. ``prior_scale="auto"``
    and ``gammas`` are chosen inside ``fit`` by ``cv``-fold cross-validation
    over bags (folds never split a bag), scored by the held-out instances'
    mean ``log p(y | x)``: the model is trained on instance labels, so its
    selection may use them too (ORLR's uses bag labels only).

    Args:
        prior_scale: the weights' prior sd, or "auto" (chosen from
            ``model_selection.PRIOR_SCALES``).
        max_iter, tol: L-BFGS's iterations at most, and its bound on the
            averaged objective's largest gradient component (else a
            ``ConvergenceWarning``).
        features: the instance feature map (``orlr_ppl.features``), fitted on
            the training instances and applied before every prediction:
            ``"standard"`` (so the penalty treats every feature alike
            whatever its units), ``"quantile-normal"``, ``"rbf"``, None, or a
            scikit-learn transformer.
        gammas: with a kernel step, its candidate widths for the
            cross-validation; "auto": ``GAMMA_FACTORS`` times the median
            heuristic; None: the step's own width (or the median heuristic).
        cv: folds of the selection.
        random_state: seeds the dictionary, the median heuristic and the folds (None: seed 0,
            ``seeding``).

    Fitted attributes: ``coef_`` (R, C), R the features the model sees
    (see ``coef_in_feature_units``), ``intercept_`` (C,), ``feature_map_``,
    ``row_scale_`` (R,), ``prior_scale_``, ``n_iter_``, ``converged_`` (L-BFGS
    met ``tol``), ``n_classes_``, ``n_features_in_``; with a kernel,
    ``kernel_gamma_``; after a selection, ``cv_results_``.
    """

    def __init__(
        self,
        prior_scale: float | str = 1.0,
        fit_intercept: bool = True,
        n_classes: int | None = None,
        max_labels: int = DEFAULT_MAX_LABELS,
        max_iter: int = 1000,
        tol: float = 1e-6,
        features: str | TransformerMixin | None = "standard",
        gammas: Sequence[float] | str | None = None,
        cv: int = 3,
        random_state: int | None = None,
    ) -> None:
        self.prior_scale = prior_scale
        self.fit_intercept = fit_intercept
        self.n_classes = n_classes
        self.max_labels = max_labels
        self.max_iter = max_iter
        self.tol = tol
        self.features = features
        self.gammas = gammas
        self.cv = cv
        self.random_state = random_state

    def fit(self, bags: Bags, instance_labels: Sequence[Any] | None = None) -> SoftmaxRegression:
        """Fit on instance labels (one array of indices or names per bag), or a ``MIMLData`` that has them."""
        if not (
            self.prior_scale == "auto" or (np.isscalar(self.prior_scale) and float(self.prior_scale) > 0)
        ):
            raise ValueError(f"prior_scale={self.prior_scale!r}: give a positive scale, or 'auto' (CV)")
        x, y, n_classes, bag_of = self._instance_training_data(bags, instance_labels)
        gammas: list[float | None] = [None]
        if self._kernel_spec() is not None:
            if isinstance(self.gammas, str):
                if self.gammas != "auto":
                    raise ValueError(f"gammas={self.gammas!r}: give widths, 'auto' or None")
                gammas = [median_gamma(x, self._seed()) * f for f in model_selection.GAMMA_FACTORS]
            else:
                gammas = (
                    [self._default_gamma([x])] if self.gammas is None else [float(g) for g in self.gammas]
                )
        scales = (
            list(model_selection.PRIOR_SCALES) if self.prior_scale == "auto" else [float(self.prior_scale)]
        )
        grid = [{**({} if g is None else {"gamma": g}), "prior_scale": sc} for g in gammas for sc in scales]
        best = grid[0]
        if len(grid) > 1:
            score = _InstanceCV(self, x, y, bag_of, n_classes)
            chosen = select_by_cv(score, int(bag_of.max()) + 1, grid, self.cv, self._seed())
            best, self.cv_results_ = chosen.best, chosen.table
        if "gamma" in best:
            [x] = self._build_kernel_map([x], float(best["gamma"]))
        self.prior_scale_ = float(best["prior_scale"])
        self.row_scale_ = x.std(axis=0).astype(np.float64)
        fit = self._fit_weights(x, y, n_classes, self.prior_scale_)
        self.coef_, self.intercept_, self.n_iter_ = fit.coef, fit.intercept, fit.n_iter
        self.converged_ = fit.converged
        if not fit.converged:
            warnings.warn(
                f"SoftmaxRegression: L-BFGS stopped after {fit.n_iter} iterations without meeting "
                f"tol={self.tol}; raise max_iter",
                ConvergenceWarning,
                stacklevel=2,
            )
        self.n_classes_ = n_classes
        return self

    def _fit_weights(
        self, x: np.ndarray, y: np.ndarray, n_classes: int, scale: float, init: np.ndarray | None = None
    ) -> SoftmaxFit:
        """The penalised fit on features ``x`` (n, R) (``softmax_solver``); ``init``: a warm start."""
        return fit_softmax(x, y, n_classes, scale, self.fit_intercept, self.max_iter, self.tol, init)

    def _fitted_metadata(self) -> dict[str, Any]:
        meta: dict[str, Any] = {
            "prior_scale_": self.prior_scale_,
            "n_iter_": int(self.n_iter_),
            "converged_": bool(self.converged_),
        }
        if self._kernel() is not None:
            meta["kernel_gamma_"] = float(self.kernel_gamma_)
        return meta

    def coef_in_feature_units(self) -> tuple[np.ndarray, np.ndarray]:
        """``(coef, intercept)``, (d, C) and (C,), for raw features: ``x @ coef + intercept``: the logits."""
        check_is_fitted(self, "n_classes_")
        if self._kernel() is not None:
            raise ValueError("K-SLR's weights act on kernel features: they have no feature units")
        return to_feature_units(self.coef_, self.intercept_, *self._linear_scaling())

    def _inductive_proba(self, feats: list[np.ndarray]) -> list[np.ndarray]:
        return [softmax(x @ self.coef_ + self.intercept_, axis=1) for x in feats]


class _InstanceCV:
    """``select_by_cv``'s score for ``SoftmaxRegression``: held-out mean ``log p(y | x)`` of instances.

    A fold's kernel features depend on gamma only (the dictionary is drawn
    from the training fold), so the last fold and gamma's are kept for the
    next prior scale, and so is its fit: the grid runs from the strongest
    prior to the weakest, each fit starting from the last one's solution.
    """

    def __init__(
        self, model: SoftmaxRegression, x: np.ndarray, y: np.ndarray, bag_of: np.ndarray, n_classes: int
    ):
        self.model, self.x, self.y, self.bag_of, self.n_classes = model, x, y, bag_of, n_classes
        self._cached: tuple[Any, ...] = ()
        self._theta: np.ndarray | None = None

    def _features(self, gamma: Any, train: np.ndarray, test: np.ndarray) -> tuple[np.ndarray, ...]:
        tr, te = np.isin(self.bag_of, train), np.isin(self.bag_of, test)
        key = (gamma, train.tobytes())
        if not self._cached or self._cached[0] != key:
            x_tr, x_te = self.x[tr], self.x[te]
            if gamma is not None:  # the kernel step alone, fitted on the training fold's instances
                kernel = kernel_step(make_feature_map(self.model.features, self.model.random_state))
                kernel.set_params(gamma=float(gamma))
                x_tr = kernel.fit_transform(x_tr)
                x_te = kernel.transform(x_te)
            self._cached = (key, x_tr, self.y[tr], x_te, self.y[te])
            self._theta = None  # a new fold or gamma: fit from zero
        return self._cached[1:]

    def __call__(self, params: dict[str, Any], train: np.ndarray, test: np.ndarray) -> float:
        x_tr, y_tr, x_te, y_te = self._features(params.get("gamma"), train, test)
        if len(y_te) == 0 or len(y_tr) == 0:
            return 0.0  # a fold with no labelled instance ranks every candidate alike
        fit = self.model._fit_weights(x_tr, y_tr, self.n_classes, float(params["prior_scale"]), self._theta)
        self._theta, coef, icpt = fit.theta, fit.coef, fit.intercept
        return float(np.mean(log_softmax(x_te @ coef + icpt, axis=1)[np.arange(len(y_te)), y_te]))


class MajorityClass(BagClassifier):
    """Predicts the most frequent training instance label for every instance.

    ``predict_proba`` returns the training class frequencies (so ranking
    metrics and transductive prediction are defined). Instance labels may be
    class indices or names, as for ``SoftmaxRegression``.

    Args:
        features: kept for a common interface (and saved): the prediction
            ignores the features, so it changes nothing.

    Fitted attributes: ``class_prior_`` (C,), ``feature_map_``, ``n_classes_``, ``n_features_in_``.
    """

    _saved_arrays = {"class_prior_": ("C",)}

    def __init__(
        self,
        n_classes: int | None = None,
        max_labels: int = DEFAULT_MAX_LABELS,
        features: str | TransformerMixin | None = "standard",
    ) -> None:
        self.n_classes = n_classes
        self.max_labels = max_labels
        self.features = features

    def fit(self, bags: Bags, instance_labels: Sequence[Any] | None = None) -> MajorityClass:
        """Fit on instance labels (one array of indices or names per bag), or a ``MIMLData`` that has them."""
        x, y, n_classes, _ = self._instance_training_data(bags, instance_labels)
        counts = np.bincount(y, minlength=n_classes).astype(float)
        # A tiny floor keeps transductive posteriors defined for unseen classes.
        self.class_prior_ = np.maximum(counts / counts.sum(), 1e-12)
        self.n_classes_ = n_classes
        return self

    def _inductive_proba(self, feats: list[np.ndarray]) -> list[np.ndarray]:
        return [np.tile(self.class_prior_, (len(x), 1)) for x in feats]
