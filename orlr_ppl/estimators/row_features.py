"""ORLR's feature rows: linear features or RBF kernel features, row inclusion and pruning.

Each row of ``coef_`` belongs to one feature the model sees: an input feature
(linear ORLR) or a dictionary element (kernel ORLR, ``data.kernel``). The
l2,1 prior (``prior="l21"``) zeroes whole rows; ``row_inclusion`` says which
rows matter, for point fits and posteriors alike, and ``prune_rows`` drops the
others from a kernel model's dictionary so that predictions evaluate fewer
kernels.
"""

from __future__ import annotations

import warnings
from functools import partial
from typing import TYPE_CHECKING, Any

import numpy as np
from sklearn.utils.validation import check_is_fitted

from ..data.collinearity import CollinearityWarning, describe_dependencies, linear_dependencies
from ..data.kernel import median_gamma
from ..dp.packing import canonical_size
from ..model.priors import WEIGHT_PRIORS, group_laplace_log_normalizer
from . import model_selection  # its grids read at fit time, so one assignment changes both estimators'
from .feature_map import heavy_tail_note, heavy_tailed_features
from .kernel_features import _KernelFeatures
from .model_selection import select_by_bag_cv

if TYPE_CHECKING:  # diagnostics imports ArviZ: loaded only when a posterior is checked
    from ..inference.diagnostics import Diagnostics

INCLUSION_EFFECT = 0.5
"""A row is *included* (in a draw, or a point fit) when moving its feature by one training sd
moves the logits by at least this much: ``||W[j]|| * sd_j >= 0.5`` (half a nat, odds x 1.65)."""


class _RowFeatures(_KernelFeatures):
    """Mixin of ``ORLR``: the kernel map's hyperparameters by bag-level CV, and what its rows are worth."""

    def _check_linear_features(self, feats: list[np.ndarray], n_outputs: int) -> None:
        """Before a posterior fit on linear features: warn, naming them, when some features are
        combinations of the others (``collinearity``), and keep the heavy-tailed ones in
        ``heavy_tailed_features_`` for the convergence report (``_posterior_diagnostics``).

        A MAP is unique along dependent directions, but a posterior holds the prior's whole width there.
        """
        x, names = np.concatenate(feats), getattr(self, "feature_names_", None)
        dep = linear_dependencies(x, names)
        if dep.redundant:
            warnings.warn(describe_dependencies(dep, n_outputs), CollinearityWarning, stacklevel=3)
        self.heavy_tailed_features_ = heavy_tailed_features(x, self.standardize, names)

    def _posterior_diagnostics(self, warn: bool) -> Diagnostics:
        """``posterior_``'s diagnostics, whose problems end with the heavy-tailed features carrying
        failing weights; with ``warn``, one ``ConvergenceWarning`` (pointing at the caller of ``fit``)
        when a check fails. A loaded model reads those features from its ``metadata.json``."""
        from ..inference.diagnostics import diagnose, warn_if_unconverged

        # Absent: kernel features, or a model saved before the record was kept.
        heavy = getattr(self, "heavy_tailed_features_", None) or {}
        note = partial(heavy_tail_note, heavy)
        if warn:
            return warn_if_unconverged(self.posterior_, stacklevel=3, note=note)
        return diagnose(self.posterior_, note=note)

    def _check_row_params(self) -> None:
        if self.prior not in WEIGHT_PRIORS:
            raise ValueError(f"prior={self.prior!r}: choose one of {WEIGHT_PRIORS}")
        if self.prior == "group_horseshoe" and (
            self.method not in ("nuts", "svi") or self.prior_scale is None
        ):
            raise ValueError(
                f"prior='group_horseshoe' with method={self.method!r}, prior_scale={self.prior_scale!r}: its "
                "density is unbounded at zero, so it has no MAP; sample it with method='nuts' or 'svi' and a "
                "prior_scale (the slab), or use prior='l21' for a point estimate"
            )
        auto = [k for k in ("prior_scale", "gamma") if getattr(self, k) == "auto"]
        if self.prior == "group_horseshoe" and self.prior_scale == "auto":
            raise ValueError(
                "prior='group_horseshoe' learns its global shrinkage from the data; prior_scale is its slab "
                "(the largest plausible row size): give a number, not 'auto'"
            )
        self._check_gamma()
        model_selection.check_cv_scoring(self.cv_scoring)
        if self.kernel is None:
            auto = [k for k in auto if k != "gamma"]
        if auto and (self.novel_class or self.leak is not None):
            raise ValueError(
                f"{'/'.join(auto)}='auto' chooses by the union model's held-out bag likelihood: "
                "give explicit values with novel_class or leak"
            )
        if self.prior_scale is not None and self.prior_scale != "auto" and not float(self.prior_scale) > 0:
            raise ValueError(
                f"prior_scale={self.prior_scale!r}: give a positive scale, 'auto', or None (a flat prior)"
            )

    def _fit_rows(self, feats: list[np.ndarray], label_sets: list[Any], n_classes: int) -> list[np.ndarray]:
        """Resolve ``"auto"`` hyperparameters by bag-level CV, build the kernel map; the features to fit.

        Sets ``prior_scale_``, for a kernel ``kernel_gamma_`` and the map, and
        ``row_scale_`` (the fitted features' training sd), and ``cv_results_``
        when something was chosen.
        """
        self._check_row_params()
        grid_gamma = [self.gamma]
        if self.kernel is not None and self.gamma == "auto":
            base = median_gamma(np.concatenate(feats), self._seed())
            grid_gamma = [base * f for f in model_selection.GAMMA_FACTORS]
        grid_scale = list(model_selection.PRIOR_SCALES) if self.prior_scale == "auto" else [self.prior_scale]
        gamma, scale = grid_gamma[0], grid_scale[0]
        if len(grid_gamma) * len(grid_scale) > 1:
            grid = [{"gamma": g, "prior_scale": sc} for g in grid_gamma for sc in grid_scale]
            chosen = select_by_bag_cv(
                self, feats, label_sets, n_classes, grid, self.cv_folds, self._seed(), self.cv_scoring
            )
            gamma, scale = chosen.best["gamma"], chosen.best["prior_scale"]
            self.cv_results_ = chosen.table
        self.prior_scale_ = scale
        if self.kernel is not None:
            feats = self._build_kernel_map(feats, float(gamma))
        self.row_scale_ = np.concatenate(feats).std(axis=0).astype(np.float64)
        return feats

    def _pad_rows(self, feats: list[np.ndarray], canonical: bool) -> tuple[list[np.ndarray], int]:
        """Kernel point fits on canonical shapes: zero feature columns up to ``canonical_size(R)``.

        Dictionaries of different sizes (the folds of ``"auto"``'s selection, of a
        cross-validation) then share one compiled program. A zero column's
        weights stay exactly zero in EM, L-BFGS and FISTA alike (their gradient
        is the prior's, zero at zero), so ``_unpad_rows`` only cuts them off.
        """
        if self.kernel is None or not canonical or self.method not in ("em", "map"):
            return feats, 0
        r = feats[0].shape[1]
        pad = canonical_size(r, steps=8) - r
        return [np.pad(x, ((0, 0), (0, pad))) for x in feats], pad

    def _unpad_rows(self, pad: int) -> None:
        """Cut the padded rows off ``coef_``, and their prior's log density at 0 off the log posterior."""
        if not pad:
            return
        self.coef_ = np.asarray(self.coef_)[:-pad]
        k = np.shape(self.coef_)[1] - 1  # raw weights per row (sum-to-zero basis)
        scale = self.prior_scale_
        if scale is None:
            per_row = 0.0  # a flat prior adds nothing
        elif self.prior == "l21":
            per_row = -float(group_laplace_log_normalizer(k, scale))
        else:
            per_row = -0.5 * k * float(np.log(2 * np.pi * scale**2))
        self.log_posterior_ = float(self.log_posterior_) - pad * per_row
        if hasattr(self, "history_"):
            self.history_ = np.asarray(self.history_) - pad * per_row

    def _fit_silently(self, feats: list[np.ndarray], label_sets: list[Any]) -> Any:
        """``fit`` without its convergence warning (a CV candidate's budget is the outer fit's)."""
        from ..inference.diagnostics import ConvergenceWarning

        with warnings.catch_warnings():
            warnings.simplefilter("ignore", ConvergenceWarning)
            return self.fit(feats, label_sets)

    def _drop_zero_rows(self) -> None:
        """After an l2,1 point fit of kernel ORLR: dictionary elements whose rows are exactly zero go."""
        point = not hasattr(self, "coef_draws_")
        if self.kernel is not None and not self.nystroem and self.prior == "l21" and point:
            zero = ~np.any(np.asarray(self.coef_) != 0, axis=1)
            if zero.any():
                self._keep_rows(np.flatnonzero(~zero), int(zero.sum()))

    def _row_scale(self) -> np.ndarray:
        """(R,) the training sd of each row's feature: 1 for standardised inputs."""
        scale = getattr(self, "row_scale_", None)  # absent from folders saved before it existed
        return np.ones(np.shape(self.coef_)[0]) if scale is None else np.asarray(scale)

    def row_inclusion(self, effect: float = INCLUSION_EFFECT) -> np.ndarray:
        """(R,) per row of ``coef_``, the share of posterior draws in which it matters.

        A row matters when ``||W[j]|| * sd_j >= effect``, ``sd_j`` its
        feature's training sd (``INCLUSION_EFFECT``): moving that feature by
        one sd moves the class logits by at least ``effect`` (in l2 norm over
        classes). NUTS/SVI: the share over the posterior draws kept for
        prediction; EM/MAP: 0 or 1 (an l2,1 fit's zero rows are 0).
        """
        check_is_fitted(self, "n_classes_")
        w = self.coef_draws_ if hasattr(self, "coef_draws_") else np.asarray(self.coef_)[None]
        effect_size = np.linalg.norm(w, axis=-1) * self._row_scale()[None, :]
        return (effect_size >= effect).mean(axis=0)

    def prune_rows(self, min_inclusion: float = 0.5) -> Any:
        """Drop the rows whose ``row_inclusion()`` is below ``min_inclusion``; returns self.

        Kernel ORLR (plain dictionary features): the dictionary elements go
        too, so every prediction evaluates fewer kernels. Linear ORLR: the
        rows are set to zero (a feature cannot be removed from the input).
        Exact for an l2,1 point fit's zero rows; for a posterior, the dropped
        rows' small weights are dropped from every draw (an approximation
        whose size ``row_inclusion`` bounds).
        """
        keep = self.row_inclusion() >= float(min_inclusion)
        if self.kernel is not None and self.nystroem:
            raise ValueError("Nystroem features mix dictionary elements: prune_rows needs nystroem=False")
        if self.kernel is None:
            self.coef_ = np.where(keep[:, None], self.coef_, 0.0)
            if hasattr(self, "coef_draws_"):
                self.coef_draws_ = np.where(keep[None, :, None], self.coef_draws_, 0.0)
            return self
        self._keep_rows(np.flatnonzero(keep), int(np.size(keep) - keep.sum()))
        return self

    def _keep_rows(self, rows: np.ndarray, n_dropped: int) -> None:
        """Keep kernel ORLR's dictionary elements ``rows`` (and their rows of the weights)."""
        self.kernel_dictionary_ = np.asarray(self.kernel_dictionary_)[rows]
        self.row_scale_ = np.asarray(self.row_scale_)[rows]
        self.coef_ = np.asarray(self.coef_)[rows]
        if hasattr(self, "coef_draws_"):
            self.coef_draws_ = self.coef_draws_[:, rows]
        self.n_pruned_rows_ = n_dropped + int(getattr(self, "n_pruned_rows_", 0))
