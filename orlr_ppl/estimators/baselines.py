"""Reference baselines trained on instance labels: ``SoftmaxRegression`` (upper bound), ``MajorityClass``.

Both fit on what a MIML learner never sees (the instance labels), to bracket
ORLR's accuracy; they predict through the shared ``_BagClassifier`` interface,
so transductive prediction uses the same exact DP as ORLR.
"""

from __future__ import annotations

import warnings
from collections.abc import Sequence
from typing import Any

import numpy as np
from scipy.special import log_softmax, softmax
from sklearn.utils.validation import check_is_fitted

from ..data.kernel import fit_kernel_map, median_gamma
from ..dp.validation import DEFAULT_MAX_LABELS
from ..inference.diagnostics import ConvergenceWarning
from . import model_selection  # its grids read at fit time, so one assignment changes both estimators'
from .base import SCALING_ARRAYS, Bags, _BagClassifier
from .feature_map import to_feature_units
from .kernel_features import _KernelFeatures
from .model_selection import select_by_cv
from .softmax_solver import SoftmaxFit, fit_softmax


class SoftmaxRegression(_KernelFeatures, _BagClassifier):
    """Softmax regression trained on instance labels: the upper-bound baseline (SLR, and K-SLR).

    l2-regularised multinomial logistic regression, fitted by L-BFGS
    (``softmax_solver``), with penalty ``||W||^2 / (2 prior_scale**2)``: the
    same prior as ORLR's (scikit-learn's multinomial ``C = prior_scale**2``);
    intercepts unpenalised.
    ``fit(bags, instance_labels)`` takes one array per bag of class indices,
    or of class names (``class_names_``: the sorted names; predictions are
    indices into it).

    With ``kernel="rbf"`` it is K-SLR, the kernel version the JMLR paper
    bounds kernel ORLR with: the same RBF features against a dictionary of
    training instances (``data.kernel``) as ``ORLR(kernel="rbf")``.
    ``gamma="auto"`` and ``prior_scale="auto"`` are chosen inside ``fit`` by
    ``cv_folds``-fold cross-validation over bags (folds never split a bag),
    scored by the held-out instances' mean ``log p(y | x)``: the model is
    trained on instance labels, so its selection may use them too (ORLR's uses
    bag labels only).

    Args:
        prior_scale: the weights' prior sd, or "auto" (chosen from
            ``model_selection.PRIOR_SCALES``).
        max_iter, tol: L-BFGS's iterations at most, and its bound on the
            averaged objective's largest gradient component (else a
            ``ConvergenceWarning``).
        standardize: centre and scale each feature by its training mean and
            standard deviation (a constant feature: scale 1) before fitting,
            and before every prediction, so the penalty treats every feature
            alike whatever its units; "quantile-normal": each feature through
            its training quantiles to a standard Normal first
            (``feature_quantiles_``; ``coef_in_feature_units()`` then refuses).
        kernel: None (linear features) or "rbf".
        gamma: the RBF width, or "auto" (``GAMMA_FACTORS`` times the median
            heuristic).
        dictionary_size: kernel: keep this many training instances, drawn at
            random; None: all of them.
        nystroem: kernel: Nystroem features instead of the kernel columns.
        cv_folds: folds of the "auto" selection.
        random_state: seeds the dictionary, the median heuristic and the folds.

    Fitted attributes: ``coef_`` (R, C), R the features the model sees
    (standardised inputs: see ``coef_in_feature_units``; or kernel features),
    ``intercept_`` (C,), ``feature_mean_``, ``feature_scale_`` (d,) the
    standardisation (zeros and ones with ``standardize=False``),
    ``row_scale_`` (R,), ``prior_scale_``, ``n_iter_``, ``converged_`` (L-BFGS met
    ``tol``), ``n_classes_``, ``n_features_in_``;
    kernel: ``kernel_dictionary_`` (m, d), ``kernel_gamma_``
    (``kernel_projection_`` with Nystroem); "auto": ``cv_results_``.
    """

    def __init__(
        self,
        prior_scale: float | str = 1.0,
        fit_intercept: bool = True,
        n_classes: int | None = None,
        max_labels: int = DEFAULT_MAX_LABELS,
        max_iter: int = 1000,
        tol: float = 1e-6,
        standardize: bool | str = True,
        kernel: str | None = None,
        gamma: float | str = "auto",
        dictionary_size: int | None = None,
        nystroem: bool = False,
        cv_folds: int = 3,
        random_state: int | None = None,
    ) -> None:
        self.prior_scale = prior_scale
        self.fit_intercept = fit_intercept
        self.n_classes = n_classes
        self.max_labels = max_labels
        self.max_iter = max_iter
        self.tol = tol
        self.standardize = standardize
        self.kernel = kernel
        self.gamma = gamma
        self.dictionary_size = dictionary_size
        self.nystroem = nystroem
        self.cv_folds = cv_folds
        self.random_state = random_state

    def fit(self, bags: Bags, instance_labels: Sequence[Any] | None = None) -> SoftmaxRegression:
        """Fit on instance labels (one array of indices or names per bag), or a ``MIMLData`` that has them."""
        self._check_gamma()
        if not (
            self.prior_scale == "auto" or (np.isscalar(self.prior_scale) and float(self.prior_scale) > 0)
        ):
            raise ValueError(f"prior_scale={self.prior_scale!r}: give a positive scale, or 'auto' (CV)")
        x, y, n_classes, bag_of = self._instance_training_data(bags, instance_labels)
        gammas = [self.gamma]
        if self.kernel is not None and self.gamma == "auto":
            gammas = [median_gamma(x, self._seed()) * f for f in model_selection.GAMMA_FACTORS]
        scales = (
            list(model_selection.PRIOR_SCALES) if self.prior_scale == "auto" else [float(self.prior_scale)]
        )
        grid = [{"gamma": g, "prior_scale": sc} for g in gammas for sc in scales]
        if self.kernel is None:
            grid = [{"prior_scale": sc} for sc in scales]
        best = grid[0]
        if len(grid) > 1:
            score = _InstanceCV(self, x, y, bag_of, n_classes)
            chosen = select_by_cv(score, int(bag_of.max()) + 1, grid, self.cv_folds, self._seed())
            best, self.cv_results_ = chosen.best, chosen.table
        if self.kernel is not None:
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
        self.n_classes_, self.n_features_in_ = n_classes, len(self.feature_mean_)
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
        if self.kernel is not None:
            meta["kernel_gamma_"] = float(self.kernel_gamma_)
        return meta

    def coef_in_feature_units(self) -> tuple[np.ndarray, np.ndarray]:
        """``(coef, intercept)``, (d, C) and (C,), for raw features: ``x @ coef + intercept``: the logits."""
        check_is_fitted(self, "n_classes_")
        if self.kernel is not None:
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
            if gamma is not None:
                m = self.model
                kmap = fit_kernel_map(
                    x_tr, m.kernel, float(gamma), m.dictionary_size, bool(m.nystroem), m._seed()
                )
                x_tr, x_te = kmap.transform(x_tr), kmap.transform(x_te)
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


class MajorityClass(_BagClassifier):
    """Predicts the most frequent training instance label for every instance.

    ``predict_proba`` returns the training class frequencies (so ranking
    metrics and transductive prediction are defined). Instance labels may be
    class indices or names, as for ``SoftmaxRegression``.

    Args:
        standardize: kept for a common interface (and saved): the prediction
            ignores the features, so it changes nothing.

    Fitted attributes: ``class_prior_`` (C,), ``feature_mean_``,
    ``feature_scale_`` (d,), ``n_classes_``, ``n_features_in_``.
    """

    _saved_arrays = {"class_prior_": ("C",), **SCALING_ARRAYS}

    def __init__(
        self,
        n_classes: int | None = None,
        max_labels: int = DEFAULT_MAX_LABELS,
        standardize: bool | str = True,
    ) -> None:
        self.n_classes = n_classes
        self.max_labels = max_labels
        self.standardize = standardize

    def fit(self, bags: Bags, instance_labels: Sequence[Any] | None = None) -> MajorityClass:
        """Fit on instance labels (one array of indices or names per bag), or a ``MIMLData`` that has them."""
        x, y, n_classes, _ = self._instance_training_data(bags, instance_labels)
        counts = np.bincount(y, minlength=n_classes).astype(float)
        # A tiny floor keeps transductive posteriors defined for unseen classes.
        self.class_prior_ = np.maximum(counts / counts.sum(), 1e-12)
        self.n_classes_, self.n_features_in_ = n_classes, x.shape[1]
        return self

    def _inductive_proba(self, feats: list[np.ndarray]) -> list[np.ndarray]:
        return [np.tile(self.class_prior_, (len(x), 1)) for x in feats]
