"""scikit-learn-style estimators: ORLR and the reference baselines.

All share one prediction interface over ragged bags (a list of (n_b, d)
arrays, or a ``MIMLData``, whose bags are used): ``predict_proba``/``predict`` per instance (inductive, or
transductive given the bags' label sets), ``predict_bags`` (the union of
predicted instance labels), ``bag_scores`` (per-class bag scores for ranking
metrics: by default the max over instances of ``p(y = c | x)``; ``rule="model"``
the model's own ``P(c in Y_b | X_b)``) and ``score`` (instance accuracy).
"""

from __future__ import annotations

import json
import warnings
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import jax.numpy as jnp
import numpy as np
from scipy.special import softmax
from sklearn.base import BaseEstimator
from sklearn.linear_model import LogisticRegression
from sklearn.utils.validation import check_is_fitted

from .. import __version__
from ..data.container import MIMLData
from ..dp.packing import pack_bags
from ..dp.ragged import instance_posteriors, packed_posteriors
from ..dp.validation import DEFAULT_MAX_LABELS, check_features, check_label_sets
from ..evaluation.metrics import check_credible_mass, equal_tailed_interval, instance_accuracy
from ..model.numpyro_model import ModelData

if TYPE_CHECKING:  # diagnostics imports ArviZ: loaded only when a fit or a report needs it
    from ..inference.diagnostics import Diagnostics, PointDiagnostics

METHODS = ("em", "map", "nuts", "svi")
DEFAULT_MAX_ITER = {"em": 50, "map": 500}
"""``ORLR(max_iter=None)``: EM's published budget; L-BFGS takes more, cheaper steps."""
BAG_SCORE_RULES = ("max", "model")

Bags = Sequence[np.ndarray] | MIMLData
"""A list of (n_b, d) instance arrays, or a ``MIMLData`` (its bags)."""


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


class _BagClassifier(BaseEstimator):
    """Predictions from per-instance class probabilities (``_inductive_proba``)."""

    _saved_arrays: tuple[str, ...] = ()

    def _inductive_proba(self, feats: list[np.ndarray]) -> list[np.ndarray]:
        raise NotImplementedError

    def _draw_proba(self, feats: list[np.ndarray]) -> list[np.ndarray]:
        """B arrays (S, n_b, C) of ``p(y | x, theta_s)`` per posterior draw; a point estimate is S = 1."""
        return [p[None] for p in self._inductive_proba(feats)]

    def _logits(self, feats: list[np.ndarray]) -> list[np.ndarray]:
        """Class scores for the DP (any per-instance shift is harmless)."""
        return [np.log(np.clip(p, 1e-300, None)) for p in self._inductive_proba(feats)]

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

    def predict_proba(
        self, bags: Bags, label_sets: Sequence[Iterable[int]] | None = None
    ) -> list[np.ndarray]:
        """B arrays (n_b, C) of ``p(y = c | x)``, or of ``p(y = c | Y_b, X_b)`` given label sets.

        The transductive probabilities come from the exact DP, so they are zero
        outside each bag's label set.
        """
        feats = self._check_bags(bags)
        if label_sets is None:
            return self._inductive_proba(feats)
        check_label_sets(label_sets, [len(x) for x in feats], self.n_classes_, self.max_labels)
        return instance_posteriors(self._logits(feats), label_sets, self.max_labels)

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
            rule: "max" (the paper's): ``max_i p(y_bi = c | x_bi)``. "model":
                the bag-label probability under the model itself,
                ``P(c in Y_b | X_b) = 1 - prod_i (1 - p(y_bi = c | x_bi))``
                (instances labelled independently), computed per posterior
                draw and averaged over draws (a point estimate is one draw).
                It is at least the "max" score, and grows with the bag's size.
        """
        _check_bag_score_rule(rule)
        if rule == "max":
            return np.stack([p.max(axis=0) for p in self.predict_proba(bags)])
        feats = self._check_bags(bags)
        return np.stack([label_probability(p).mean(axis=0) for p in self._draw_proba(feats)])

    def score(self, bags: Bags, instance_labels: Sequence[np.ndarray] | None = None) -> float:
        """Inductive instance accuracy (a ``MIMLData`` brings its instance labels)."""
        if instance_labels is None:
            if not isinstance(bags, MIMLData) or bags.instance_labels is None:
                raise ValueError("score needs instance labels: pass them, or a MIMLData that has them")
            instance_labels = bags.instance_labels
        return instance_accuracy(instance_labels, self.predict(bags))

    # -- persistence ---------------------------------------------------------

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
        return {}

    @classmethod
    def load(cls, path: str | Path) -> _BagClassifier:
        """Restore a model written by ``save``; predictions are identical."""
        folder = Path(path)
        meta_file, param_file = folder / "metadata.json", folder / "params.npz"
        for f in (meta_file, param_file):
            if not f.is_file():
                raise ValueError(f"{f} is missing: is {folder} a saved orlr-ppl model folder?")
        try:
            meta = json.loads(meta_file.read_text())
        except json.JSONDecodeError as err:
            raise ValueError(f"{meta_file} is not valid JSON (truncated?): {err}") from err
        from .sim import SIM  # sim.py builds on this module

        classes = {c.__name__: c for c in (ORLR, SoftmaxRegression, MajorityClass, SIM)}
        name = meta.get("estimator")
        if meta.get("package") != "orlr-ppl" or name not in classes:
            raise ValueError(f"{meta_file} does not describe an orlr-ppl estimator")
        target = classes[name] if cls is _BagClassifier else cls
        if target.__name__ != name:
            raise ValueError(f"{meta_file} holds a {name}, not a {target.__name__}")
        model = target(**meta["params"])
        try:
            with np.load(param_file, allow_pickle=False) as arrays:
                values = {k: np.asarray(arrays[k]) for k in model._saved_arrays}
        except (OSError, ValueError, KeyError) as err:
            raise ValueError(f"{param_file} is unreadable or incomplete: {err}") from err
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
        pass


def _json_default(obj: Any) -> Any:
    if isinstance(obj, np.generic):
        return obj.item()
    raise TypeError(f"cannot store {type(obj).__name__} in JSON")


class ORLR(_BagClassifier):
    """The ORed-logistic instance annotator, fitted from bag label sets.

    Args:
        method: "em" (the published generalised EM) or "map" (L-BFGS on the
            log posterior): point estimates sharing one objective, so they
            agree at convergence; "nuts" or "svi": the full posterior
            (``posterior_``), and predictions averaged over its draws.
        prior_scale: sd of the Normal prior on the weights (l2 strength
            ``1 / (2 prior_scale**2)``); None is plain maximum likelihood.
        intercept_scale: sd of the prior on the intercepts; None is flat.
        fit_intercept: learn per-class intercepts.
        n_classes: number of classes; default: largest label + 1.
        max_labels: largest label set accepted (the DP holds 2**K states).
        max_iter: EM iterations or L-BFGS iterations; None: 50 for EM (the
            published budget), 500 for MAP (L-BFGS needs more, cheaper steps).
        m_steps: EM only: gradient-ascent steps (Armijo line search) per
            M-step. 1 is the classic generalised EM; more steps move each
            M-step closer to its maximum, and, without a prior, the fit
            closer to the (often infinite) maximum-likelihood weights.
        tol: relative tolerance on the log posterior.
        num_warmup, num_samples, num_chains: NUTS settings (per chain). Chains run in
            parallel when JAX has a device per chain (see ``orlr_ppl.infer_nuts``).
        max_num_samples: NUTS chains that fail the R-hat or ESS check after
            ``num_samples`` draws go on, a quarter of ``num_samples`` at a time,
            up to this many draws per chain; None: twice ``num_samples``; at
            most ``num_samples``: never.
        init: where NUTS chains start: "map" (the MAP under the same prior, by
            L-BFGS, jittered per chain) or "zeros" (zero weights, jittered).
        guide ("normal" | "lowrank"), svi_steps, learning_rate,
            subsample_size (bags per minibatch): SVI settings.
        max_predict_draws: posterior draws used (evenly thinned) to average
            predictions.
        progress_bar: show NumPyro's progress bar while sampling/optimising.
        random_state: seed of NUTS and SVI.

    Fitted attributes: ``coef_`` (d, C), ``intercept_`` (C,) (for NUTS/SVI
    the posterior means), ``n_classes_``, ``n_features_in_``; EM/MAP:
    ``log_posterior_``, ``n_iter_``, ``converged_``, and for EM ``history_``;
    NUTS/SVI: ``posterior_`` (``arviz.InferenceData``), ``coef_draws_``
    (S, d, C), ``intercept_draws_`` (S, C), and for SVI ``losses_``; from a
    ``MIMLData``: ``class_names_``, ``feature_names_`` (also the posterior's
    ``class``/``feature`` coordinates).

    Convergence. ``fit`` issues one ``orlr_ppl.diagnostics.ConvergenceWarning``
    when a NUTS posterior fails a check (R-hat, bulk/tail ESS, divergences,
    tree depth, E-BFMI, PSIS-LOO k-hat), an SVI posterior the PSIS-LOO k-hat
    check, or EM/MAP stop before meeting ``tol``; ``diagnostics()`` returns
    the full report.
    """

    _saved_arrays = ("coef_", "intercept_")

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
        init: str = "map",
        guide: str = "normal",
        svi_steps: int = 3000,
        learning_rate: float = 0.01,
        subsample_size: int | None = None,
        max_predict_draws: int = 200,
        progress_bar: bool = False,
        random_state: int | None = None,
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
        self.init = init
        self.guide = guide
        self.svi_steps = svi_steps
        self.learning_rate = learning_rate
        self.subsample_size = subsample_size
        self.max_predict_draws = max_predict_draws
        self.progress_bar = progress_bar
        self.random_state = random_state

    def fit(self, bags: Bags, label_sets: Sequence[Iterable[int]] | None = None) -> ORLR:
        """Fit from bags (list of (n_b, d) arrays) and their label sets, or from a ``MIMLData``.

        Bags the union model cannot explain (fewer instances than labels, an
        empty label set) raise one ValueError listing all of them.
        """
        from ..inference.em import fit_em
        from ..inference.map import fit_map
        from ..model.numpyro_model import make_model_data
        from ..objective import make_flat_data

        if self.method not in METHODS:
            raise ValueError(f"method={self.method!r}: choose one of {METHODS}")
        # A refit (e.g. after set_params(method=...)) must not keep draws or names of the last fit.
        for name in [k for k in vars(self) if k.endswith("_") and not k.startswith("__")]:
            delattr(self, name)
        self._diagnostics = None
        bags, label_sets, n_classes = _fit_inputs(self, bags, label_sets, "label_sets")
        if len(bags) != len(label_sets):
            raise ValueError(f"got {len(bags)} bags but {len(label_sets)} label sets")
        n_classes = _infer_n_classes(label_sets, n_classes)
        self.training_shape_ = _shape_of(bags)
        if self.method in ("nuts", "svi"):
            return self._fit_posterior(bags, label_sets, n_classes)
        scales = {"prior_scale": self.prior_scale, "intercept_scale": self.intercept_scale}
        if self.method == "em":
            flat = make_flat_data(bags, label_sets, n_classes, self.max_labels)
            n_features = flat.features.shape[1]
            res = fit_em(
                flat,
                **scales,
                max_iter=self._max_iter(),
                m_steps=self.m_steps,
                tol=self.tol,
                fit_intercept=self.fit_intercept,
            )
            self.history_ = res.history
        else:
            data = make_model_data(bags, label_sets, n_classes, self.max_labels)
            n_features = data.n_features
            res = fit_map(
                data,
                **scales,
                max_iter=self._max_iter(),
                tol=self.tol,
                fit_intercept=self.fit_intercept,
            )
        self.coef_, self.intercept_ = np.asarray(res.W), np.asarray(res.beta)
        self.log_posterior_, self.n_iter_, self.converged_ = res.log_posterior, res.n_iter, res.converged
        self.n_classes_, self.n_features_in_ = n_classes, n_features
        if not self.converged_:
            from ..inference.diagnostics import ConvergenceWarning

            warnings.warn(self.diagnostics().problems[0], ConvergenceWarning, stacklevel=2)
        return self

    def _fit_posterior(self, bags, label_sets, n_classes: int) -> ORLR:
        from ..inference.diagnostics import warn_if_unconverged
        from ..inference.inference_data import with_names
        from ..inference.nuts import fit_nuts
        from ..inference.svi import fit_svi
        from ..model.numpyro_model import make_model_data

        data = make_model_data(bags, label_sets, n_classes, self.max_labels)
        common = {
            "prior_scale": self.prior_scale,
            "intercept_scale": self.intercept_scale,
            "fit_intercept": self.fit_intercept,
            "seed": 0 if self.random_state is None else int(self.random_state),
            "progress_bar": self.progress_bar,
        }
        if self.method == "nuts":
            idata = fit_nuts(
                data,
                num_warmup=self.num_warmup,
                num_samples=self.num_samples,
                num_chains=self.num_chains,
                max_num_samples=2 * self.num_samples
                if self.max_num_samples is None
                else self.max_num_samples,
                init_values=self._nuts_start(data),
                **common,
            )
        else:
            res = fit_svi(
                data,
                guide=self.guide,
                num_steps=self.svi_steps,
                learning_rate=self.learning_rate,
                subsample_size=self.subsample_size,
                num_draws=self.num_samples,
                **common,
            )
            idata, self.losses_ = res.posterior, res.losses
        idata = with_names(idata, getattr(self, "class_names_", None), getattr(self, "feature_names_", None))
        self.posterior_ = idata
        self._set_draws(idata)
        self.n_classes_, self.n_features_in_ = n_classes, data.n_features
        # stacklevel 3: the warning points at the caller of fit.
        self._diagnostics = warn_if_unconverged(idata, stacklevel=3)
        return self

    def _max_iter(self) -> int:
        if self.max_iter is not None:
            return int(self.max_iter)
        return DEFAULT_MAX_ITER.get(self.method, DEFAULT_MAX_ITER["em"])

    def _nuts_start(self, data: ModelData) -> dict[str, np.ndarray] | None:
        """Raw starting parameters for NUTS: the MAP (``init="map"``) or None (zeros)."""
        if self.init not in ("map", "zeros"):
            raise ValueError(f"init={self.init!r}: choose 'map' or 'zeros'")
        if self.init == "zeros":
            return None
        from ..inference.map import fit_map
        from ..model.numpyro_model import sum_to_zero_basis

        # A few hundred L-BFGS steps cost less than the warmup iterations they save.
        fit = fit_map(data, self.prior_scale, self.intercept_scale, fit_intercept=self.fit_intercept)
        basis = sum_to_zero_basis(data.n_classes)
        start = {"W_raw": fit.W @ basis}
        if self.fit_intercept:
            start["beta_raw"] = fit.beta @ basis
        return start

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
        from ..inference.diagnostics import diagnose, optimizer_diagnostics

        check_is_fitted(self, "n_classes_")
        if hasattr(self, "posterior_"):
            if getattr(self, "_diagnostics", None) is None:
                self._diagnostics = diagnose(self.posterior_)
            return self._diagnostics
        history, change = getattr(self, "history_", None), None
        if history is not None and len(history) > 1:
            change = float(abs(history[-1] - history[-2]) / max(abs(history[-2]), 1.0))
        return optimizer_diagnostics(
            self.method, self.converged_, self.n_iter_, self._max_iter(), self.tol, relative_change=change
        )

    def _set_draws(self, idata) -> None:
        w = np.asarray(idata.posterior["W"]).reshape((-1,) + idata.posterior["W"].shape[2:])
        b = np.asarray(idata.posterior["beta"]).reshape(w.shape[0], -1)
        self.coef_, self.intercept_ = w.mean(axis=0), b.mean(axis=0)
        keep = np.unique(np.linspace(0, w.shape[0] - 1, min(self.max_predict_draws, w.shape[0])).astype(int))
        self.coef_draws_, self.intercept_draws_ = w[keep], b[keep]

    def _draws(self) -> tuple[np.ndarray, np.ndarray]:
        """(S, d, C), (S, C): posterior draws, or the point estimate as S = 1."""
        if hasattr(self, "coef_draws_"):
            return self.coef_draws_, self.intercept_draws_
        return self.coef_[None], self.intercept_[None]

    def _logits(self, feats: list[np.ndarray]) -> list[np.ndarray]:
        return [x @ self.coef_ + self.intercept_ for x in feats]

    def _draw_proba(self, feats: list[np.ndarray]) -> list[np.ndarray]:
        """B arrays (S, n_b, C) of ``p(y | x, theta_s)`` per posterior draw."""
        w, b = self._draws()
        return [softmax(np.einsum("nd,sdc->snc", x, w) + b[:, None, :], axis=-1) for x in feats]

    def _draw_posteriors(
        self, feats: list[np.ndarray], label_sets: Sequence[Iterable[int]]
    ) -> Iterator[np.ndarray]:
        """Per draw (or the point estimate), the (n, C) DP posteriors ``p(y | Y_b, X_b, theta_s)``.

        All bags' instances concatenated in order; zero outside each bag's set.
        """
        n_inst = [len(x) for x in feats]
        sets = check_label_sets(label_sets, n_inst, self.n_classes_, self.max_labels)
        # Validation and packing depend only on the bags, not on the draw: do them once.
        packed, flat = pack_bags(n_inst, sets), np.concatenate(feats)
        for w, b in zip(*self._draws()):
            yield np.asarray(packed_posteriors(jnp.asarray(flat @ w + b), packed)[1])

    def _inductive_proba(self, feats: list[np.ndarray]) -> list[np.ndarray]:
        return [p.mean(axis=0) for p in self._draw_proba(feats)]

    def predict_proba(
        self, bags: Bags, label_sets: Sequence[Iterable[int]] | None = None
    ) -> list[np.ndarray]:
        """Instance class probabilities; for NUTS/SVI averaged over posterior draws.

        Inductive: ``E_theta p(y = c | x, theta)``. Transductive (given label
        sets): ``E_theta p(y = c | Y_b, X_b, theta)``, the DP posterior averaged
        over draws; zero outside each bag's set.
        """
        if label_sets is None or not hasattr(self, "coef_draws_"):
            return super().predict_proba(bags, label_sets)
        feats = self._check_bags(bags)
        total = sum(self._draw_posteriors(feats, label_sets))
        return np.split(total / len(self.coef_draws_), np.cumsum([len(x) for x in feats])[:-1])

    def predict_interval(
        self, bags: Bags, prob: float = 0.94, label_sets: Sequence[Iterable[int]] | None = None
    ) -> list[np.ndarray]:
        """B arrays (n_b, C, 2): equal-tailed credible intervals ``[lower, upper]`` of class probabilities.

        Inductive: of ``p(y = c | x, theta)``; given label sets, of the DP
        posterior ``p(y = c | Y_b, X_b, theta)``. The bounds are the
        ``(1 - prob) / 2`` and ``(1 + prob) / 2`` quantiles over the posterior
        draws kept in ``coef_draws_`` (``max_predict_draws`` of them), so they
        show how far the weights' uncertainty moves each probability;
        ``predict_proba`` is the mean over the same draws. EM and MAP have one
        point estimate: the interval collapses to it (lower == upper ==
        ``predict_proba``).
        """
        check_credible_mass(prob)
        feats = self._check_bags(bags)
        if label_sets is None:
            draws = self._draw_proba(feats)
        else:
            stacked = np.stack(list(self._draw_posteriors(feats, label_sets)))
            draws = np.split(stacked, np.cumsum([len(x) for x in feats])[:-1], axis=1)
        return [equal_tailed_interval(p, prob) for p in draws]

    def predict_uncertainty(self, bags: Bags) -> list[np.ndarray]:
        """B arrays (n_b, 2): predictive entropy and mutual information (nats).

        Entropy ``H[E_theta p(y | x, theta)]`` is the total uncertainty; the
        mutual information ``H[E p] - E H[p]`` between the label and the
        weights is its epistemic part (zero for EM/MAP point estimates).
        """
        out = []
        for p in self._draw_proba(self._check_bags(bags)):
            mean = p.mean(axis=0)
            total = -np.sum(mean * np.log(np.clip(mean, 1e-300, None)), axis=-1)
            aleatoric = -np.sum(p * np.log(np.clip(p, 1e-300, None)), axis=-1).mean(axis=0)
            out.append(np.stack([total, np.maximum(total - aleatoric, 0.0)], axis=1))
        return out

    def _fitted_metadata(self) -> dict[str, Any]:
        if hasattr(self, "posterior_"):
            return {}
        return {
            "log_posterior_": float(self.log_posterior_),
            "n_iter_": int(self.n_iter_),
            "converged_": bool(self.converged_),
        }

    def _default_name(self) -> str:
        return f"orlr-{self.method}"

    def save(self, path: str | Path | None = None) -> Path:
        """As ``_BagClassifier.save``; NUTS/SVI also write ``posterior.nc`` (netCDF)."""
        folder = super().save(path)
        if hasattr(self, "posterior_"):
            self.posterior_.to_netcdf(str(folder / "posterior.nc"))
        return folder

    def _check_loaded(self, param_file: Path) -> None:
        if self.method in ("nuts", "svi"):
            nc = param_file.parent / "posterior.nc"
            if not nc.is_file():
                raise ValueError(f"{nc} is missing: a {self.method} model keeps its posterior there")
            from ..inference.inference_data import az

            try:
                # Eager: read into memory and close the file, so the model can be saved over its own folder.
                with az.rc_context({"data.load": "eager"}):
                    idata = az.from_netcdf(str(nc))
            except (OSError, ValueError) as err:
                raise ValueError(f"{nc} is unreadable: {err}") from err
            self.posterior_ = idata
            self._set_draws(idata)
            self._diagnostics = None
        if self.coef_.shape != (self.n_features_in_, self.n_classes_) or self.intercept_.shape != (
            self.n_classes_,
        ):
            raise ValueError(f"{param_file} holds arrays whose shapes do not match metadata.json")


class SoftmaxRegression(_BagClassifier):
    """Softmax regression trained on instance labels: the upper-bound baseline.

    l2-regularised multinomial logistic regression (scikit-learn's lbfgs)
    with penalty ``||W||^2 / (2 prior_scale**2)``, i.e. the same prior as ORLR
    (scikit-learn ``C = prior_scale**2``); intercepts unpenalised.
    ``fit(bags, instance_labels)`` takes one int array per bag.
    """

    _saved_arrays = ("coef_", "intercept_")

    def __init__(
        self,
        prior_scale: float = 1.0,
        fit_intercept: bool = True,
        n_classes: int | None = None,
        max_labels: int = DEFAULT_MAX_LABELS,
        max_iter: int = 1000,
    ) -> None:
        self.prior_scale = prior_scale
        self.fit_intercept = fit_intercept
        self.n_classes = n_classes
        self.max_labels = max_labels
        self.max_iter = max_iter

    def fit(self, bags: Bags, instance_labels: Sequence[np.ndarray] | None = None) -> SoftmaxRegression:
        """Fit on instance labels (one int array per bag), or a ``MIMLData`` that has them."""
        x, y, n_classes = self._instance_training_data(bags, instance_labels)
        clf = LogisticRegression(
            C=self.prior_scale**2, fit_intercept=self.fit_intercept, max_iter=self.max_iter
        )
        clf.fit(x, y)
        # Classes absent from training get no weight and a -inf-like intercept.
        self.coef_ = np.zeros((x.shape[1], n_classes))
        self.intercept_ = np.full(n_classes, -50.0)
        cols = clf.classes_.astype(int)
        coef = clf.coef_ if len(cols) > 2 else np.vstack([-clf.coef_, clf.coef_]) / 2
        icpt = clf.intercept_ if len(cols) > 2 else np.array([-1.0, 1.0]) * clf.intercept_ / 2
        self.coef_[:, cols] = coef.T
        self.intercept_[cols] = icpt
        self.n_classes_, self.n_features_in_ = n_classes, x.shape[1]
        return self

    def _inductive_proba(self, feats: list[np.ndarray]) -> list[np.ndarray]:
        return [softmax(x @ self.coef_ + self.intercept_, axis=1) for x in feats]


class MajorityClass(_BagClassifier):
    """Predicts the most frequent training instance label for every instance.

    ``predict_proba`` returns the training class frequencies (so ranking
    metrics and transductive prediction are defined).
    """

    _saved_arrays = ("class_prior_",)

    def __init__(self, n_classes: int | None = None, max_labels: int = DEFAULT_MAX_LABELS) -> None:
        self.n_classes = n_classes
        self.max_labels = max_labels

    def fit(self, bags: Bags, instance_labels: Sequence[np.ndarray] | None = None) -> MajorityClass:
        """Fit on instance labels (one int array per bag), or a ``MIMLData`` that has them."""
        x, y, n_classes = self._instance_training_data(bags, instance_labels)
        counts = np.bincount(y, minlength=n_classes).astype(float)
        # A tiny floor keeps transductive posteriors defined for unseen classes.
        self.class_prior_ = np.maximum(counts / counts.sum(), 1e-12)
        self.n_classes_, self.n_features_in_ = n_classes, x.shape[1]
        return self

    def _inductive_proba(self, feats: list[np.ndarray]) -> list[np.ndarray]:
        return [np.tile(self.class_prior_, (len(x), 1)) for x in feats]


def _flat_instances(
    feats: list[np.ndarray], instance_labels: Sequence[np.ndarray]
) -> tuple[np.ndarray, np.ndarray]:
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
