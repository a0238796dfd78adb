"""The rank-loss Support Instance Machine (SIM) baseline of Briggs et al.: feature scaling and the estimator.

The objective, its subgradient and the jitted optimisation path are in
``sim_objective``; this module adds the authors' feature scaling, the
cross-validated choice of ``lam`` and the scikit-learn estimator ``SIM``.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any, NamedTuple

import numpy as np
from scipy.special import softmax
from sklearn.base import TransformerMixin

from ..dp.validation import DEFAULT_MAX_LABELS, check_label_sets
from ..evaluation.metrics import multi_hot, ranking_loss
from ..seeding import seed_of
from .base import BagClassifier, Bags
from .sim_objective import make_pairs, pad_bags, run_paths

LAMBDA_GRID: tuple[float, ...] = (1e-4, 1e-5, 1e-6, 1e-7, 1e-8, 1e-9)
"""Regularisation strengths searched by cross-validation when ``lam`` is None."""


# -- feature scaling ---------------------------------------------------------


class Scaling(NamedTuple):
    """The authors' feature scaling, fitted on training instances.

    ``z = (x - min) / range`` per feature (0 for features constant in
    training), then ``z - center`` (the training mean of z), then divided by
    ``norm = sqrt(sum_i ||z_i - center||^2)`` over all training instances.
    The global division makes every instance tiny (``||x|| ~ 1 / sqrt(n)``),
    so the useful lam values depend on the training set size; that is the
    authors' choice, and the reason for their very small lam grid.
    """

    min: np.ndarray
    range: np.ndarray
    center: np.ndarray
    norm: float

    @classmethod
    def fit(cls, flat: np.ndarray) -> Scaling:
        """Fit on (n, d) training instances."""
        lo = flat.min(axis=0)
        rng = flat.max(axis=0) - lo
        z = _unit(flat, lo, rng)
        center = z.mean(axis=0)
        norm = float(np.sqrt(np.sum((z - center) ** 2)))
        return cls(lo, rng, center, norm if norm > 0 else 1.0)

    def transform(self, x: np.ndarray) -> np.ndarray:
        """(n, d) -> (n, d) scaled with the training statistics."""
        return (_unit(x, self.min, self.range) - self.center) / self.norm


def _unit(x: np.ndarray, lo: np.ndarray, rng: np.ndarray) -> np.ndarray:
    """Min-max to [0, 1] on training data; constant features map to 0 (also on new data)."""
    safe = np.where(rng > 0, rng, 1.0)
    return np.where(rng > 0, (x - lo) / safe, 0.0)


# -- estimator ---------------------------------------------------------------


class SIM(BagClassifier):
    """Rank-loss Support Instance Machine (Briggs et al. 2012), fitted from bag label sets.

    Args:
        lam: l2 strength; None selects it from ``LAMBDA_GRID`` by bag-level
            K-fold cross-validation on the training bags, minimising the
            held-out bag ranking loss with bag scores ``max_q w_c . x_bq``
            (instance labels are not available to a MIML learner).
        cv: number of folds for the lam search.
        n_outer: alternations (support instances re-frozen each time).
        n_inner: Pegasos steps per alternation.
        n_classes: C (default: largest label + 1).
        max_labels: largest label set accepted (validation shared with the
            other estimators; SIM itself has no per-set cost).
        random_state: seed of the fold assignment (the optimisation itself is
            deterministic; None: seed 0, ``seeding``).
        features: the instance feature map (``orlr_ppl.features``), fitted
            on the training instances and applied before every prediction, as
            the other estimators do. The authors' scaling below is itself
            unchanged by a per-feature rescaling, so for SIM ``"standard"``
            changes the arithmetic, not the model; ``"quantile-normal"`` does
            change the model.

    Label sets: per bag, class indices or class names (``class_names_``: the
    sorted names), or a (B, C) 0/1 label matrix, as for ``ORLR``.

    Fitted attributes: ``coef_`` (d, C) the weights, in the scaled feature
    space; ``feature_map_`` the fitted feature map, applied before the scaling;
    ``lam_``; ``cv_scores_`` (len(LAMBDA_GRID),) mean held-out ranking loss
    per lam (None when ``lam`` was given); ``objective_`` the best true
    objective; ``objective_path_`` (n_outer * n_inner + 1,) the true objective
    at ``W = 0`` and after each step; ``scale_min_``, ``scale_range_``,
    ``center_`` (d,) and ``norm_`` (scalar) the feature scaling (of the
    standardised features);
    ``n_classes_``, ``n_features_in_``.

    Predictions. Inductive ``predict_proba`` is the softmax over classes of
    ``w_c . x``: a monotone transform of the scores, good for ranking and
    argmax, *not* calibrated probabilities (SIM is not a probabilistic
    model). ``bag_scores`` are the raw ``max_q w_c . x_bq`` (the bag scores
    of the lam search). Transductive prediction (given label sets) restricts
    the argmax / softmax to the bag's labels; it does not use the ORLR DP.
    """

    _saved_arrays = {
        "coef_": ("d", "C"),
        "scale_min_": ("d",),
        "scale_range_": ("d",),
        "center_": ("d",),
        "norm_": (),
    }
    # predict_proba is a softmax of margins, not a probability model: bag_scores(rule="model") refuses.
    _calibrated = False

    def __init__(
        self,
        lam: float | None = None,
        cv: int = 3,
        n_outer: int = 10,
        n_inner: int = 100,
        n_classes: int | None = None,
        max_labels: int = DEFAULT_MAX_LABELS,
        random_state: int | None = 0,
        features: str | TransformerMixin | None = "standard",
    ) -> None:
        self.lam = lam
        self.cv = cv
        self.n_outer = n_outer
        self.n_inner = n_inner
        self.n_classes = n_classes
        self.max_labels = max_labels
        self.random_state = random_state
        self.features = features

    # -- fitting ---------------------------------------------------------------

    def fit(self, bags: Bags, label_sets: Sequence[Iterable[Any]] | np.ndarray | None = None) -> SIM:
        """Fit from bags (B arrays (n_b, d)) and label sets, or from one ``MIMLData``."""
        feats, label_sets, n_classes = self._label_set_training_data(bags, label_sets)  # standardised
        if self.lam is not None and not (np.isfinite(self.lam) and self.lam > 0):
            raise ValueError(f"lam={self.lam}: must be a positive number (or None to cross-validate)")
        if int(self.n_outer) < 1 or int(self.n_inner) < 1:
            raise ValueError(f"n_outer={self.n_outer}, n_inner={self.n_inner}: both must be at least 1")
        sets = check_label_sets(label_sets, [len(x) for x in feats], n_classes, self.max_labels)
        y = multi_hot(sets, n_classes)
        raw, mask = pad_bags(feats)

        if self.lam is None:
            self.lam_, self.cv_scores_ = self._select_lambda(feats, raw, mask, y)
        else:
            self.lam_, self.cv_scores_ = float(self.lam), None

        scaling = Scaling.fit(np.concatenate(feats))
        x = _scaled(raw, mask, scaling)
        (res,) = run_paths([x], mask, [make_pairs(y)], [self.lam_], self.n_outer, self.n_inner)
        self.coef_ = np.asarray(res.W, dtype=np.float64)
        self.objective_ = float(res.objective)
        self.objective_path_ = np.asarray(res.history, dtype=np.float64)
        self.scale_min_, self.scale_range_ = scaling.min, scaling.range
        self.center_, self.norm_ = scaling.center, np.asarray(scaling.norm)
        self.n_classes_ = n_classes
        return self

    def _select_lambda(
        self, feats: list[np.ndarray], raw: np.ndarray, mask: np.ndarray, y: np.ndarray
    ) -> tuple[float, np.ndarray]:
        """Bag-level K-fold CV over ``LAMBDA_GRID``; returns (best lam, mean held-out rank loss per lam).

        Every fold keeps all B bags in its arrays, with the held-out bags at
        pair weight 0, so all (fold, lam) problems and the final fit share
        one shape: one compilation. Each fold's scaling is fitted
        on its own training bags only.
        """
        n_bags, n_folds = len(feats), int(self.cv)
        if not 2 <= n_folds <= n_bags:
            raise ValueError(f"cv={self.cv}: need 2 <= cv <= {n_bags} bags to cross-validate lam")
        perm = np.random.default_rng(seed_of(self.random_state)).permutation(n_bags)
        folds = [np.sort(f) for f in np.array_split(perm, n_folds)]
        lams = np.asarray(LAMBDA_GRID)
        xs, pairs = [], []
        for test in folds:
            train = np.setdiff1d(np.arange(n_bags), test)
            scaling = Scaling.fit(np.concatenate([feats[b] for b in train]))
            xs.append(_scaled(raw, mask, scaling))
            pairs.append(make_pairs(y, np.isin(np.arange(n_bags), train)))
        # Problem p is fold p // L with lam p % L.
        rep = len(lams)
        res = run_paths(
            [x for x in xs for _ in range(rep)],
            mask,
            [p for p in pairs for _ in range(rep)],
            list(lams) * n_folds,
            self.n_outer,
            self.n_inner,
        )
        losses = np.zeros((n_folds, rep))
        for k, test in enumerate(folds):
            for i in range(rep):
                W = np.asarray(res[k * rep + i].W, dtype=np.float64)
                losses[k, i] = ranking_loss(y[test], _max_scores(xs[k][test], mask[test], W))
        cv_scores = losses.mean(axis=0)
        # argmin takes the first minimum: on a tie, the larger (safer) lam.
        return float(lams[int(np.argmin(cv_scores))]), cv_scores

    # -- prediction hooks (see BagClassifier) ---------------------------------

    def _scaling(self) -> Scaling:
        return Scaling(self.scale_min_, self.scale_range_, self.center_, float(self.norm_))

    def _scores(self, feats: list[np.ndarray]) -> list[np.ndarray]:
        """B arrays (n_b, C) of ``w_c . x`` with the training scaling applied."""
        scaling = self._scaling()
        return [scaling.transform(x) @ self.coef_ for x in feats]

    def decision_function(self, bags: Bags) -> list[np.ndarray]:
        """B arrays (n_b, C) of instance scores ``w_c . x`` (training scaling applied)."""
        return self._scores(self._check_bags(bags))

    def _inductive_proba(self, feats: list[np.ndarray]) -> list[np.ndarray]:
        """Softmax of ``w_c . x`` over all classes: monotone in the scores, not calibrated."""
        return [softmax(s, axis=1) for s in self._scores(feats)]

    def _transductive_proba(self, feats: list[np.ndarray], sets: list[np.ndarray]) -> list[np.ndarray]:
        """Softmax of ``w_c . x`` over the bag's labels ``Y_b`` only; exactly 0 outside them (no DP)."""
        out = []
        for s, labels in zip(self._scores(feats), sets):
            p = np.zeros_like(s)
            p[:, labels] = softmax(s[:, labels], axis=1)
            out.append(p)
        return out

    def _ranking_scores(self, feats: list[np.ndarray]) -> list[np.ndarray]:
        """The raw scores: bag scores ``max_q w_c . x_bq``, as in the lam search."""
        return self._scores(feats)

    # -- persistence -------------------------------------------------------------

    def _fitted_metadata(self) -> dict[str, Any]:
        cv = None if self.cv_scores_ is None else [float(v) for v in self.cv_scores_]
        return {"lam_": float(self.lam_), "objective_": float(self.objective_), "cv_scores_": cv}


def _scaled(raw: np.ndarray, mask: np.ndarray, scaling: Scaling) -> np.ndarray:
    """Scale a padded (B, N, d) array; padding stays exactly 0."""
    return np.where(mask[..., None], scaling.transform(raw), 0.0)


def _max_scores(x: np.ndarray, mask: np.ndarray, W: np.ndarray) -> np.ndarray:
    """(B, C) ``max_q w_c . x_bq`` over real instances of padded bags."""
    s = np.einsum("bnd,dc->bnc", x, W)
    return np.where(mask[..., None], s, -np.inf).max(axis=1)
