"""The ORed-logistic regression (ORLR) estimator: instance annotation from bag label sets.

``ORLR`` holds the model (its prior, novel class and leak, class count,
label-set limit and feature map) and takes the inference method's settings as
one object (``inference.methods``: ``EM``, ``MAP``, ``Laplace``, ``NUTS``, ``SVI``),
whose ``fit`` runs on the packed bags, as NumPyro keeps a kernel apart from its
driver. ``ORLRCV`` chooses the prior's scale (and a kernel's width) by bag-level
cross-validation, as scikit-learn's ``LogisticRegressionCV`` does.

Predictions come from the shared ``BagClassifier`` interface, refined here to
average over the posterior draws when the fit has them (a point estimate is one draw).
"""

from __future__ import annotations

import warnings
from collections.abc import Iterable, Iterator, Sequence
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
import pandas as pd
from scipy.special import softmax
from sklearn.base import TransformerMixin
from sklearn.utils.validation import check_is_fitted

from ..data.collinearity import CollinearityWarning, describe_dependencies, linear_dependencies
from ..data.container import MIMLData
from ..dp.packing import Layout, PackedBags, canonical_size, dp_work
from ..dp.ragged import bag_log_likelihood, draw_posteriors_on_host, instance_posteriors, pack_canonical
from ..dp.validation import DEFAULT_MAX_LABELS, check_features, check_known_labels
from ..evaluation.metrics import CREDIBLE_MASS, check_credible_mass, equal_tailed_interval
from ..features import RBFDictionary, fit_bags, make_feature_map, median_gamma, split_kernel
from ..features.maps import kernel_step, to_feature_units
from ..inference import methods
from ..inference.methods import EM, MAP, NUTS, SVI, Inference, Laplace
from ..inference.point.em_driver import relative_change
from ..model.numpyro_model import ModelData, make_model_data
from ..model.priors import WEIGHT_PRIORS, row_log_prior_at_zero
from ..seeding import seed_of
from . import (  # its grids read at fit time, so one assignment changes both estimators'
    model_selection,
    persistence,
)
from .annotation import Strategy, check_query, entropy, query_table, with_known_labels
from .base import BagClassifier, Bags
from .feature_notes import constant_features, heavy_tail_note, heavy_tailed_features
from .inputs import fit_inputs, fit_label_sets, infer_n_classes, split_by_bag
from .kernel_features import KernelFeatures
from .model_selection import select_by_bag_cv
from .relaxed import (
    NOVEL_CLASS_NAME,
    RelaxedDraws,
    check_leak,
    relaxed_draw_log_likelihoods,
    relaxed_draw_posteriors,
)

if TYPE_CHECKING:  # diagnostics imports ArviZ: loaded only when a fit or a report needs it
    from ..inference.checks.diagnostics import Diagnostics, PointDiagnostics
    from ..inference.posterior.arviz_compat import Posterior

EVIDENCE = "evidence"
"""``prior_scale=EVIDENCE``: the scale that maximises the Laplace approximation of the marginal
likelihood (MacKay's evidence; ``inference.posterior.evidence``), chosen before the fit."""
INCLUSION_EFFECT = 0.5
"""A row is *included* (in a draw, or a point fit) when moving its feature by one training sd
moves the logits by at least this much: ``||W[j]|| * sd_j >= 0.5`` (half a nat, odds x 1.65)."""


class ORLR(KernelFeatures, BagClassifier):
    """The ORed-logistic instance annotator, fitted from bag label sets.

    Each instance ``x`` (d,) of a bag has a hidden class
    ``y ~ Categorical(softmax(x @ W + beta))``; a bag's label set is the union
    of its instances' classes. The likelihood of a label set, and each
    instance's posterior given it, are exact (the subset DP, ``dp``).

    Args:
        inference: how to fit: ``"map"`` (L-BFGS, the default) or ``"em"`` (the
            published generalised EM), point estimates of one objective, the log
            posterior, both run to its first-order condition; ``"laplace"``,
            ``"nuts"`` or ``"svi"``, the full posterior (``posterior_``), and
            predictions averaged over its draws. A name takes the method's default
            settings; pass ``MAP(...)``, ``EM(...)``, ``Laplace(...)``, ``NUTS(...)`` or
            ``SVI(...)`` (``orlr_ppl.MAP`` etc.) to change them.
        prior: the prior of each row of ``W`` (one feature's weights):
            ``"normal"`` (an l2 penalty); ``"l21"`` (a group Laplace, an l2,1
            penalty whose point estimates zero whole rows: feature selection,
            or a kernel model's dictionary pruning; ``row_inclusion``); or
            ``"group_horseshoe"`` (NUTS/SVI only: it has no mode).
        prior_scale: the prior's scale: the Normal's sd (l2 strength
            ``1 / (2 prior_scale**2)``), the group Laplace's (l2,1 strength
            ``1 / prior_scale``), or the horseshoe's slab; None: flat, plain
            maximum likelihood; ``"evidence"``: chosen by type-II maximum
            likelihood on the Laplace approximation of the marginal likelihood
            (MacKay's evidence, ``inference.posterior.evidence``; Normal prior), for any
            ``inference``, with ``evidence_path_`` the scales tried. ``ORLRCV``
            chooses it by cross-validation instead.
        intercept_scale: sd of the Normal prior on the intercepts; None: flat.
        fit_intercept: learn per-class intercepts ``beta``.
        features: the instance feature map, fitted on the training instances
            and applied before every prediction (``orlr_ppl.features``):
            ``"standard"`` centres and scales each feature, so that one prior
            scale means the same for every feature; ``"quantile-normal"``
            first maps each through its training quantiles to a Normal, for
            spiked or heavy-tailed features; ``"rbf"`` is kernel ORLR, each
            instance replaced by its RBF similarities to a dictionary of
            training instances (``coef_`` then has a row per element); None
            leaves the features raw; or any scikit-learn transformer, e.g.
            ``make_pipeline(StandardScaler(), RBFDictionary(gamma=0.5,
            n_components=500))`` or one ending in ``Nystroem``.
        n_classes: the number of classes; default: the largest label + 1.
        max_labels: the largest label set accepted (the DP holds ``2**K`` states per bag).
        novel_class: add a novel (background) class, index C, the last column
            of ``coef_`` and ``predict_proba``: any bag may hold instances of it
            without naming it (Pham et al., ICML 2015); bags with no label
            become possible.
        leak: each label of a bag may be switched on by a leak with probability
            eps instead of an instance (a noisy OR), so bags with fewer
            instances than labels become possible. None: no leak; a float: that
            eps; ``"learn"``: fitted (``leak_``; a Beta(1, 10) prior under NUTS/SVI).
        prune: the fraction of training bags to leave out, those with the most
            DP work ``n_b * |Y_b| * 2**|Y_b|`` first (the paper's pruning,
            6.6.2), for data where a few bags cost more than all the others;
            ``pruned_bags_`` lists them.
        max_predict_draws: posterior draws (evenly thinned) that predictions average over.
        random_state: the seed of NUTS, SVI, stochastic EM, a kernel's dictionary draw and
            ``query(strategy="random")``; None is seed 0, so a fit repeats exactly (``seeding``).

    Labels. ``label_sets`` are one list per bag of class indices or of class
    names (then ``class_names_`` holds the sorted names, and predictions are
    indices into it), or a (B, C) 0/1 label matrix.

    Fitted attributes: ``coef_`` (R, K) and ``intercept_`` (K,), the point
    estimate or the posterior means (R: features, or dictionary elements; K:
    classes, plus the novel one); ``n_classes_``, ``n_features_in_``,
    ``prior_scale_``, ``pruned_bags_``; the feature map's ``feature_mean_``,
    ``feature_scale_`` (d,) and ``feature_quantiles_`` (Q, d). The weights act
    on the mapped features (``coef_in_feature_units`` rewrites linear ones for
    raw features). EM/MAP: ``log_posterior_``, ``n_iter_``, ``converged_``,
    ``optimality_`` (the largest component of the log posterior's gradient at the
    estimate), for EM ``history_``. Laplace/NUTS/SVI: ``posterior_``
    (``xarray.DataTree``; 0.2x ``InferenceData``), ``coef_draws_`` (S, R, K),
    ``intercept_draws_`` (S, K); for Laplace also its MAP's ``log_posterior_``,
    ``n_iter_``, ``converged_``, ``optimality_`` and ``log_evidence_``; for SVI
    ``losses_``. From a ``MIMLData``: ``class_names_``, ``feature_names_``.

    Convergence. ``fit`` issues one ``orlr_ppl.diagnostics.ConvergenceWarning``
    when a check fails (NUTS: R-hat, bulk/tail ESS, divergences, tree depth,
    E-BFMI, PSIS-LOO k-hat; Laplace and SVI: the k-hat of their draws against the
    posterior, and PSIS-LOO's; EM/MAP: the gradient above ``tol``);
    ``diagnostics()`` returns the whole report.
    """

    _layout: Layout | None = None
    """The packing layout the last ``fit`` was given (its ``layout``), which predictions pack into too."""

    def __init__(
        self,
        inference: str | Inference = "map",
        prior: str = "normal",
        prior_scale: float | None = 1.0,
        intercept_scale: float | None = 10.0,
        fit_intercept: bool = True,
        features: str | TransformerMixin | None = "standard",
        n_classes: int | None = None,
        max_labels: int = DEFAULT_MAX_LABELS,
        novel_class: bool = False,
        leak: float | str | None = None,
        prune: float = 0.0,
        max_predict_draws: int = 200,
        random_state: int | None = None,
        **removed: Any,
    ) -> None:
        persistence.check_renamed(removed, type(self).__name__)
        self.inference = inference
        self.prior = prior
        self.prior_scale = prior_scale
        self.intercept_scale = intercept_scale
        self.fit_intercept = fit_intercept
        self.features = features
        self.n_classes = n_classes
        self.max_labels = max_labels
        self.novel_class = novel_class
        self.leak = leak
        self.prune = prune
        self.max_predict_draws = max_predict_draws
        self.random_state = random_state

    # -- fitting -----------------------------------------------------------------

    def fit(
        self,
        bags: Bags,
        label_sets: Sequence[Iterable[Any]] | np.ndarray | None = None,
        instance_labels: Sequence[Iterable[int]] | None = None,
        layout: Layout | None = None,
    ) -> ORLR:
        """Fit from bags (list of (n_b, d) arrays) and their label sets, or from a ``MIMLData``.

        ``label_sets``: per bag, a list of class indices or of class names; or
        a (B, C) 0/1 label matrix. Bags the union model cannot explain (fewer
        instances than labels without a ``leak``, an empty label set without a
        ``novel_class``) raise one ValueError listing all of them.
        ``instance_labels``: per bag, (n_b,) known instance labels as class
        indices, -1 where unknown (a semi-supervised fit); a known label must
        lie in its bag's label set, or be the novel class C.
        ``layout``: a packing layout that several fits share, for
        cross-validation: ``evaluation.cross_validation.fold_layout`` of the
        training folds (``cross_validate`` passes it). Every fold then packs its
        bags into the same buckets, so a sampler compiles its program once
        rather than once a fold; results are those of a fit without it.
        """
        check_leak(self.leak)
        method = self._method()
        self._check_model_params(method)
        self._diagnostics = None
        feats, label_sets, n_classes = self._label_set_training_data(bags, label_sets)  # standardised
        if instance_labels is not None and self.prune > 0:
            raise ValueError("prune leaves bags out: give instance_labels with prune=0")
        feats, label_sets, self.pruned_bags_ = pruned(feats, label_sets, self.prune)
        posterior = method.posterior
        sampled = method.sampler
        if posterior and self._kernel_spec() is None:
            self._check_linear_features(feats, n_classes + bool(self.novel_class))
        feats = self._fit_rows(feats, label_sets, n_classes)  # kernel features; CV's choices
        # Canonical shapes let fits of one shape family share compiled programs: EM, MAP and
        # Laplace are mostly compiling; NUTS and SVI evaluate the gradient thousands of times, and
        # padding cost them 11-46 % more DP cells, so they pack tight unless a cross-validation asks.
        self._layout = layout
        canonical = not sampled or layout is not None
        feats, padded = self._pad_rows(feats, canonical and not posterior)
        # The optimisers run in float64: float32's round-off in the log posterior stops their
        # line searches short of an optimum (the guide's "Optima that are optima").
        dtype = np.float32 if sampled else np.float64
        pack = partial(self._model_data, feats, label_sets, n_classes, instance_labels, layout)
        data = pack(canonical, dtype)
        self.canonical_shapes_ = canonical
        if self._by_evidence():
            # In float64 and on canonical shapes, as a MAP or Laplace fit packs them: the search
            # follows the same MAPs whichever inference comes after it (the optima it meets, where
            # there are several, depend on the bags' order of summation, to round-off).
            self._choose_by_evidence(data if not sampled else pack(True, np.float64))
        with jax.enable_x64(not sampled):
            if posterior:
                ids = getattr(bags, "bag_ids", None)  # a MIMLData's: the diagnostics name bags by them
                dropped = set(self.pruned_bags_)
                kept = None if ids is None else [b for i, b in enumerate(ids) if i not in dropped]
                self._fit_posterior(data, method, kept)
            else:
                self._fit_point(data, method)
                self._unpad_rows(padded)
        self.n_classes_ = n_classes
        self._drop_zero_rows()
        # The warnings are issued here, with stacklevel 2, so that they point at the caller of fit.
        if hasattr(self, "posterior_"):
            self._diagnostics = self._posterior_diagnostics(warn=True)
        elif not self.converged_ and not self._method().stochastic:
            from ..inference.checks.diagnostics import ConvergenceWarning

            warnings.warn(self.diagnostics().problems[0], ConvergenceWarning, stacklevel=2)
        return self

    def _method(self) -> Inference:
        """The inference settings: ``inference`` itself, or the named method's defaults."""
        return methods.resolve(self.inference)

    def _check_model_params(self, method: Inference) -> None:
        if self.prior not in WEIGHT_PRIORS:
            raise ValueError(f"prior={self.prior!r}: choose one of {WEIGHT_PRIORS}")
        scales = self._prior_scales()
        for scale in scales:
            if isinstance(scale, str):
                raise ValueError(
                    f"prior_scale={scale!r}: give a number, None (flat), or {EVIDENCE!r} (chosen by the "
                    "Laplace evidence); to choose it by bag-level cross-validation use ORLRCV "
                    "(from orlr_ppl import ORLRCV)"
                )
            if scale is not None and not float(scale) > 0:
                raise ValueError(f"prior_scale={scale!r}: give a positive scale, or None (a flat prior)")
        if self._by_evidence() and (self.prior != "normal" or self.leak == "learn"):
            raise ValueError(
                f"prior_scale={self.prior_scale!r} with prior={self.prior!r}, leak={self.leak!r}: the "
                "evidence is the Laplace approximation's, which needs the Normal prior and no learnt leak "
                "(a fixed leak, leak=0.05, works); give a prior_scale, or use ORLRCV"
            )
        scale = scales[0] if scales else 1.0
        if self.prior == "group_horseshoe" and (not method.sampler or scale is None):
            raise ValueError(
                f"prior='group_horseshoe' with inference={method.name!r}, prior_scale={scale!r}: its "
                "density is unbounded at zero, so it has no MAP; sample it with inference='nuts' or 'svi' "
                "and a prior_scale (the slab), or use prior='l21' for a point estimate"
            )
        make_feature_map(self.features)  # a ValueError naming a bad map

    def _prior_scales(self) -> list[float | None]:
        """The prior scales to fit with: ``prior_scale`` here, ``ORLRCV``'s candidates there."""
        return [] if self._by_evidence() else [self.prior_scale]

    def _by_evidence(self) -> bool:
        """``prior_scale="evidence"`` (``ORLRCV`` has candidates instead)."""
        return getattr(self, "prior_scale", None) == EVIDENCE

    def _model_data(
        self,
        feats: list[np.ndarray],
        label_sets: list[Any],
        n_classes: int,
        instance_labels: Sequence[Iterable[int]] | None,
        layout: Layout | None,
        canonical: bool,
        dtype: type,
    ) -> ModelData:
        """The bags packed for the model (``make_model_data``) with this estimator's model settings."""
        return make_model_data(
            feats,
            label_sets,
            n_classes,
            self.max_labels,
            canonical_shapes=canonical,
            layout=layout,
            instance_labels=instance_labels,
            novel_class=bool(self.novel_class),
            leak=self.leak,
            weight_prior=self.prior,
            dtype=dtype,
        )

    def _choose_by_evidence(self, data: ModelData) -> None:
        """``prior_scale="evidence"``: ``prior_scale_`` by type-II maximum likelihood on the Laplace
        evidence (``inference.posterior.evidence``) of ``data`` (float64), before the fit proper;
        ``evidence_path_`` holds every (scale, log evidence) tried."""
        from ..inference.posterior.evidence import fit_evidence

        with jax.enable_x64(True):
            chosen = fit_evidence(data, self.intercept_scale, self.fit_intercept)
        self.prior_scale_ = chosen.prior_scale
        self.evidence_path_ = np.asarray(chosen.path, np.float64)
        self.log_evidence_ = chosen.log_evidence

    def _fit_point(self, data: ModelData, method: EM | MAP) -> None:
        """EM or MAP: ``coef_``, ``intercept_``, the optimiser's report, and EM's ``history_``."""
        res = method.fit(data, self.prior_scale_, self.intercept_scale, self.fit_intercept, self._seed())
        self.coef_, self.intercept_ = res.coef, res.intercept
        self.leak_ = res.leak if self.leak == "learn" else self.leak
        self.log_posterior_, self.n_iter_, self.converged_ = res.log_posterior, res.n_iter, res.converged
        self.optimality_ = res.optimality
        if res.history is not None:
            self.history_ = res.history

    def _fit_posterior(
        self, data: ModelData, method: Laplace | NUTS | SVI, bag_ids: Sequence[Any] | None = None
    ) -> None:
        """Laplace, NUTS or SVI: ``posterior_`` (named by the data's classes, features and bag ids)
        and its draws; Laplace's mode and evidence too."""
        from ..inference.posterior.inference_data import with_names

        res = method.fit(data, self.prior_scale_, self.intercept_scale, self.fit_intercept, self._seed())
        if res.losses is not None:
            self.losses_ = res.losses
        if res.gaussian is not None:
            mode = res.gaussian.map
            self.log_evidence_ = res.gaussian.log_evidence
            self.log_posterior_, self.n_iter_, self.converged_ = (
                mode.log_posterior,
                mode.n_iter,
                mode.converged,
            )
            self.optimality_ = mode.optimality
        classes = getattr(self, "class_names_", None)
        if classes is not None and self.novel_class:  # W, beta have one more column than the data
            classes = [*classes, NOVEL_CLASS_NAME]
        rows = getattr(self, "feature_names_", None)  # a kernel's rows are elements or directions
        if self._kernel() is not None or (rows is not None and len(rows) != len(self.row_scale_)):
            rows = None
        bags = None if bag_ids is None else [str(b) for b in bag_ids]
        self._set_posterior(with_names(res.posterior, classes, rows, bags))

    def _set_posterior(self, idata: Posterior) -> None:
        self.posterior_ = idata
        draws = thin_draws(idata, self.max_predict_draws)
        self.coef_, self.intercept_ = draws.coef, draws.intercept
        self.coef_draws_, self.intercept_draws_ = draws.coef_draws, draws.intercept_draws
        self.leak_ = draws.leak if draws.leak is not None else self.leak
        self.leak_draws_ = draws.leak_draws

    def diagnostics(self) -> Diagnostics | PointDiagnostics:
        """Convergence report of the fit; ``print`` it for a readable summary.

        Laplace/NUTS/SVI: ``orlr_ppl.diagnostics.Diagnostics`` (``table``: mean, sd,
        R-hat, bulk/tail ESS per scalar of ``W`` and ``beta``; ``sampler``:
        divergences, tree depth, step size, E-BFMI, PSIS-LOO k-hat share;
        ``problems``; ``converged``). EM/MAP: ``orlr_ppl.diagnostics.PointDiagnostics``
        (``converged``, ``n_iter``, ``max_iter``, ``tol``, the final relative
        change of the log posterior (EM), ``problems``).
        """
        from ..inference.checks.diagnostics import optimizer_diagnostics

        check_is_fitted(self, "n_classes_")
        if hasattr(self, "posterior_"):
            if getattr(self, "_diagnostics", None) is None:  # a loaded model: its report is built once
                self._diagnostics = self._posterior_diagnostics(warn=False)
            return self._diagnostics
        method = self._method()
        history, change = getattr(self, "history_", None), None
        if history is not None and len(history) > 1:
            change = float(relative_change(history[-2], history[-1]))
        return optimizer_diagnostics(
            method.name,
            self.converged_,
            self.n_iter_,
            method.max_iter,
            method.tol,
            relative_change=change,
            bag_fraction=float(method.bag_fraction) if method.stochastic else None,  # type: ignore[union-attr]
            optimality=getattr(self, "optimality_", None),
        )

    def coef_in_feature_units(self) -> tuple[np.ndarray, np.ndarray]:
        """``(coef, intercept)``, (d, C) and (C,), for raw features: ``x @ coef + intercept`` are the logits.

        ``coef_`` acts on standardised features; this rewrites it (and the
        intercepts) for the features as given to ``fit``. For a posterior, of the
        posterior means ``coef_``/``intercept_``.
        """
        check_is_fitted(self, "n_classes_")
        if self._kernel() is not None:
            raise ValueError("kernel ORLR's weights act on kernel features: they have no feature units")
        return to_feature_units(self.coef_, self.intercept_, *self._linear_scaling())

    # -- feature rows: the kernel map, hyperparameters, row inclusion --------------

    def _hyperparameters(
        self, feats: list[np.ndarray], label_sets: list[Any], n_classes: int
    ) -> tuple[float | None, float | None]:
        """``(kernel width, prior scale)`` to fit with: the parameters' (a kernel's width None: the
        median heuristic); ``ORLRCV`` chooses them by cross-validation."""
        if self._kernel_spec() is None:
            return None, self.prior_scale
        return self._default_gamma(feats), self.prior_scale

    def _fit_rows(self, feats: list[np.ndarray], label_sets: list[Any], n_classes: int) -> list[np.ndarray]:
        """The features the linear model sees (a kernel's, or the standardised ones).

        Sets ``prior_scale_``, for a kernel ``kernel_gamma_`` and the map, and
        ``row_scale_`` (the fitted features' training sd).
        """
        gamma, self.prior_scale_ = self._hyperparameters(feats, label_sets, n_classes)
        if gamma is not None:
            feats = self._build_kernel_map(feats, gamma)
        self.row_scale_ = np.concatenate(feats).std(axis=0).astype(np.float64)
        return feats

    # -- rows: inclusion, pruning, padding -------------------------------------------

    def _check_linear_features(self, feats: list[np.ndarray], n_outputs: int) -> None:
        """Before a posterior fit on linear features: warn, naming them, when some features are
        combinations of the others (``collinearity``), and keep the heavy-tailed ones in
        ``heavy_tailed_features_`` and the constant ones in ``constant_features_`` for the
        convergence report (``_posterior_diagnostics``).

        A MAP is unique along dependent directions, but a posterior holds the prior's whole width there.
        A constant feature's weights are the prior's alone, so the report does not judge their mixing.
        """
        x, names = np.concatenate(feats), getattr(self, "feature_names_", None)
        dep = linear_dependencies(x, names)
        if dep.redundant:
            warnings.warn(describe_dependencies(dep, n_outputs), CollinearityWarning, stacklevel=3)
        self.heavy_tailed_features_ = heavy_tailed_features(x, self.feature_map_, names)
        self.constant_features_ = constant_features(x, names)

    def _posterior_diagnostics(self, warn: bool) -> Diagnostics:
        """``posterior_``'s diagnostics, whose problems end with the heavy-tailed features carrying
        failing weights; with ``warn``, one ``ConvergenceWarning`` (pointing at the caller of ``fit``)
        when a check fails. A loaded model reads those features from its ``metadata.json``."""
        from ..inference.checks.diagnostics import diagnose, optimizer_diagnostics, warn_if_unconverged

        # Absent: kernel features, or a model saved before the record was kept.
        heavy = getattr(self, "heavy_tailed_features_", None) or {}
        note = partial(heavy_tail_note, heavy)
        mode = ""
        if getattr(self, "converged_", True) is False:  # a Laplace posterior's MAP
            method = self._method()
            mode = optimizer_diagnostics(
                "map", False, self.n_iter_, method.max_iter, method.tol, optimality=self.optimality_
            ).problems[0]
        constant = getattr(self, "constant_features_", None) or []
        if warn:
            return warn_if_unconverged(
                self.posterior_, stacklevel=3, note=note, mode_problem=mode, constant_features=constant
            )
        return diagnose(self.posterior_, note=note, mode_problem=mode, constant_features=constant)

    def _pad_rows(self, feats: list[np.ndarray], canonical: bool) -> tuple[list[np.ndarray], int]:
        """Kernel point fits on canonical shapes: zero feature columns up to ``canonical_size(R)``.

        Dictionaries of different sizes (the folds of ``"auto"``'s selection, of a
        cross-validation) then share one compiled program. A zero column's
        weights stay exactly zero in EM, L-BFGS and FISTA alike (their gradient
        is the prior's, zero at zero), so ``_unpad_rows`` only cuts them off.
        """
        if self._kernel() is None or not canonical:
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
        per_row = row_log_prior_at_zero(self.prior, k, self.prior_scale_)
        self.log_posterior_ = float(self.log_posterior_) - pad * per_row
        if hasattr(self, "history_"):
            self.history_ = np.asarray(self.history_) - pad * per_row

    def _drop_zero_rows(self) -> None:
        """After an l2,1 point fit of kernel ORLR: dictionary elements whose rows are exactly zero go."""
        point = not hasattr(self, "coef_draws_")
        if isinstance(self._kernel(), RBFDictionary) and self.prior == "l21" and point:
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
        classes). Laplace/NUTS/SVI: the share over the posterior draws kept for
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
        kernel = self._kernel()
        if kernel is not None and not isinstance(kernel, RBFDictionary):
            raise ValueError(
                f"{type(kernel).__name__} features mix dictionary elements: prune_rows needs RBFDictionary"
            )
        if kernel is None:
            self.coef_ = np.where(keep[:, None], self.coef_, 0.0)
            if hasattr(self, "coef_draws_"):
                self.coef_draws_ = np.where(keep[None, :, None], self.coef_draws_, 0.0)
            return self
        self._keep_rows(np.flatnonzero(keep), int(np.size(keep) - keep.sum()))
        return self

    def _keep_rows(self, rows: np.ndarray, n_dropped: int) -> None:
        """Keep kernel ORLR's dictionary elements ``rows`` (and their rows of the weights)."""
        self._kernel().keep(rows)
        self.row_scale_ = np.asarray(self.row_scale_)[rows]
        self.coef_ = np.asarray(self.coef_)[rows]
        if hasattr(self, "coef_draws_"):
            self.coef_draws_ = self.coef_draws_[:, rows]
        self.n_pruned_rows_ = n_dropped + int(getattr(self, "n_pruned_rows_", 0))

    # -- predictions: per posterior draw, or the point estimate as one ------------

    def _draws(self) -> tuple[np.ndarray, np.ndarray]:
        """(S, d, C), (S, C): posterior draws, or the point estimate as S = 1."""
        if hasattr(self, "coef_draws_"):
            return self.coef_draws_, self.intercept_draws_
        return self.coef_[None], self.intercept_[None]

    def _leak_draws(self, n_draws: int) -> np.ndarray | None:
        """(S,) the leak at each draw: the posterior's draws, or the fitted or fixed value; None without."""
        if getattr(self, "leak_draws_", None) is not None:
            return np.asarray(self.leak_draws_)
        leak = getattr(self, "leak_", self.leak)
        return None if leak is None else np.full(n_draws, float(leak))

    def _logits(self, feats: list[np.ndarray]) -> list[np.ndarray]:
        return [x @ self.coef_ + self.intercept_ for x in feats]

    def _draw_proba(self, feats: list[np.ndarray]) -> list[np.ndarray]:
        """B arrays (S, n_b, C) of ``p(y | x, theta_s)`` per posterior draw."""
        w, b = self._draws()
        return [softmax(np.einsum("nd,sdc->snc", x, w) + b[:, None, :], axis=-1) for x in feats]

    def _inductive_proba(self, feats: list[np.ndarray]) -> list[np.ndarray]:
        """``E_theta p(y = c | x, theta)``: the mean over the draws (the point estimate for EM/MAP)."""
        return [p.mean(axis=0) for p in self._draw_proba(feats)]

    def _transductive_proba(self, feats: list[np.ndarray], sets: list[np.ndarray]) -> list[np.ndarray]:
        """``E_theta p(y = c | Y_b, X_b, theta)``: the DP posterior averaged over the draws (the point
        estimate's for EM/MAP)."""
        total = np.asarray(sum(self._draw_posteriors(feats, sets)))
        return split_by_bag(total / len(self._draws()[0]), feats)

    def _draw_log_likelihoods(self, feats: list[np.ndarray], sets: list[np.ndarray]) -> Iterator[np.ndarray]:
        """Per draw (or the point estimate), (B,) ``log p(Y_b | X_b, theta_s)``, from the logits (the
        relaxed union's E-step with a novel class or a leak)."""
        if self._relaxed():
            yield from relaxed_draw_log_likelihoods(feats, sets, self._relaxed_draws())
            return
        for ws, bs in zip(*self._draws()):
            yield bag_log_likelihood([x @ ws + bs for x in feats], sets, self.max_labels)

    def _relaxed_draws(self) -> RelaxedDraws:
        """The fitted model as the relaxed union's E-step takes it."""
        w, b = self._draws()
        return RelaxedDraws(
            w, b, self._leak_draws(len(w)), self.n_classes_, self.novel_class, self.max_labels
        )

    def _relaxed(self) -> bool:
        """A novel class or a leak: transductive posteriors need the model's E-step (``relaxed``)."""
        return bool(self.novel_class) or self.leak is not None

    def _draw_posteriors(
        self, feats: list[np.ndarray], sets: list[np.ndarray], known: list[np.ndarray] | None = None
    ) -> Iterator[np.ndarray]:
        """Per draw (or the point estimate), the (n, C) DP posteriors ``p(y | Y_b, X_b, theta_s)``.

        The one home of ORLR's instance posteriors. All bags' instances concatenated in order;
        zero outside each bag's set. ``known``: B arrays (n_b,) of known instance labels (-1
        unknown), which condition their bag-mates: ``p(y | Y_b, y_known, X_b, theta_s)``, a
        known label being a point mass in its instance's logits (``annotation.with_known_labels``),
        every draw of every bag in one DP call. With a novel class or a leak, the model's E-step
        (``relaxed_draw_posteriors``), which conditions on known labels as a fit with them does.
        """
        if self._relaxed():
            yield from relaxed_draw_posteriors(feats, sets, self._relaxed_draws(), instance_labels=known)
            return
        w, b = self._draws()
        if known is not None:
            logits = [
                with_known_labels(np.einsum("nd,sdc->snc", x, w) + b[:, None, :], k)
                for x, k in zip(feats, known)
            ]
            flat = [
                bag[s] for s in range(len(w)) for bag in logits
            ]  # draw-major: every bag of a draw in turn
            posteriors = instance_posteriors(flat, list(sets) * len(w), self.max_labels)
            for s in range(len(w)):
                yield np.concatenate(posteriors[s * len(feats) : (s + 1) * len(feats)])
            return
        flat, packed = pack_draw_inputs(feats, sets, self._layout)
        rows = sum(len(x) for x in feats)
        weights = [jnp.asarray(x, flat.dtype) for x in w]
        intercepts = [jnp.asarray(x, flat.dtype) for x in b]
        for post in draw_posteriors_on_host(flat, weights, intercepts, packed):
            yield np.asarray(post[:rows])

    def predict_interval(
        self,
        bags: Bags,
        prob: float = CREDIBLE_MASS,
        label_sets: Sequence[Iterable[Any]] | np.ndarray | None = None,
    ) -> list[np.ndarray]:
        """B arrays (n_b, C, 2): equal-tailed credible intervals ``[lower, upper]`` of class probabilities.

        Inductive: of ``p(y = c | x, theta)``; given label sets, of the DP
        posterior ``p(y = c | Y_b, X_b, theta)``. The bounds are the
        ``(1 - prob) / 2`` and ``(1 + prob) / 2`` quantiles over the posterior
        draws kept in ``coef_draws_`` (``max_predict_draws`` of them), so they
        show how far the weights' uncertainty moves each probability;
        ``predict_proba`` is the mean over the same draws. EM and MAP have one
        point estimate: the interval collapses to it (lower == upper ==
        ``predict_proba``), and a warning says so.
        """
        check_credible_mass(prob)
        self._warn_if_point("predict_interval", "every interval has zero width")
        return [equal_tailed_interval(p, prob) for p in self._per_draw(bags, label_sets)]

    def predict_uncertainty(
        self, bags: Bags, label_sets: Sequence[Iterable[Any]] | np.ndarray | None = None
    ) -> list[np.ndarray]:
        """B arrays (n_b, 2): predictive entropy and mutual information (nats).

        Entropy ``H[E_theta p(y | x, theta)]`` is the total uncertainty; the
        mutual information ``H[E p] - E H[p]`` between the label and the
        weights is its epistemic part (zero for EM/MAP point estimates, with a warning).
        Given label sets, of the DP posterior ``p(y | Y_b, X_b, theta)``: what is
        left uncertain about an instance once its bag's labels are known.
        """
        self._warn_if_point("predict_uncertainty", "the mutual information is zero")
        out = []
        for p in self._per_draw(bags, label_sets):
            p = np.asarray(p, np.float64)  # a float32 zero (a class outside the bag's set) is 0 log 0 = 0
            total = entropy(p.mean(axis=0))
            aleatoric = entropy(p).mean(axis=0)
            out.append(np.stack([total, np.maximum(total - aleatoric, 0.0)], axis=1))
        return out

    def query(
        self,
        bags: Bags,
        n: int = 10,
        strategy: Strategy = "entropy",
        label_sets: Sequence[Iterable[Any]] | np.ndarray | None = None,
        instance_labels: Sequence[Iterable[int]] | None = None,
    ) -> pd.DataFrame:
        """The ``n`` unlabelled instances a person should label next, best first.

        Each instance is scored from its DP posterior given its bag's label set and the
        labels given so far (``annotation``'s module docstring has the formulas):
        ``"entropy"`` (the default: the strategy that measured best on HJA birdsong and
        Letter Frost, with any fit; the guide's "Which strategy"); ``"bald"``, the mutual
        information between its label and the weights (needs a posterior:
        ``inference="laplace"``, ``"nuts"`` or ``"svi"``); ``"margin"``; or ``"random"``
        (seeded by ``random_state``). The batch takes one instance per bag before any bag
        gives a second, since labelling one instance moves its bag-mates' posteriors.

        Args:
            bags: the bags, or a ``MIMLData`` (which brings its label sets).
            n: instances to return (fewer if fewer are unlabelled).
            strategy: "entropy", "bald", "margin" or "random".
            label_sets: per bag, its labels (as ``fit`` takes them); None with a
                ``MIMLData`` uses its own; without any, the scores are inductive.
            instance_labels: per bag, (n_b,) labels given so far as class indices, -1
                where unknown (as ``fit`` takes them): those instances are not queried,
                and their bag-mates' posteriors are conditioned on them.
        Returns:
            A DataFrame, one row per instance in query order: ``bag_id`` (the
            ``MIMLData``'s bag ids, else bag positions), ``instance`` (index in the bag),
            ``score``, and ``class_1``, ``p_1``, ... the likeliest classes now, with their
            probabilities.
        """
        check_query(n, strategy)
        if strategy == "bald" and not hasattr(self, "coef_draws_"):
            raise ValueError(
                f"strategy='bald' needs a posterior, and this is an inference={self._method().name!r} "
                "fit (one point estimate: its mutual information is zero): refit with inference='laplace', "
                "'nuts' or 'svi', or query with strategy='entropy'"
            )
        if label_sets is None and isinstance(bags, MIMLData):
            label_sets = bags.label_sets
        feats = self._check_bags(bags)
        sets = None if label_sets is None else self._check_sets(feats, label_sets)
        known = None
        if instance_labels is not None:
            allowed = sets if sets is not None else [np.arange(self.n_classes_)] * len(feats)
            novel = self.n_classes_ if self.novel_class else None
            known = check_known_labels(instance_labels, [len(x) for x in feats], allowed, novel)
        per_draw = self._draw_proba(feats) if sets is None else self._posteriors_per_draw(feats, sets)
        if sets is not None and known is not None and any((k >= 0).any() for k in known):
            per_draw = self._conditioned_on_known(feats, sets, known, per_draw)
        names = list(getattr(self, "class_names_", None) or [str(c) for c in range(self.n_classes_)])
        if self.novel_class:
            names.append(NOVEL_CLASS_NAME)
        bag_ids = list(bags.bag_ids) if isinstance(bags, MIMLData) else list(range(len(feats)))
        rng = np.random.default_rng(seed_of(self.random_state))
        return query_table(per_draw, known, n, strategy, rng, bag_ids, names)

    def _posteriors_per_draw(self, feats: list[np.ndarray], sets: list[np.ndarray]) -> list[np.ndarray]:
        """B arrays (S, n_b, C) of ``p(y | Y_b, X_b, theta_s)`` per kept draw (S = 1 for a point fit)."""
        return split_by_bag(np.stack(list(self._draw_posteriors(feats, sets))), feats, axis=1)

    def _conditioned_on_known(
        self,
        feats: list[np.ndarray],
        sets: list[np.ndarray],
        known: list[np.ndarray],
        per_draw: list[np.ndarray],
    ) -> list[np.ndarray]:
        """``per_draw`` with each bag that has known labels redone, ``p(y | Y_b, y_known, X_b, theta_s)``."""
        redo = [k for k, labels in enumerate(known) if (labels >= 0).any()]
        some = [feats[k] for k in redo]
        draws = self._draw_posteriors(some, [sets[k] for k in redo], [known[k] for k in redo])
        out = list(per_draw)
        for k, post in zip(redo, split_by_bag(np.stack(list(draws)), some, axis=1)):
            out[k] = post
        return out

    def _per_draw(self, bags: Bags, label_sets: Any) -> list[np.ndarray]:
        """B arrays (S, n_b, C): each kept draw's class probabilities, given the label sets if any."""
        feats = self._check_bags(bags)
        if label_sets is None:
            return list(self._draw_proba(feats))
        return self._posteriors_per_draw(feats, self._check_sets(feats, label_sets))

    def _warn_if_point(self, name: str, consequence: str) -> None:
        """Say that a point fit's weights carry no uncertainty, rather than return it silently."""
        method = self._method().name
        if method in ("em", "map"):
            warnings.warn(
                f"{name} on an inference={method!r} fit: one point estimate of the weights, so "
                f"{consequence}; fit with inference='laplace', 'nuts' or 'svi' for the weights' uncertainty",
                UserWarning,
                stacklevel=3,
            )

    # -- persistence: the fit report in metadata.json, a posterior in posterior.nc --

    def _params_json(self) -> dict[str, Any]:
        params = super()._params_json()
        params["inference"] = methods.to_json(params["inference"])
        return params

    @classmethod
    def _params_from_json(cls, meta: dict[str, Any], meta_file: Path) -> dict[str, Any]:
        params = dict(meta["params"])
        if persistence.check_format(meta, meta_file) == 1:
            fitted = meta.get("fitted") or {}
            params = persistence.params_of_format_1(persistence.features_of_format_1(params, fitted), fitted)
        params["inference"] = methods.from_json(params.get("inference", "em"), str(meta_file))
        return persistence.saved_params({**meta, "params": params}, cls._get_param_names(), meta_file)

    def _fitted_metadata(self) -> dict[str, Any]:
        pruned = {"pruned_bags_": [int(b) for b in getattr(self, "pruned_bags_", [])]}
        if getattr(self, "leak_", None) is not None:
            pruned["leak_"] = float(self.leak_)
        for name in ("prior_scale_", "kernel_gamma_"):  # the values used, "auto" resolved
            if getattr(self, name, None) is not None:
                pruned[name] = float(getattr(self, name))
        if getattr(self, "n_pruned_rows_", 0):
            pruned["n_pruned_rows_"] = int(self.n_pruned_rows_)
        mode = {}  # a point fit's report, and the MAP a Laplace posterior sits at
        if hasattr(self, "log_posterior_"):
            mode = {
                "log_posterior_": float(self.log_posterior_),
                "n_iter_": int(self.n_iter_),
                "converged_": bool(self.converged_),
                "optimality_": float(self.optimality_),
            }
        if getattr(self, "log_evidence_", None) is not None:
            mode["log_evidence_"] = float(self.log_evidence_)
        if hasattr(self, "posterior_"):
            heavy = getattr(self, "heavy_tailed_features_", None)
            if heavy is not None:  # the convergence report of the loaded model names them too
                pruned["heavy_tailed_features_"] = {str(f): float(z) for f, z in heavy.items()}
            constant = getattr(self, "constant_features_", None)
            if constant is not None:  # and leaves their weights out of its checks
                pruned["constant_features_"] = [str(f) for f in constant]
        return {**pruned, **mode}

    def _default_name(self) -> str:
        return f"orlr-{self._method().name}"

    def _save_extra(self, folder: Path) -> None:
        """Laplace/NUTS/SVI: write ``posterior.nc`` (netCDF); EM/MAP: remove one an earlier save left."""
        nc = folder / "posterior.nc"
        if not hasattr(self, "posterior_"):
            nc.unlink(missing_ok=True)
            return
        tmp = nc.with_name(".posterior.tmp.nc")
        try:
            from ..inference.posterior.arviz_compat import to_netcdf

            to_netcdf(self.posterior_, str(tmp))
            tmp.replace(nc)  # as persistence.write_atomically: an interrupted save leaves the old file whole
        finally:
            tmp.unlink(missing_ok=True)

    def _check_loaded(self, param_file: Path) -> None:
        """Laplace/NUTS/SVI: read ``posterior.nc`` beside ``params.npz``; then check the arrays' shapes."""
        method = self._method()
        if method.posterior:
            nc = param_file.parent / "posterior.nc"
            if not nc.is_file():
                raise ValueError(f"{nc} is missing: a {method.name} model keeps its posterior there")
            self._set_posterior(persistence.read_posterior(nc))
            self._diagnostics = None
        heavy = getattr(self, "heavy_tailed_features_", None)
        if heavy is not None and not (
            isinstance(heavy, dict)
            and all(isinstance(z, (int, float)) and not isinstance(z, bool) for z in heavy.values())
        ):
            raise ValueError(
                f"{param_file.parent / 'metadata.json'}: 'fitted' holds heavy_tailed_features_ {heavy!r}; "
                "expected an object of feature name -> largest |z| (numbers): re-save the model with save()"
            )
        constant = getattr(self, "constant_features_", None)
        if constant is not None and not (
            isinstance(constant, list) and all(isinstance(f, str) for f in constant)
        ):
            raise ValueError(
                f"{param_file.parent / 'metadata.json'}: 'fitted' holds constant_features_ {constant!r}; "
                "expected a list of feature names: re-save the model with save()"
            )
        super()._check_loaded(param_file)


class ORLRCV(ORLR):
    """``ORLR`` whose prior scale (and kernel width) is chosen by bag-level cross-validation.

    As scikit-learn's ``LogisticRegressionCV`` beside ``LogisticRegression``:
    every candidate is fitted on the training folds' bags and scored on the
    held-out bags' label sets, from bag labels only (no instance label is
    used, the situation of every user and the paper's protocol); folds split
    bags, never one bag's instances. The candidates are point fits (EM, or MAP
    for a posterior method); the winner is then fitted on all the bags with
    ``inference``.

    Args:
        prior_scales: the candidate prior scales, strongest prior first (ties go to the earlier).
        gammas: the candidate widths of the kernel step of ``features``
            (``"rbf"``, ``RBFDictionary`` or ``Nystroem``); None: the median
            heuristic times ``(0.25, 1, 4, 16)``, or the step's own ``gamma``
            when it has one. Ignored without a kernel step.
        cv: the number of bag-level folds.
        scoring: the held-out score that decides: ``"log_likelihood"`` (the
            model's own, the mean of ``log p(Y_b | X_b)``), ``"ranking_loss"``
            or ``"average_precision"`` (of the bag scores ``max_i p(y_bi = c)``).
            ``cv_results_`` holds all three for every candidate.
        progress_bar: a bar over the candidates' fits (a kernel grid takes minutes).

    The other arguments are ``ORLR``'s. Fitted attributes: ``ORLR``'s, with
    ``prior_scale_`` and ``kernel_gamma_`` the chosen values, and
    ``cv_results_``, one row per candidate (its values, the mean held-out
    scores, and ``sd``, the deciding score's sd over folds). A winner at the
    edge of a grid of more than two values warns: the best may lie beyond it.
    """

    def __init__(
        self,
        prior_scales: Sequence[float] = model_selection.PRIOR_SCALES,
        gammas: Sequence[float] | None = None,
        cv: int = 3,
        scoring: str = "log_likelihood",
        progress_bar: bool = True,
        inference: str | Inference = "map",
        prior: str = "normal",
        intercept_scale: float | None = 10.0,
        fit_intercept: bool = True,
        features: str | TransformerMixin | None = "standard",
        n_classes: int | None = None,
        max_labels: int = DEFAULT_MAX_LABELS,
        novel_class: bool = False,
        leak: float | str | None = None,
        prune: float = 0.0,
        max_predict_draws: int = 200,
        random_state: int | None = None,
        **removed: Any,
    ) -> None:
        persistence.check_renamed(removed, "ORLRCV")
        self.prior_scales = prior_scales
        self.gammas = gammas
        self.cv = cv
        self.scoring = scoring
        self.progress_bar = progress_bar
        self.inference = inference
        self.prior = prior
        self.intercept_scale = intercept_scale
        self.fit_intercept = fit_intercept
        self.features = features
        self.n_classes = n_classes
        self.max_labels = max_labels
        self.novel_class = novel_class
        self.leak = leak
        self.prune = prune
        self.max_predict_draws = max_predict_draws
        self.random_state = random_state

    def _prior_scales(self) -> list[float | None]:
        scales = list(self.prior_scales)
        if not scales:
            raise ValueError("prior_scales is empty: give at least one candidate scale")
        return scales

    def _check_model_params(self, method: Inference) -> None:
        super()._check_model_params(method)
        model_selection.check_cv_scoring(self.scoring)
        if self.novel_class or self.leak is not None:
            raise ValueError(
                "ORLRCV chooses by the union model's held-out bag likelihood: with novel_class or leak, "
                "fit ORLR with an explicit prior_scale"
            )
        if self.prior == "group_horseshoe":
            raise ValueError(
                "prior='group_horseshoe' learns its global shrinkage from the data; its prior_scale is the "
                "slab (the largest plausible row size): fit ORLR with a prior_scale"
            )
        if self.gammas is not None:
            for g in self.gammas:
                if not (np.isscalar(g) and float(g) > 0):
                    raise ValueError(f"gammas holds gamma={g!r}: give positive widths, or None")

    _chosen: dict[str, Any] | None = None
    """The winning grid point of the last ``fit``'s search, which its fit proper takes."""

    def fit(
        self,
        bags: Bags,
        label_sets: Sequence[Iterable[Any]] | np.ndarray | None = None,
        instance_labels: Sequence[Iterable[int]] | None = None,
        layout: Layout | None = None,
    ) -> ORLRCV:
        """Choose the prior scale (and kernel width) by bag-level cross-validation, then fit with them.

        As ``LogisticRegressionCV.fit``: first the search, each candidate an ``ORLR``
        point fit on the training folds' bags, its feature map fitted on them alone,
        scored on the held-out bags (``cv_results_``); then ``ORLR.fit`` on all the bags
        with the winners (``prior_scale_``, ``kernel_gamma_``). The arguments are
        ``ORLR.fit``'s; ``instance_labels`` and ``layout`` reach the final fit only.
        """
        self._check_model_params(self._method())
        raw, targets, n_classes = fit_inputs(self, bags, label_sets, "label_sets")
        sets, n_classes, _ = fit_label_sets(targets, n_classes)
        raw = check_features(raw)
        n_classes = infer_n_classes(sets, n_classes)
        grid = self._grid(raw)
        table = None
        if len(grid) == 1:
            self._chosen = grid[0]
        else:
            make = partial(self._candidate, n_classes)
            args = (self.cv, self._seed(), self.scoring, self.progress_bar)
            chosen = select_by_bag_cv(make, raw, sets, grid, *args)
            self._chosen, table = chosen.best, chosen.table
        super().fit(bags, label_sets, instance_labels, layout)
        if table is not None:
            self.cv_results_ = table
        return self

    def _grid(self, bags: list[np.ndarray]) -> list[dict[str, Any]]:
        """The candidates: each prior scale, crossed with the kernel widths under a kernel step.

        Without given widths, the median heuristic on ``bags`` mapped by the steps before the
        kernel (fitted on all the training bags, an unsupervised scale for the grid alone),
        times ``model_selection.GAMMA_FACTORS``.
        """
        spec = self._kernel_spec()
        gammas: list[float | None] = [None]
        if spec is not None and self.gammas is not None:
            gammas = [float(g) for g in self.gammas]
        elif spec is not None and spec.gamma is not None:
            gammas = [float(spec.gamma)]
        elif spec is not None:
            before, _ = split_kernel(make_feature_map(self.features, self.random_state))
            mapped = bags if before is None else fit_bags(before, bags)
            base = median_gamma(np.concatenate(mapped), self._seed())
            gammas = [base * f for f in model_selection.GAMMA_FACTORS]
        scales = self._prior_scales()
        return [{**({} if g is None else {"gamma": g}), "prior_scale": sc} for g in gammas for sc in scales]

    def _candidate(self, n_classes: int, params: dict[str, Any]) -> ORLR:
        """The unfitted ``ORLR`` of one grid point: this model's parameters, fitted as a point
        estimate (its EM or MAP; MAP for a posterior method) at that scale and width."""
        method = self._method()
        features = self.features
        if "gamma" in params:  # the whole map, its kernel step at this width
            features = make_feature_map(self.features, self.random_state)
            kernel_step(features).set_params(gamma=float(params["gamma"]))
        own = ORLR().get_params()
        return ORLR(**{k: v for k, v in self.get_params().items() if k in own}).set_params(
            inference=MAP() if method.posterior else method,
            n_classes=n_classes,
            prior_scale=params["prior_scale"],
            features=features,
        )

    def _hyperparameters(
        self, feats: list[np.ndarray], label_sets: list[Any], n_classes: int
    ) -> tuple[float | None, float | None]:
        """The search's winners (``fit`` chose them before the fit proper)."""
        assert self._chosen is not None, "ORLRCV.fit chooses before it fits"
        return self._chosen.get("gamma"), self._chosen["prior_scale"]


class Draws(NamedTuple):
    """Posterior means and the draws kept for prediction.

    Attributes:
        coef: (d, C) and intercept: (C,) the posterior means (over all draws).
        coef_draws: (S, d, C) and intercept_draws: (S, C), S at most the
            requested number, evenly thinned over all chains' draws.
        leak: the posterior mean of a learnt leak, and leak_draws (S,) its
            draws; None without one.
    """

    coef: np.ndarray
    intercept: np.ndarray
    coef_draws: np.ndarray
    intercept_draws: np.ndarray
    leak: float | None = None
    leak_draws: np.ndarray | None = None


def thin_draws(idata: Posterior, max_draws: int) -> Draws:
    """Posterior means of ``W``, ``beta`` (and ``leak``), and at most ``max_draws`` draws, evenly spaced."""
    w = np.asarray(idata.posterior["W"]).reshape((-1,) + idata.posterior["W"].shape[2:])
    b = np.asarray(idata.posterior["beta"]).reshape(w.shape[0], -1)
    keep = np.unique(np.linspace(0, w.shape[0] - 1, min(max_draws, w.shape[0])).astype(int))
    if "leak" not in idata.posterior:
        return Draws(w.mean(axis=0), b.mean(axis=0), w[keep], b[keep])
    leak = np.asarray(idata.posterior["leak"]).reshape(-1)
    return Draws(w.mean(axis=0), b.mean(axis=0), w[keep], b[keep], float(leak.mean()), leak[keep])


def pruned(
    feats: list[np.ndarray], label_sets: list[Any], fraction: float
) -> tuple[list[np.ndarray], list[Any], list[int]]:
    """The bags left after pruning (Pham, Raich & Fern, 6.6.2), and the input indices left out.

    The ``floor(fraction * B)`` bags with the most DP work (``dp.packing.dp_work``,
    ties to the earlier bag) are left out: a few bags with many labels can
    cost more than all the others together.
    """
    if not 0.0 <= float(fraction) < 1.0:
        raise ValueError(f"prune={fraction}: give the fraction of bags to leave out, in [0, 1)")
    n_out = int(np.floor(float(fraction) * len(feats)))
    if n_out == 0:
        return feats, label_sets, []
    work = dp_work([len(x) for x in feats], [len(set(s)) for s in label_sets])
    out = np.sort(np.argsort(-work, kind="stable")[:n_out])
    keep = np.setdiff1d(np.arange(len(feats)), out)
    return [feats[i] for i in keep], [label_sets[i] for i in keep], out.tolist()


def pack_draw_inputs(
    feats: list[np.ndarray], sets: list[np.ndarray], layout: Layout | None
) -> tuple[jax.Array, PackedBags]:
    """Flat features (rows, d) and packing for ``dp.ragged.linear_posteriors``, on canonical shapes.

    The fit's layout where it covers these bags (a cross-validation's training
    folds), so that every fold's transductive predictions share one program.
    """
    n_inst = [len(x) for x in feats]
    try:
        flat, packed = pack_canonical(np.concatenate(feats), n_inst, sets, layout)
    except ValueError:  # bags the layout does not cover
        flat, packed = pack_canonical(np.concatenate(feats), n_inst, sets)
    return jnp.asarray(flat), packed  # float32 unless jax_enable_x64
