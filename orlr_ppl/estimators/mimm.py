"""The multi-instance mixture model (MIMM) estimator: a generative instance annotator from bag label sets.

Fitting is ``inference.point.mimm_em`` (EM with an exact subset-DP E-step and a
closed-form MAP M-step); predictions go through the shared ``BagClassifier``
interface, whose transductive posteriors run the same DP on the mixture's
logits.
"""

from __future__ import annotations

import warnings
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import jax
import numpy as np
from scipy.linalg import solve_triangular
from scipy.special import softmax
from sklearn.base import TransformerMixin
from sklearn.utils.validation import check_is_fitted

from ..dp.validation import DEFAULT_MAX_LABELS
from ..inference.point.em_driver import relative_change
from ..inference.point.mimm_em import fit_mimm
from ..inference.point.mimm_steps import COVARIANCES, make_prior
from ..model.model_data import make_model_data
from ..seeding import seed_of
from .base import BagClassifier, Bags
from .persistence import FIX

if TYPE_CHECKING:  # diagnostics imports ArviZ: loaded only when a report is asked for
    from ..inference.checks.diagnostics import PointDiagnostics


def mixture_logits(x: np.ndarray, weights: np.ndarray, means: np.ndarray, covs: np.ndarray) -> np.ndarray:
    """(n, C) ``log pi_c + log N(x_i | mu_c, Sigma_c)`` in float64 (the host twin of ``mimm_em``'s).

    ``covs`` (C, d) is diagonal, (C, d, d) full. A zero weight is floored at
    the smallest positive float, so that every logit is finite (the DP's input).
    """
    x = np.asarray(x, np.float64)
    d = x.shape[1]
    out = np.empty((x.shape[0], len(weights)))
    for c, (mu, cov) in enumerate(zip(means, covs)):
        diff = x - mu
        if cov.ndim == 1:
            log_det, quad = np.sum(np.log(cov)), np.sum(diff**2 / cov, axis=1)
        else:
            chol = np.linalg.cholesky(cov)
            z = solve_triangular(chol, diff.T, lower=True)
            log_det, quad = 2.0 * np.sum(np.log(np.diag(chol))), np.sum(z**2, axis=0)
        out[:, c] = -0.5 * (d * np.log(2.0 * np.pi) + log_det + quad)
    return out + np.log(np.maximum(weights, np.finfo(np.float64).tiny))


class MIMM(BagClassifier):
    """Multi-instance mixture model: one Gaussian per class, fitted by EM from bag label sets.

    Each instance has a hidden class ``y ~ Categorical(pi)`` and features
    ``x | y = c ~ N(mu_c, Sigma_c)``; a bag's label set is the union of its
    instances' classes. The bag likelihood factorises as ``prod_i p(x_i) *
    p(Y_b | X_b)``, where ``p(Y_b | X_b)`` is the ORed-logistic likelihood of
    the logits ``log pi_c + log N(x_i | mu_c, Sigma_c)``: the package's exact
    subset DP gives it and EM's posteriors ``p(y_i = c | X_b, Y_b)``.

    Foulds & Smyth ("Multi-instance mixture models and semi-supervised
    learning", SIAM SDM 2011) give the model for binary bags under the standard
    multi-instance assumption (a bag is positive iff at least one instance is
    positive), with a mixture model per class, fitted by EM. This extension
    takes multi-label bags under the union assumption, any number of classes,
    with the exact subset-DP E-step (cost ``sum_b n_b |Y_b| 2**|Y_b|``, bags
    bucketed by label-set size), and a conjugate prior whose MAP no class
    can collapse under: Dirichlet(``weight_concentration``) on ``pi``, and a
    Normal-inverse-Wishart ("full") or per-feature Normal-inverse-Gamma
    ("diag") on each ``(mu_c, Sigma_c)`` (``inference.point.mimm_steps.make_prior``).
    The M-step is closed form and exact, so the log posterior never falls.

    Args:
        n_classes: number of classes; default: largest label + 1. A class no
            label set names gets the prior's mode (mean at the data's mean,
            covariance ``covariance_prior`` times the data's) and weight
            ``(alpha - 1) / (N + C (alpha - 1))``.
        covariance: "diag" or "full" class covariances.
        max_iter: EM iterations at most; tol: stop at this relative change of
            the log posterior (else a ``ConvergenceWarning``).
        weight_concentration: Dirichlet ``alpha`` (at least 1; 1 is no prior).
        mean_precision: ``kappa0``, the prior mean's weight in instances.
        covariance_prior: the prior's mode of every class covariance, as a
            fraction of the training instances' covariance (its diagonal for "diag").
        degrees_of_freedom: ``nu0``; None: ``d + 2`` ("full") or 3 ("diag"). A
            class's covariance is its scatter pooled with ``nu0 + d + 2``
            ("full"; ``nu0 + 3`` "diag") pseudo-instances at the prior's mode.
        n_init: EM starts. The first spreads each instance's responsibility
            evenly over its bag's label set (exactly the first E-step of a
            mixture whose classes are all alike) and takes the M-step; each
            further one spreads it by a flat Dirichlet draw (from
            ``random_state``). The fit of highest log posterior is kept.
        random_state: seed of the restarts' draws (None: seed 0, ``seeding``).
        features: the instance feature map (``orlr_ppl.features``), fitted on
            the training instances first: ``"standard"`` (so the prior's scale
            means the same in every feature); ``"quantile-normal"``, for
            Gaussian classes on spiked or heavy-tailed features
            (``in_feature_units`` then refuses: the map is not linear); None.
        max_labels: largest label set accepted (the DP holds ``2**K`` states).

    Fitted attributes: ``weights_`` (C,), ``means_`` (C, d), ``covariances_``
    (C, d) or (C, d, d), all on standardised features (``in_feature_units()``
    rewrites them); ``log_posterior_``, ``n_iter_``, ``converged_``,
    ``history_`` (the log posterior per iteration, not saved);
    ``degrees_of_freedom_``; ``n_classes_``, ``n_features_in_``,
    ``feature_map_``.

    Predictions: inductive ``predict_proba`` is ``p(y = c | x)``, the softmax
    of the logits; given label sets, ``p(y = c | X_b, Y_b)`` from the DP.
    """

    def __init__(
        self,
        n_classes: int | None = None,
        covariance: str = "diag",
        max_iter: int = 200,
        tol: float = 1e-6,
        weight_concentration: float = 2.0,
        mean_precision: float = 0.01,
        covariance_prior: float = 0.1,
        degrees_of_freedom: float | None = None,
        n_init: int = 1,
        random_state: int | None = None,
        features: str | TransformerMixin | None = "standard",
        max_labels: int = DEFAULT_MAX_LABELS,
    ) -> None:
        self.n_classes = n_classes
        self.covariance = covariance
        self.max_iter = max_iter
        self.tol = tol
        self.weight_concentration = weight_concentration
        self.mean_precision = mean_precision
        self.covariance_prior = covariance_prior
        self.degrees_of_freedom = degrees_of_freedom
        self.n_init = n_init
        self.random_state = random_state
        self.features = features
        self.max_labels = max_labels

    @property
    def _saved_arrays(self) -> dict[str, tuple[str, ...]]:  # type: ignore[override]
        """``save``'s arrays and their shapes; the covariances' depend on ``covariance``."""
        self._check_covariance()
        cov = ("C", "d") if self.covariance == "diag" else ("C", "d", "d")
        return {"weights_": ("C",), "means_": ("C", "d"), "covariances_": cov}

    def _check_covariance(self) -> None:
        if self.covariance not in COVARIANCES:
            raise ValueError(f"covariance={self.covariance!r}: choose one of {COVARIANCES}")

    # -- fitting -----------------------------------------------------------------

    def fit(self, bags: Bags, label_sets: Sequence[Iterable[Any]] | np.ndarray | None = None) -> MIMM:
        """Fit from bags (list of (n_b, d) arrays) and their label sets, or from a ``MIMLData``.

        ``label_sets``: per bag, class indices or class names, or a (B, C) 0/1
        matrix. Bags the union cannot explain (more labels than instances, an
        empty label set) raise one ValueError naming them.
        """
        self._check_covariance()
        feats, label_sets, n_classes = self._label_set_training_data(bags, label_sets)  # standardised
        # float32 unless JAX runs in float64 (``jax_enable_x64``)
        dtype = jax.dtypes.canonicalize_dtype(np.float64)
        data = make_model_data(
            feats, label_sets, n_classes, max_labels=self.max_labels, dtype=dtype, canonical_shapes=True
        )
        flat = np.concatenate(feats)
        prior = make_prior(
            flat,
            self.covariance,
            float(self.weight_concentration),
            float(self.mean_precision),
            float(self.covariance_prior),
            self.degrees_of_freedom,
            dtype,
        )
        seed = seed_of(self.random_state)
        settings = (int(self.max_iter), float(self.tol), int(self.n_init), seed)
        res = fit_mimm(data, prior, self.covariance, *settings)
        self.weights_ = np.asarray(res.weights, np.float64)
        self.means_ = np.asarray(res.means, np.float64)
        self.covariances_ = np.asarray(res.covariances, np.float64)
        self.degrees_of_freedom_ = float(prior.dof)
        self.log_posterior_, self.n_iter_, self.converged_ = res.log_posterior, res.n_iter, res.converged
        self.history_ = res.history
        self.n_classes_ = n_classes
        if not self.converged_:
            from ..inference.checks.diagnostics import ConvergenceWarning  # ArviZ: imported only when needed

            warnings.warn(self.diagnostics().problems[0], ConvergenceWarning, stacklevel=2)
        return self

    def diagnostics(self) -> PointDiagnostics:
        """EM's stopping report (``converged``, ``n_iter``, the final relative change, ``problems``)."""
        check_is_fitted(self, "n_classes_")
        history, change = getattr(self, "history_", None), None
        if history is not None and len(history) > 1:
            change = float(relative_change(history[-2], history[-1]))
        n_iter, max_iter = self.n_iter_, int(self.max_iter)
        from ..inference.checks.diagnostics import optimizer_diagnostics

        report = optimizer_diagnostics("em", self.converged_, n_iter, max_iter, self.tol, change)
        if report.problems and n_iter < max_iter:  # EM has no line search: it stopped at a non-finite step
            report = report._replace(
                problems=[
                    f"EM stopped after {n_iter} iteration(s), before max_iter={max_iter}, where the next "
                    "step's log posterior was not finite (a class covariance too ill-conditioned for the "
                    "float precision): try a larger covariance_prior, covariance='diag' or float64"
                ]
            )
        return report

    def in_feature_units(self) -> tuple[np.ndarray, np.ndarray]:
        """``(means, covariances)`` for raw features: ``mu * s + m`` and ``Sigma`` scaled by ``s s^T``."""
        check_is_fitted(self, "n_classes_")
        m, s = self._linear_scaling()
        scale = s**2 if self.covariances_.ndim == 2 else np.outer(s, s)
        return self.means_ * s + m, self.covariances_ * scale

    # -- prediction hooks (see BagClassifier) -----------------------------------

    def _logits(self, feats: list[np.ndarray]) -> list[np.ndarray]:
        """``log p(x, y = c)``: softmax gives ``p(y = c | x)``; the DP input of transductive posteriors."""
        return [mixture_logits(x, self.weights_, self.means_, self.covariances_) for x in feats]

    def _inductive_proba(self, feats: list[np.ndarray]) -> list[np.ndarray]:
        return [softmax(lg, axis=1) for lg in self._logits(feats)]

    # -- persistence -------------------------------------------------------------

    def _fitted_metadata(self) -> dict[str, Any]:
        return {
            "log_posterior_": float(self.log_posterior_),
            "n_iter_": int(self.n_iter_),
            "converged_": bool(self.converged_),
            "degrees_of_freedom_": float(self.degrees_of_freedom_),
        }

    def _check_loaded(self, param_file: Path) -> None:
        """The base's shape checks, then weights in [0, 1] and positive (definite) covariances."""
        super()._check_loaded(param_file)
        covs = np.asarray(self.covariances_)
        spd = np.all(covs > 0) if covs.ndim == 2 else np.all(np.linalg.eigvalsh(covs) > 0)
        if not (np.all((self.weights_ >= 0) & (self.weights_ <= 1)) and spd):
            raise ValueError(
                f"{param_file}: 'weights_' must lie in [0, 1] and 'covariances_' be positive definite; {FIX}"
            )
