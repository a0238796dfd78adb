"""Reference baselines trained on instance labels: ``SoftmaxRegression`` (upper bound), ``MajorityClass``.

Both fit on what a MIML learner never sees (the instance labels), to bracket
ORLR's accuracy; they predict through the shared ``_BagClassifier`` interface,
so transductive prediction uses the same exact DP as ORLR.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
from scipy.special import softmax
from sklearn.linear_model import LogisticRegression
from sklearn.utils.validation import check_is_fitted

from ..dp.validation import DEFAULT_MAX_LABELS
from .base import SCALING_ARRAYS, Bags, _BagClassifier
from .inputs import to_feature_units


class SoftmaxRegression(_BagClassifier):
    """Softmax regression trained on instance labels: the upper-bound baseline.

    l2-regularised multinomial logistic regression (scikit-learn's lbfgs)
    with penalty ``||W||^2 / (2 prior_scale**2)``, i.e. the same prior as ORLR
    (scikit-learn ``C = prior_scale**2``); intercepts unpenalised.
    ``fit(bags, instance_labels)`` takes one array per bag of class indices,
    or of class names (``class_names_``: the sorted names; predictions are
    indices into it).

    Args:
        standardize: centre and scale each feature by its training mean and
            standard deviation (a constant feature: scale 1) before fitting,
            and before every prediction, so the penalty treats every feature
            alike whatever its units.

    Fitted attributes: ``coef_`` (d, C) on standardised features (see
    ``coef_in_feature_units``), ``intercept_`` (C,), ``feature_mean_``,
    ``feature_scale_`` (d,) the standardisation (zeros and ones with
    ``standardize=False``), ``n_classes_``, ``n_features_in_``.
    """

    _saved_arrays = {"coef_": ("d", "C"), "intercept_": ("C",), **SCALING_ARRAYS}

    def __init__(
        self,
        prior_scale: float = 1.0,
        fit_intercept: bool = True,
        n_classes: int | None = None,
        max_labels: int = DEFAULT_MAX_LABELS,
        max_iter: int = 1000,
        standardize: bool = True,
    ) -> None:
        self.prior_scale = prior_scale
        self.fit_intercept = fit_intercept
        self.n_classes = n_classes
        self.max_labels = max_labels
        self.max_iter = max_iter
        self.standardize = standardize

    def fit(self, bags: Bags, instance_labels: Sequence[Any] | None = None) -> SoftmaxRegression:
        """Fit on instance labels (one array of indices or names per bag), or a ``MIMLData`` that has them."""
        x, y, n_classes = self._instance_training_data(bags, instance_labels)
        clf = LogisticRegression(
            C=self.prior_scale**2, fit_intercept=self.fit_intercept, max_iter=self.max_iter
        )
        clf.fit(x, y)
        # Classes absent from training get no weight and a -inf-like intercept.
        self.coef_ = np.zeros((x.shape[1], n_classes))
        self.intercept_ = np.full(n_classes, -50.0)
        cols = clf.classes_.astype(int)
        # Two classes: scikit-learn keeps one weight vector; split it symmetrically into two softmax columns.
        coef = clf.coef_ if len(cols) > 2 else np.vstack([-clf.coef_, clf.coef_]) / 2
        icpt = clf.intercept_ if len(cols) > 2 else np.array([-1.0, 1.0]) * clf.intercept_ / 2
        self.coef_[:, cols] = coef.T
        self.intercept_[cols] = icpt
        self.n_classes_, self.n_features_in_ = n_classes, x.shape[1]
        return self

    def coef_in_feature_units(self) -> tuple[np.ndarray, np.ndarray]:
        """``(coef, intercept)``, (d, C) and (C,), for raw features: ``x @ coef + intercept``: the logits."""
        check_is_fitted(self, "n_classes_")
        return to_feature_units(self.coef_, self.intercept_, self.feature_mean_, self.feature_scale_)

    def _inductive_proba(self, feats: list[np.ndarray]) -> list[np.ndarray]:
        return [softmax(x @ self.coef_ + self.intercept_, axis=1) for x in feats]


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
        self, n_classes: int | None = None, max_labels: int = DEFAULT_MAX_LABELS, standardize: bool = True
    ) -> None:
        self.n_classes = n_classes
        self.max_labels = max_labels
        self.standardize = standardize

    def fit(self, bags: Bags, instance_labels: Sequence[Any] | None = None) -> MajorityClass:
        """Fit on instance labels (one array of indices or names per bag), or a ``MIMLData`` that has them."""
        x, y, n_classes = self._instance_training_data(bags, instance_labels)
        counts = np.bincount(y, minlength=n_classes).astype(float)
        # A tiny floor keeps transductive posteriors defined for unseen classes.
        self.class_prior_ = np.maximum(counts / counts.sum(), 1e-12)
        self.n_classes_, self.n_features_in_ = n_classes, x.shape[1]
        return self

    def _inductive_proba(self, feats: list[np.ndarray]) -> list[np.ndarray]:
        return [np.tile(self.class_prior_, (len(x), 1)) for x in feats]
