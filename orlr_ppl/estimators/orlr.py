"""The ORed-logistic regression (ORLR) estimator: instance annotation from bag label sets.

Fitting runs through ``orlr_fit`` (EM, MAP, NUTS, SVI); predictions through the
shared ``_BagClassifier`` interface, refined here to average over posterior
draws when the fit has them.
"""

from __future__ import annotations

import warnings
from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np
from sklearn.utils.validation import check_is_fitted

from ..dp.packing import Layout
from ..dp.validation import DEFAULT_MAX_LABELS
from ..model.numpyro_model import ModelData, make_model_data
from .base import Bags, _BagClassifier
from .feature_map import to_feature_units
from .orlr_fit import (
    DEFAULT_MAX_ITER,
    METHODS,
    SamplerSettings,
    fit_point,
    fit_posterior,
    layout_of,
    pruned,
    thin_draws,
)
from .orlr_persistence import _ORLRPersistence
from .orlr_predict import _ORLRPredictions
from .posterior_predictive import _PosteriorPredictive
from .relaxed import NOVEL_CLASS_NAME, check_leak
from .row_features import _RowFeatures

if TYPE_CHECKING:  # diagnostics imports ArviZ: loaded only when a fit or a report needs it
    import arviz as az

    from ..inference.diagnostics import Diagnostics, PointDiagnostics


class ORLR(_RowFeatures, _ORLRPredictions, _ORLRPersistence, _PosteriorPredictive, _BagClassifier):
    """The ORed-logistic instance annotator, fitted from bag label sets.

    Args:
        method: "em" (the published generalised EM) or "map" (L-BFGS on the
            log posterior): point estimates sharing one objective, so they
            agree at convergence; "nuts" or "svi": the full posterior
            (``posterior_``), and predictions averaged over its draws.
        prior: the prior family of the weights' rows: "normal" (an l2
            penalty) or "l21" (a group Laplace per row: an l2,1 penalty,
            fitted by proximal gradient, which zeroes whole rows: features,
            or a kernel model's dictionary elements; ``row_inclusion``).
        prior_scale: the prior's scale: the Normal's sd (l2 strength
            ``1 / (2 prior_scale**2)``) or the group Laplace's (l2,1
            strength ``1 / prior_scale``); "auto": chosen by bag-level
            cross-validation inside ``fit`` (``cv_results_``); None is plain
            maximum likelihood. ``prior_scale_`` is the scale used.
        intercept_scale: sd of the prior on the intercepts; None is flat.
        fit_intercept: learn per-class intercepts.
        n_classes: number of classes; default: largest label + 1.
        max_labels: largest label set accepted (the DP holds 2**K states).
        max_iter: EM iterations or L-BFGS iterations; None: 200 for EM (which
            stops at ``tol`` first on most data; the paper's budget was 50, as
            ``orlr-ppl evaluate`` sets), 500 for MAP (L-BFGS needs more, cheaper steps).
        m_steps: EM only: gradient-ascent steps (Armijo line search) per
            M-step. 1 is the classic generalised EM; more steps move each
            M-step closer to its maximum, and, without a prior, the fit
            closer to the (often infinite) maximum-likelihood weights.
        tol: relative tolerance on the log posterior.
        num_warmup, num_samples, num_chains: NUTS settings (per chain). Chains run in
            parallel when JAX has a device per chain (see ``orlr_ppl.inference.nuts``).
        max_num_samples: NUTS chains that fail the R-hat or ESS check after
            ``num_samples`` draws go on, a quarter of ``num_samples`` at a time,
            up to this many draws per chain; None: twice ``num_samples``; at
            most ``num_samples``: never.
        dense_mass: NUTS adapts a dense mass matrix (every parameter's
            covariance) in warmup rather than a diagonal one: for posteriors
            whose parameters are strongly correlated. It needs a longer warmup
            (``num_warmup`` of several hundred) to estimate the covariance. It
            is no remedy for separate modes (a class seen in one or two
            training bags, whose label any of their instances may carry): a
            metric fitted to one mode hops between modes less (BENCHMARKS.md).
        whiten: NUTS samples the weights and intercepts in coordinates whitened
            by the Laplace approximation at its start (the potential's Hessian
            there, so ``init="map"`` makes it the MAP's), adapting a diagonal
            metric on top; the group horseshoe's scales are sampled as before.
            For posteriors close to Gaussian with correlated weights: on an
            HJA-union fold under a Normal prior it took 63 leapfrog steps a
            draw instead of 511, for 1.7 times the least bulk ESS per step
            and 5 times the median; but in 1,000 draws a chain its worst
            weights (a weakly identified species, whose posterior the MAP's
            curvature misdescribes) reached a bulk ESS of 29 against 142, with
            5 divergences (BENCHMARKS.md, "Laplace-whitened NUTS").
            Costs a Hessian (one gradient per parameter) and an
            eigendecomposition at the start.
        target_accept: NUTS's target acceptance probability in warmup's step-size
            adaptation, in (0, 1); None: 0.98 under ``prior="group_horseshoe"``
            (whose narrow neck near zero diverges at larger steps), 0.8 otherwise.
            Higher means smaller steps and longer trajectories: fewer divergences
            at a higher cost per draw.
        init: where NUTS chains start: "map" (the MAP under the same prior, by
            L-BFGS, jittered per chain) or "zeros" (zero weights, jittered).
        guide ("normal" | "lowrank"), svi_steps, learning_rate,
            subsample_size (bags per minibatch): SVI settings.
        max_predict_draws: posterior draws used (evenly thinned) to average
            predictions.
        progress_bar: show a progress bar while NUTS samples (it reads "compiling"
            until the first iteration, then "warmup" and "sampling"), SVI
            optimises, or an "auto" setting is chosen by cross-validation: those
            take minutes. A single EM or MAP fit takes seconds and shows none.
        random_state: seed of NUTS and SVI.
        standardize: centre and scale each feature by its training mean and sd
            (a constant feature: scale 1) before fitting and before every
            prediction, so the prior means the same for every feature whatever
            its units. "quantile-normal": through its training quantiles to a
            Normal first (``feature_map``), for spiked or heavy-tailed features.
        prune: fraction of the training bags to leave out, those with the
            most DP work ``n_b * |Y_b| * 2**|Y_b|`` first (the paper's
            pruning, 6.6.2); their input indices are ``pruned_bags_``. Their
            features still count for the standardisation.
        bag_fraction: EM only: below 1, stochastic EM (the paper's 6.6.1):
            each iteration's E- and M-step use this fraction of the bags,
            drawn afresh (seeded by ``random_state``) in every label-set
            bucket and weighted to an unbiased estimate. It runs ``max_iter``
            iterations with no stopping test, so ``converged_`` is False
            (and no warning is issued), ``history_`` holds the per-iteration
            estimates, and ``log_posterior_`` is exact, on all bags.
        canonical_shapes: pad the label-set buckets to canonical sizes (at
            most 1.5x each; ``make_model_data``), in a layout an earlier fit
            in this process used wherever the bags fit it
            (``dp.packing.canonical_layout``), so that fits on other folds
            or datasets of similar shape reuse the compiled programs. None:
            for EM and MAP, whose cost is mostly compiling, not for NUTS and
            SVI, which evaluate the gradient thousands of times (padding cost
            them 11-46 % more DP cells on Letter Frost and HJA folds); True
            suits many short sampler fits, as in a cross-validation. A
            ``dp.packing.Layout`` (``shared_layout``) packs into exactly its
            buckets: ``cross_validate`` gives one covering every training
            fold to a model with ``canonical_shapes=True``, so that all folds
            share one compiled program. It is saved as True.
            ``canonical_shapes_`` says what the fit did.
        novel_class: a novel (background) class, index C, the last column of
            ``coef_`` and ``predict_proba``: any bag may hold instances of it
            without naming it (Pham et al., ICML 2015). The DP ends at ``Y_b``
            or ``Y_b + {novel}``; bags with no label become possible.
        leak: each label of a bag may be switched on by a leak, with
            probability eps, instead of an instance (noisy OR); bags with
            fewer instances than labels become possible. None: no leak; a
            float: that eps; "learn": eps is fitted (EM in closed form, MAP
            with the weights, NUTS/SVI under a Beta(1, 10) prior), ``leak_``.
        kernel: None (linear features) or "rbf": kernel ORLR, each instance
            replaced by its RBF similarities to a dictionary of training
            instances (``data.kernel``); ``coef_`` has a row per element.
        gamma: the RBF width, or "auto": chosen with ``prior_scale`` by
            bag-level cross-validation around the median heuristic
            (``model_selection``); ``kernel_gamma_`` is the width used.
        dictionary_size: kernel: keep this many training instances, drawn at
            random (the paper's dictionary shrinking); None: all of them.
        nystroem: kernel: Nystroem features (``k(x, D) K_DD^(-1/2)``), for
            large data, instead of the plain kernel columns.
        cv_folds: bag-level folds of the "auto" selection.
        cv_scoring: the held-out bag score that decides the "auto" selection
            (``model_selection.CV_SCORINGS``): "log_likelihood" (the model's
            own, ``mean_b log p(Y_b | X_b)``), "ranking_loss" or
            "average_precision" (of the bag scores ``max_i p(y_bi = c)``).
            ``cv_results_`` holds all three for every candidate.

    Labels. ``label_sets`` are one list per bag of class indices or of class
    names (then ``class_names_`` is the sorted names, and predictions are
    indices into it), or a (B, C) 0/1 label matrix (a 2-D array always is
    one; its C fixes ``n_classes``).

    Fitted attributes: ``coef_`` (d, C), ``intercept_`` (C,) (for NUTS/SVI
    the posterior means), ``n_classes_``, ``n_features_in_``,
    ``pruned_bags_`` (sorted input indices of the bags ``prune`` left out);
    ``feature_mean_``, ``feature_scale_`` (d,) the standardisation (zeros
    and ones with ``standardize=False``); ``feature_quantiles_`` (Q, d)
    with ``standardize="quantile-normal"``. The weights (``coef_``,
    ``coef_draws_``, the posterior's ``W``) act on *standardised* features,
    so the prior's scale means the same for every feature; the intercepts
    are the logits of an average instance. ``coef_in_feature_units()``
    rewrites them for raw features. EM/MAP:
    ``log_posterior_``, ``n_iter_``, ``converged_``, and for EM ``history_``;
    NUTS/SVI: ``posterior_`` (``arviz.InferenceData``), ``coef_draws_``
    (S, d, C), ``intercept_draws_`` (S, C), for SVI ``losses_``, and on linear
    features ``heavy_tailed_features_`` (name -> largest training |z|, those
    reaching ``HEAVY_TAIL_Z``, for the convergence report); from a
    ``MIMLData``: ``class_names_``, ``feature_names_`` (also the posterior's
    ``class``/``feature`` coordinates); from named labels: ``class_names_``.

    Convergence. ``fit`` issues one ``orlr_ppl.diagnostics.ConvergenceWarning``
    when a NUTS posterior fails a check (R-hat, bulk/tail ESS, divergences,
    tree depth, E-BFMI, PSIS-LOO k-hat), an SVI posterior the PSIS-LOO k-hat
    check, or EM/MAP stop before meeting ``tol``; ``diagnostics()`` returns
    the full report.
    """

    def __init__(
        self,
        method: str = "em",
        prior_scale: float | None = 1.0,
        intercept_scale: float | None = 10.0,
        fit_intercept: bool = True,
        n_classes: int | None = None,
        max_labels: int = DEFAULT_MAX_LABELS,
        max_iter: int | None = None,
        m_steps: int = 10,
        tol: float = 1e-6,
        num_warmup: int = 300,
        num_samples: int = 1000,
        num_chains: int = 4,
        max_num_samples: int | None = None,
        dense_mass: bool = False,
        whiten: bool = False,
        target_accept: float | None = None,
        init: str = "map",
        guide: str = "normal",
        svi_steps: int = 3000,
        learning_rate: float = 0.01,
        subsample_size: int | None = None,
        max_predict_draws: int = 200,
        progress_bar: bool = True,
        random_state: int | None = None,
        standardize: bool | str = True,
        prune: float = 0.0,
        bag_fraction: float = 1.0,
        canonical_shapes: bool | Layout | None = None,
        novel_class: bool = False,
        leak: float | str | None = None,
        prior: str = "normal",
        kernel: str | None = None,
        gamma: float | str = "auto",
        dictionary_size: int | None = None,
        nystroem: bool = False,
        cv_folds: int = 3,
        cv_scoring: str = "log_likelihood",
    ) -> None:
        self.method = method
        self.prior_scale = prior_scale
        self.intercept_scale = intercept_scale
        self.fit_intercept = fit_intercept
        self.n_classes = n_classes
        self.max_labels = max_labels
        self.max_iter = max_iter
        self.m_steps = m_steps
        self.tol = tol
        self.num_warmup = num_warmup
        self.num_samples = num_samples
        self.num_chains = num_chains
        self.max_num_samples = max_num_samples
        self.dense_mass = dense_mass
        self.whiten = whiten
        self.target_accept = target_accept
        self.init = init
        self.guide = guide
        self.svi_steps = svi_steps
        self.learning_rate = learning_rate
        self.subsample_size = subsample_size
        self.max_predict_draws = max_predict_draws
        self.progress_bar = progress_bar
        self.random_state = random_state
        self.standardize = standardize
        self.prune = prune
        self.bag_fraction = bag_fraction
        self.canonical_shapes = canonical_shapes
        self.novel_class = novel_class
        self.leak = leak
        self.prior = prior
        self.kernel = kernel
        self.gamma = gamma
        self.dictionary_size = dictionary_size
        self.nystroem = nystroem
        self.cv_folds = cv_folds
        self.cv_scoring = cv_scoring

    # -- fitting -----------------------------------------------------------------

    def fit(
        self,
        bags: Bags,
        label_sets: Sequence[Iterable[Any]] | np.ndarray | None = None,
        instance_labels: Sequence[Iterable[int]] | None = None,
    ) -> ORLR:
        """Fit from bags (list of (n_b, d) arrays) and their label sets, or from a ``MIMLData``.

        ``label_sets``: per bag, a list of class indices or of class names; or
        a (B, C) 0/1 label matrix. Bags the union model cannot explain (fewer
        instances than labels without a ``leak``, an empty label set without a
        ``novel_class``) raise one ValueError listing all of them.
        ``instance_labels``: per bag, (n_b,) known instance labels as class
        indices, -1 where unknown (a semi-supervised fit); a known label must
        lie in its bag's label set, or be the novel class C.
        """
        check_leak(self.leak)
        if self.method not in METHODS:
            raise ValueError(f"method={self.method!r}: choose one of {METHODS}")
        if not 0.0 < float(self.bag_fraction) <= 1.0 or (self.bag_fraction < 1 and self.method != "em"):
            raise ValueError(
                f"bag_fraction={self.bag_fraction} with method={self.method!r}: stochastic EM takes "
                "method='em' and a fraction in (0, 1]; SVI subsamples with subsample_size"
            )
        ignored = [
            f"{k}={getattr(self, k)!r}" for k in ("dense_mass", "whiten", "target_accept") if getattr(self, k)
        ]
        if ignored and self.method != "nuts":
            warnings.warn(
                f"{', '.join(ignored)}: NUTS settings, which method={self.method!r} ignores", stacklevel=2
            )
        self._diagnostics = None
        feats, label_sets, n_classes = self._label_set_training_data(bags, label_sets)  # standardised
        if instance_labels is not None and self.prune > 0:
            raise ValueError("prune leaves bags out: give instance_labels with prune=0")
        n_features = feats[0].shape[1]
        feats, label_sets, self.pruned_bags_ = pruned(feats, label_sets, self.prune)
        if self.method in ("nuts", "svi") and self.kernel is None:
            self._check_linear_features(feats, n_classes + bool(self.novel_class))
        feats = self._fit_rows(feats, label_sets, n_classes)  # kernel features; "auto" chosen
        canonical, layout = self.canonical_shapes, layout_of(self.canonical_shapes)
        canonical = self.method in ("em", "map") if canonical is None else bool(canonical)
        feats, padded = self._pad_rows(feats, canonical)
        data = make_model_data(
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
        )
        self.canonical_shapes_ = canonical
        if self.method in ("nuts", "svi"):
            ids = getattr(bags, "bag_ids", None)  # a MIMLData's: the diagnostics name bags by them
            dropped = set(self.pruned_bags_)
            kept = None if ids is None else [b for i, b in enumerate(ids) if i not in dropped]
            self._fit_posterior(data, kept)
        else:
            self._fit_point(data)
            self._unpad_rows(padded)
        self.n_classes_, self.n_features_in_ = n_classes, n_features
        self._drop_zero_rows()
        # The warnings are issued here, with stacklevel 2, so that they point at the caller of fit.
        if hasattr(self, "posterior_"):
            self._diagnostics = self._posterior_diagnostics(warn=True)
        elif not self.converged_ and not self._stochastic():
            from ..inference.diagnostics import ConvergenceWarning

            warnings.warn(self.diagnostics().problems[0], ConvergenceWarning, stacklevel=2)
        return self

    def _fit_point(self, data: ModelData) -> None:
        """EM or MAP: ``coef_``, ``intercept_``, the optimiser's report, and EM's ``history_``."""
        res = fit_point(
            data,
            self.method,
            self.prior_scale_,
            self.intercept_scale,
            self.fit_intercept,
            max_iter=self._max_iter(),
            tol=self.tol,
            m_steps=self.m_steps,
            bag_fraction=self.bag_fraction,
            seed=0 if self.random_state is None else int(self.random_state),
        )
        self.coef_, self.intercept_ = res.coef, res.intercept
        self.leak_ = res.leak if self.leak == "learn" else self.leak
        self.log_posterior_, self.n_iter_, self.converged_ = res.log_posterior, res.n_iter, res.converged
        if res.history is not None:
            self.history_ = res.history

    def _fit_posterior(self, data: ModelData, bag_ids: Sequence[Any] | None = None) -> None:
        """NUTS or SVI: ``posterior_`` (named by the data's classes, features and bag ids) and its draws."""
        from ..inference.inference_data import with_names

        settings = SamplerSettings(**{k: getattr(self, k) for k in SamplerSettings._fields})
        settings = settings._replace(prior_scale=self.prior_scale_)
        res = fit_posterior(data, self.method, settings)
        if res.losses is not None:
            self.losses_ = res.losses
        classes = getattr(self, "class_names_", None)
        if classes is not None and self.novel_class:  # W, beta have one more column than the data
            classes = [*classes, NOVEL_CLASS_NAME]
        rows = getattr(self, "feature_names_", None) if self.kernel is None else None  # kernel: elements
        bags = None if bag_ids is None else [str(b) for b in bag_ids]
        self._set_posterior(with_names(res.posterior, classes, rows, bags))

    def _set_posterior(self, idata: az.InferenceData) -> None:
        self.posterior_ = idata
        draws = thin_draws(idata, self.max_predict_draws)
        self.coef_, self.intercept_ = draws.coef, draws.intercept
        self.coef_draws_, self.intercept_draws_ = draws.coef_draws, draws.intercept_draws
        self.leak_ = draws.leak if draws.leak is not None else self.leak
        self.leak_draws_ = draws.leak_draws

    def _stochastic(self) -> bool:
        return self.method == "em" and float(self.bag_fraction) < 1.0

    def _max_iter(self) -> int:
        if self.max_iter is not None:
            return int(self.max_iter)
        return DEFAULT_MAX_ITER.get(self.method, DEFAULT_MAX_ITER["em"])

    def diagnostics(self) -> Diagnostics | PointDiagnostics:
        """Convergence report of the fit.

        NUTS/SVI: ``orlr_ppl.diagnostics.Diagnostics`` (``table``: mean, sd,
        R-hat, bulk/tail ESS per scalar of ``W`` and ``beta``; ``sampler``:
        divergences, tree depth, step size, E-BFMI, PSIS-LOO k-hat share;
        ``problems``; ``converged``). EM/MAP: ``orlr_ppl.diagnostics.PointDiagnostics``
        (``converged``, ``n_iter``, ``max_iter``, ``tol``, the final relative
        change of the log posterior (EM), ``problems``). Both have
        ``summary_lines()`` for a short text report.
        """
        from ..inference.diagnostics import optimizer_diagnostics

        check_is_fitted(self, "n_classes_")
        if hasattr(self, "posterior_"):
            if getattr(self, "_diagnostics", None) is None:  # a loaded model: its report is built once
                self._diagnostics = self._posterior_diagnostics(warn=False)
            return self._diagnostics
        history, change = getattr(self, "history_", None), None
        if history is not None and len(history) > 1:
            change = float(abs(history[-1] - history[-2]) / max(abs(history[-2]), 1.0))
        return optimizer_diagnostics(
            self.method,
            self.converged_,
            self.n_iter_,
            self._max_iter(),
            self.tol,
            relative_change=change,
            bag_fraction=float(self.bag_fraction) if self._stochastic() else None,
        )

    def coef_in_feature_units(self) -> tuple[np.ndarray, np.ndarray]:
        """``(coef, intercept)``, (d, C) and (C,), for raw features: ``x @ coef + intercept`` are the logits.

        ``coef_`` acts on standardised features; this rewrites it (and the
        intercepts) for the features as given to ``fit``. For NUTS/SVI, of the
        posterior means ``coef_``/``intercept_``.
        """
        check_is_fitted(self, "n_classes_")
        if self.kernel is not None:
            raise ValueError("kernel ORLR's weights act on kernel features: they have no feature units")
        return to_feature_units(self.coef_, self.intercept_, *self._linear_scaling())
