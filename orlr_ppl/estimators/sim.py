"""The rank-loss Support Instance Machine (SIM) baseline.

Briggs, Fern, Raich & Lou, "Rank-loss support instance machines for MIML
instance annotation" (KDD 2012). One linear scorer per class, ``s_c(x) =
w_c . x`` (no intercept: the authors' feature scaling centres the data).
For bag ``b`` and class ``c`` the *support instance* is the softmax-weighted
mean of the bag's instances,

    x_hat_bc = sum_q alpha_bqc x_bq,   alpha_b.c = softmax_q(w_c . x_bq),

and the bag-level class score is ``f_bc = w_c . x_hat_bc``. The objective is
a pairwise rank loss over the bag's present (``Y_b``) and absent
(``Ybar_b``) classes:

    F(W) = lam/2 ||W||^2
           + sum_b sum_{j in Y_b} sum_{k in Ybar_b} max(0, 1 - f_bj + f_bk) / (B |Y_b| |Ybar_b|),

where bags with ``Ybar_b`` empty contribute nothing (``B`` still counts them).

``F`` is not convex (the support instances move with ``W``), so the authors
alternate heuristically: freeze the support instances at the current ``W``,
which leaves a convex rank-SVM, and take Pegasos projected subgradient steps
on it, warm-started; repeat. The first freeze is at ``W = 0``, where every
``alpha`` is uniform, i.e. the bag mean instance. The iterate with the lowest
*true* (non-frozen) objective is returned.

Everything after validation is vectorised: bags are padded to ``(B, N, d)``
with a mask, label sets become (present-class, absent-class) pair arrays
(``Pairs``), and the whole path
(``n_outer * n_inner`` steps) is one jitted ``lax.scan``; cross-validation
runs its (fold, lambda) problems at one array shape (one compilation), a
thread per core.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from scipy.special import softmax
from sklearn.utils.validation import check_is_fitted

from ..data.container import MIMLData
from ..dp.validation import DEFAULT_MAX_LABELS, check_features, check_label_sets
from ..evaluation.metrics import multi_hot, ranking_loss
from .base import _BagClassifier, _check_bag_score_rule, _fit_inputs, _infer_n_classes, _shape_of

Array = jax.Array

LAMBDA_GRID: tuple[float, ...] = (1e-4, 1e-5, 1e-6, 1e-7, 1e-8, 1e-9)
"""Regularisation strengths searched by cross-validation when ``lam`` is None."""


# -- data layout -------------------------------------------------------------


def pad_bags(bags: Sequence[np.ndarray], n_max: int | None = None) -> tuple[np.ndarray, np.ndarray]:
    """Ragged bags to a padded array and a mask.

    Args:
        bags: B arrays (n_b, d).
        n_max: padded instance count (default: the largest bag).
    Returns:
        x: (B, N, d) features, zero on padding.
        mask: (B, N) bool, True on real instances.
    """
    n = np.array([len(x) for x in bags])
    n_max = int(n.max()) if n_max is None else int(n_max)
    d = bags[0].shape[1]
    x = np.zeros((len(bags), n_max, d), dtype=np.result_type(*{b.dtype for b in bags}, np.float32))
    mask = np.arange(n_max)[None, :] < n[:, None]
    x[mask] = np.concatenate(bags)  # row-major fill matches the bags' instance order
    return x, mask


class Pairs(NamedTuple):
    """The (present, absent) class pairs of every bag, as arrays (a pytree).

    Present classes are listed per bag (padded to the largest set, K), so
    pair arrays are (B, K, C) rather than (B, C, C): K is a few labels, C
    may be dozens of classes.

    Attributes:
        pos: (B, K) int32, each bag's present classes (0 on padding).
        pos_mask: (B, K) float 0/1, real entries of ``pos``.
        neg: (B, C) float 0/1, the absent classes ``Ybar_b``.
        weight: (B,) float, ``1 / (B |Y_b| |Ybar_b|)`` per pair of bag b.
    """

    pos: Array
    pos_mask: Array
    neg: Array
    weight: Array


def make_pairs(y: np.ndarray, active: np.ndarray | None = None) -> Pairs:
    """``Pairs`` (numpy, float64) from a (B, C) 0/1 label matrix.

    Args:
        y: (B, C) 0/1 label matrix.
        active: (B,) bool, the bags that count (default all). Inactive bags
            get weight 0 and are left out of ``B``: cross-validation keeps the
            held-out bags in the arrays (so every fold has one shape) this way.
    Weights are 0 for inactive bags and for bags whose set is empty or full
    (no pairs); ``B`` counts every active bag, as in the objective.
    """
    y = np.asarray(y) != 0
    active = np.ones(len(y), bool) if active is None else np.asarray(active, bool)
    n_pos = y.sum(axis=1)
    k = max(int(n_pos.max()), 1)
    # A stable sort puts each bag's present classes first, in increasing order.
    pos = np.argsort(~y, axis=1, kind="stable")[:, :k].astype(np.int32)
    pos_mask = (np.arange(k)[None, :] < n_pos[:, None]).astype(np.float64)
    pairs = n_pos * (y.shape[1] - n_pos)
    weight = np.zeros(len(y))
    ok = active & (pairs > 0)
    weight[ok] = 1.0 / (active.sum() * pairs[ok])
    return Pairs(np.where(pos_mask > 0, pos, 0).astype(np.int32), pos_mask, (~y).astype(np.float64), weight)


# -- objective and subgradient (JAX, dtype-generic) --------------------------


def _instance_scores(W: Array, x: Array) -> Array:
    """(B, N, C) ``w_c . x_bq``."""
    return jnp.einsum("bnd,dc->bnc", x, W)


def _alphas(scores: Array, mask: Array) -> Array:
    """(B, N, C) softmax over each bag's real instances; exactly 0 on padding.

    Written out (max-shift, exp, normalise) rather than ``jax.nn.softmax``:
    about twice as fast on CPU here, and this runs at every step.
    """
    m = jnp.max(jnp.where(mask[..., None], scores, -jnp.inf), axis=1, keepdims=True)
    e = jnp.where(mask[..., None], jnp.exp(scores - m), 0.0)
    return e / jnp.sum(e, axis=1, keepdims=True)


def support_instances(W: Array, x: Array, mask: Array) -> Array:
    """(B, C, d) softmax support instances ``x_hat_bc`` at weights W (d, C).

    At ``W = 0`` every ``alpha`` is uniform: ``x_hat_bc`` is the bag mean.
    """
    return jnp.einsum("bnc,bnd->bcd", _alphas(_instance_scores(W, x), mask), x)


def bag_class_scores(W: Array, x: Array, mask: Array) -> Array:
    """(B, C) ``f_bc = w_c . x_hat_bc`` with the support instances of W itself.

    Computed as ``sum_q alpha_bqc (w_c . x_bq)``, which never forms ``x_hat``.
    """
    s = _instance_scores(W, x)
    m = jnp.max(jnp.where(mask[..., None], s, -jnp.inf), axis=1, keepdims=True)
    # Padding gets weight exactly 0 (s is finite there: x = 0), so it adds nothing, not nan.
    e = jnp.where(mask[..., None], jnp.exp(s - m), 0.0)
    return jnp.sum(e * s, axis=1) / jnp.sum(e, axis=1)


def _margins(f: Array, pairs: Pairs) -> tuple[Array, Array]:
    """(B, K, C) margins ``1 - f_bj + f_bk`` (j the K present slots, k any class) and pair validity."""
    f_pos = jnp.take_along_axis(f, pairs.pos, axis=1)
    margin = 1.0 - f_pos[:, :, None] + f[:, None, :]
    valid = pairs.pos_mask[:, :, None] * pairs.neg[:, None, :]
    return margin, valid


def rank_loss_from_scores(f: Array, pairs: Pairs) -> Array:
    """Scalar ``sum_b weight_b sum_{j in Y_b, k not in Y_b} max(0, 1 - f_bj + f_bk)``.

    Args:
        f: (B, C) bag-class scores; pairs: from ``make_pairs``.
    """
    margin, valid = _margins(f, pairs)
    return jnp.sum(pairs.weight * jnp.sum(valid * jnp.maximum(margin, 0.0), axis=(1, 2)))


def objective(W: Array, x: Array, mask: Array, pairs: Pairs, lam: float | Array) -> Array:
    """The true SIM objective ``F(W)`` (support instances recomputed from W).

    Args:
        W: (d, C) weights. x: (B, N, d) padded features. mask: (B, N) bool.
        pairs: the label pairs (``make_pairs``). lam: l2 strength.
    """
    f = bag_class_scores(W, x, mask)
    return 0.5 * lam * jnp.sum(W * W) + rank_loss_from_scores(f, pairs)


def frozen_objective(W: Array, xhat: Array, pairs: Pairs, lam: float | Array) -> Array:
    """The convex surrogate with support instances xhat (B, C, d) held fixed."""
    f = jnp.einsum("bcd,dc->bc", xhat, W)
    return 0.5 * lam * jnp.sum(W * W) + rank_loss_from_scores(f, pairs)


def frozen_subgradient(W: Array, xhat: Array, pairs: Pairs, lam: float | Array) -> Array:
    """(d, C) subgradient of ``frozen_objective`` at W.

    Each violated pair (j present, k absent: ``1 - f_bj + f_bk > 0``) adds
    ``-x_hat_bj`` to class j's gradient and ``+x_hat_bk`` to class k's, times
    the bag's pair weight. Per bag and class this is a count: ``a_bc =
    weight_b (#violated j with k = c  -  #violated k with j = c)``, so the sum
    is one contraction ``a . x_hat``. Pairs exactly at the margin get 0 (a
    valid subgradient).
    """
    f = jnp.einsum("bcd,dc->bc", xhat, W)
    margin, valid = _margins(f, pairs)
    active = valid * (margin > 0)
    as_absent = active.sum(axis=1)  # (B, C): violated present j per absent k = c
    as_present_slot = active.sum(axis=2)  # (B, K): violated absent k per present slot
    rows = jnp.arange(f.shape[0])[:, None]
    # Padded slots point at class 0 with a count of exactly 0, so the scatter leaves it alone.
    as_present = jnp.zeros_like(f).at[rows, pairs.pos].add(as_present_slot)
    return lam * W + jnp.einsum("bc,bcd->dc", pairs.weight[:, None] * (as_absent - as_present), xhat)


class SIMPath(NamedTuple):
    """Result of ``sim_path``.

    Attributes:
        W: (d, C) the iterate with the lowest true objective (``W = 0`` included).
        objective: scalar, its objective.
        history: (n_outer * n_inner + 1,) the true objective at ``W = 0`` and
            after every projected step.
        last: (d, C) the final iterate (for diagnostics and tests).
    """

    W: Array
    objective: Array
    history: Array
    last: Array


def _path(x: Array, mask: Array, pairs: Pairs, lam: Array, n_outer: int = 10, n_inner: int = 100) -> SIMPath:
    """Alternating Pegasos optimisation of the SIM objective from ``W = 0``.

    Outer iteration t freezes the support instances at the current iterate
    (t = 0: ``W = 0``, the bag means) and takes ``n_inner`` full-batch Pegasos
    steps ``W <- Proj(W - eta_tau g)``, ``eta_tau = 1 / (lam tau)``, onto the
    ball ``||W|| <= sqrt(2 / lam)``.

    The step counter tau is *global* (1 .. n_outer * n_inner), not restarted
    per outer iteration: Pegasos' step at tau = 1 is ``W <- (1 - 1) W - g / lam``,
    which would throw the warm start away at every restart, and a global
    counter keeps the decaying step sizes that Pegasos' analysis needs.

    The true objective is evaluated after every step (instance scores and a
    softmax over (B, N, C): a few times a frozen step, still cheap) and the
    best iterate is kept.

    Args:
        x: (B, N, d) padded features. mask: (B, N). pairs: the label pairs
            (``make_pairs``, as JAX arrays). lam: scalar l2 strength.
        n_outer, n_inner: static loop lengths.
    """
    d, C = x.shape[2], pairs.neg.shape[1]
    W0 = jnp.zeros((d, C), x.dtype)
    radius = jnp.sqrt(2.0 / lam)
    obj0 = objective(W0, x, mask, pairs, lam)

    def step(carry, _):
        W, tau, xhat, best_W, best_obj = carry
        tau = tau + 1
        W = W - frozen_subgradient(W, xhat, pairs, lam) / (lam * tau)
        norm = jnp.sqrt(jnp.sum(W * W))
        W = W * jnp.minimum(1.0, radius / jnp.maximum(norm, jnp.finfo(x.dtype).tiny))
        obj = objective(W, x, mask, pairs, lam)
        better = obj < best_obj  # strict: ties keep the earlier iterate
        best_W = jnp.where(better, W, best_W)
        best_obj = jnp.where(better, obj, best_obj)
        return (W, tau, xhat, best_W, best_obj), obj

    def outer(carry, _):
        W, tau, best_W, best_obj = carry
        xhat = support_instances(W, x, mask)  # frozen for this outer iteration
        (W, tau, _, best_W, best_obj), objs = jax.lax.scan(
            step, (W, tau, xhat, best_W, best_obj), None, length=n_inner
        )
        return (W, tau, best_W, best_obj), objs

    init = (W0, jnp.zeros((), x.dtype), W0, obj0)
    (last, _, best_W, best_obj), objs = jax.lax.scan(outer, init, None, length=n_outer)
    return SIMPath(best_W, best_obj, jnp.concatenate([obj0[None], objs.reshape(-1)]), last)


sim_path = jax.jit(_path, static_argnames=("n_outer", "n_inner"))


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


class SIM(_BagClassifier):
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
            deterministic).

    Fitted attributes: ``coef_`` (d, C) the weights, in the scaled feature
    space; ``lam_``; ``cv_scores_`` (len(LAMBDA_GRID),) mean held-out ranking
    loss per lam (None when ``lam`` was given); ``objective_`` the best true
    objective; ``objective_path_`` (n_outer * n_inner + 1,) the true objective
    at ``W = 0`` and after each step; ``scale_min_``, ``scale_range_``,
    ``center_`` (d,) and ``norm_`` (scalar) the feature scaling;
    ``n_classes_``, ``n_features_in_``.

    Predictions. Inductive ``predict_proba`` is the softmax over classes of
    ``w_c . x``: a monotone transform of the scores, good for ranking and
    argmax, *not* calibrated probabilities (SIM is not a probabilistic
    model). ``bag_scores`` are the raw ``max_q w_c . x_bq`` (the bag scores
    of the lam search). Transductive prediction (given label sets) restricts
    the argmax / softmax to the bag's labels; it does not use the ORLR DP.
    """

    _saved_arrays = ("coef_", "scale_min_", "scale_range_", "center_", "norm_")

    def __init__(
        self,
        lam: float | None = None,
        cv: int = 3,
        n_outer: int = 10,
        n_inner: int = 100,
        n_classes: int | None = None,
        max_labels: int = DEFAULT_MAX_LABELS,
        random_state: int | None = 0,
    ) -> None:
        self.lam = lam
        self.cv = cv
        self.n_outer = n_outer
        self.n_inner = n_inner
        self.n_classes = n_classes
        self.max_labels = max_labels
        self.random_state = random_state

    # -- fitting ---------------------------------------------------------------

    def fit(
        self, bags: Sequence[np.ndarray] | MIMLData, label_sets: Sequence[Iterable[int]] | None = None
    ) -> SIM:
        """Fit from bags (B arrays (n_b, d)) and label sets, or from one ``MIMLData``."""
        bags, label_sets, n_classes_hint = _fit_inputs(self, bags, label_sets, "label_sets")
        if self.lam is not None and not (np.isfinite(self.lam) and self.lam > 0):
            raise ValueError(f"lam={self.lam}: must be a positive number (or None to cross-validate)")
        if int(self.n_outer) < 1 or int(self.n_inner) < 1:
            raise ValueError(f"n_outer={self.n_outer}, n_inner={self.n_inner}: both must be at least 1")
        feats = check_features(bags)
        n_classes = _infer_n_classes(label_sets, n_classes_hint)
        sets = check_label_sets(label_sets, [len(x) for x in feats], n_classes, self.max_labels)
        y = multi_hot(sets, n_classes)
        raw, mask = pad_bags(feats)

        if self.lam is None:
            self.lam_, self.cv_scores_ = self._select_lambda(feats, raw, mask, y)
        else:
            self.lam_, self.cv_scores_ = float(self.lam), None

        scaling = Scaling.fit(np.concatenate(feats))
        x = _scaled(raw, mask, scaling)
        (res,) = self._run([x], mask, [make_pairs(y)], [self.lam_])
        self.coef_ = np.asarray(res.W, dtype=np.float64)
        self.objective_ = float(res.objective)
        self.objective_path_ = np.asarray(res.history, dtype=np.float64)
        self.scale_min_, self.scale_range_ = scaling.min, scaling.range
        self.center_, self.norm_ = scaling.center, np.asarray(scaling.norm)
        self.n_classes_, self.n_features_in_ = n_classes, feats[0].shape[1]
        self.training_shape_ = _shape_of(feats)
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
        perm = np.random.default_rng(self.random_state).permutation(n_bags)
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
        res = self._run(
            [x for x in xs for _ in range(rep)],
            mask,
            [p for p in pairs for _ in range(rep)],
            list(lams) * n_folds,
        )
        losses = np.zeros((n_folds, rep))
        for k, test in enumerate(folds):
            for i in range(rep):
                W = np.asarray(res[k * rep + i].W, dtype=np.float64)
                losses[k, i] = ranking_loss(y[test], _max_scores(xs[k][test], mask[test], W))
        cv_scores = losses.mean(axis=0)
        # argmin takes the first minimum: on a tie, the larger (safer) lam.
        return float(lams[int(np.argmin(cv_scores))]), cv_scores

    def _run(
        self, xs: list[np.ndarray], mask: np.ndarray, pairs: list[Pairs], lams: list[float]
    ) -> list[SIMPath]:
        """``sim_path`` on P problems sharing one shape (so one compilation), in parallel threads.

        XLA on CPU runs these small ops on about one core; the compiled calls
        release the GIL, so a thread per core runs that many problems at once
        (1.5-3x faster than one after another on 2 cores, measured). Not
        ``vmap``: batched small contractions were no faster per problem on
        CPU, and several times slower for a batch of one.
        """
        jmask = jnp.asarray(mask)

        def one(i: int) -> SIMPath:
            x, pos, pos_mask, neg, weight, lam = _to_jax([xs[i], *pairs[i], np.asarray(lams[i])])
            res = sim_path(
                x, jmask, Pairs(pos, pos_mask, neg, weight), lam, int(self.n_outer), int(self.n_inner)
            )
            return jax.block_until_ready(res)

        # The first problem runs alone: it compiles (when the shape is new) once, not once per thread.
        first = one(0)
        workers = max(1, min(len(xs) - 1, os.cpu_count() or 1))
        if workers == 1:
            return [first, *(one(i) for i in range(1, len(xs)))]
        with ThreadPoolExecutor(workers) as pool:
            return [first, *pool.map(one, range(1, len(xs)))]

    # -- prediction ------------------------------------------------------------

    def _scaling(self) -> Scaling:
        return Scaling(self.scale_min_, self.scale_range_, self.center_, float(self.norm_))

    def _scores(self, feats: list[np.ndarray]) -> list[np.ndarray]:
        scaling = self._scaling()
        return [scaling.transform(x) @ self.coef_ for x in feats]

    def decision_function(self, bags: Sequence[np.ndarray]) -> list[np.ndarray]:
        """B arrays (n_b, C) of instance scores ``w_c . x`` (training scaling applied)."""
        return self._scores(self._check_bags(bags))

    def _inductive_proba(self, feats: list[np.ndarray]) -> list[np.ndarray]:
        return [softmax(s, axis=1) for s in self._scores(feats)]

    def predict_proba(
        self, bags: Sequence[np.ndarray], label_sets: Sequence[Iterable[int]] | None = None
    ) -> list[np.ndarray]:
        """B arrays (n_b, C): softmax of ``w_c . x`` over classes (inductive) or over the bag's labels.

        A monotone transform of the SIM scores for ranking, not calibrated
        probabilities. Given label sets (transductive), the softmax runs over
        ``Y_b`` only and is exactly 0 outside it.
        """
        feats = self._check_bags(bags)
        scores = self._scores(feats)
        if label_sets is None:
            return [softmax(s, axis=1) for s in scores]
        sets = check_label_sets(label_sets, [len(x) for x in feats], self.n_classes_, self.max_labels)
        out = []
        for s, labels in zip(scores, sets):
            p = np.zeros_like(s)
            p[:, labels] = softmax(s[:, labels], axis=1)
            out.append(p)
        return out

    def predict(
        self, bags: Sequence[np.ndarray], label_sets: Sequence[Iterable[int]] | None = None
    ) -> list[np.ndarray]:
        """B int arrays (n_b,): argmax of ``w_c . x`` over all classes, or over ``Y_b`` given label sets."""
        feats = self._check_bags(bags)
        scores = self._scores(feats)
        if label_sets is None:
            return [s.argmax(axis=1) for s in scores]
        sets = check_label_sets(label_sets, [len(x) for x in feats], self.n_classes_, self.max_labels)
        return [labels[s[:, labels].argmax(axis=1)] for s, labels in zip(scores, sets)]

    def bag_scores(self, bags: Sequence[np.ndarray], rule: str = "max") -> np.ndarray:
        """(B, C) per-class bag scores ``max_q w_c . x_bq`` (SIM's bag ranking, used to select lam).

        Only ``rule="max"``: SIM's scores are margins, not probabilities, so the
        model-based ``P(c in Y_b)`` of the probabilistic estimators is undefined.
        """
        _check_bag_score_rule(rule)
        if rule == "model":
            raise ValueError(
                "rule='model' needs instance probabilities, and SIM's scores are margins (its softmax is "
                "not calibrated): use rule='max' for SIM"
            )
        return np.stack([s.max(axis=0) for s in self.decision_function(bags)])

    def _fitted_metadata(self) -> dict[str, Any]:
        cv = None if self.cv_scores_ is None else [float(v) for v in self.cv_scores_]
        return {"lam_": float(self.lam_), "objective_": float(self.objective_), "cv_scores_": cv}

    def _check_loaded(self, param_file) -> None:
        check_is_fitted(self, "coef_")
        d, C = self.n_features_in_, self.n_classes_
        shapes = [self.coef_.shape, self.scale_min_.shape, self.scale_range_.shape, self.center_.shape]
        if shapes != [(d, C), (d,), (d,), (d,)] or np.shape(self.norm_) != ():
            raise ValueError(f"{param_file} holds arrays whose shapes do not match metadata.json")


def _scaled(raw: np.ndarray, mask: np.ndarray, scaling: Scaling) -> np.ndarray:
    """Scale a padded (B, N, d) array; padding stays exactly 0."""
    return np.where(mask[..., None], scaling.transform(raw), 0.0)


def _max_scores(x: np.ndarray, mask: np.ndarray, W: np.ndarray) -> np.ndarray:
    """(B, C) ``max_q w_c . x_bq`` over real instances of padded bags."""
    s = np.einsum("bnd,dc->bnc", x, W)
    return np.where(mask[..., None], s, -np.inf).max(axis=1)


def _to_jax(arrays: list[np.ndarray]) -> list[Array]:
    """Masks stay bool, indices int32; floats become JAX's default (float32 unless ``jax_enable_x64``)."""
    return [jnp.asarray(a if a.dtype.kind in "bi" else a.astype(np.float64)) for a in arrays]
