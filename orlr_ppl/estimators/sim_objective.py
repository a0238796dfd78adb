"""The rank-loss Support Instance Machine (SIM) objective and its optimisation path: pure JAX.

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
(``Pairs``), and the whole path (``n_outer * n_inner`` steps) is one jitted
``lax.scan``; ``run_paths`` runs many problems of one array shape (one
compilation), a thread per core. The estimator is ``sim.SIM``.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

Array = jax.Array


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


def run_paths(
    xs: Sequence[np.ndarray],
    mask: np.ndarray,
    pairs: Sequence[Pairs],
    lams: Sequence[float],
    n_outer: int,
    n_inner: int,
) -> list[SIMPath]:
    """``sim_path`` on P problems sharing one shape (so one compilation), in parallel threads.

    Args:
        xs: P padded (B, N, d) feature arrays (numpy). mask: (B, N) bool,
            shared. pairs: P ``Pairs`` (numpy, from ``make_pairs``).
        lams: P l2 strengths. n_outer, n_inner: as ``sim_path``.
    Returns:
        P ``SIMPath`` results, in order.

    XLA on CPU runs these small ops on about one core; the compiled calls
    release the GIL, so a thread per core runs that many problems at once
    (1.5-3x faster than one after another on 2 cores, measured). Not
    ``vmap``: batched small contractions were no faster per problem on
    CPU, and several times slower for a batch of one.
    """
    jmask = jnp.asarray(mask)

    def one(i: int) -> SIMPath:
        x, pos, pos_mask, neg, weight, lam = _to_jax([xs[i], *pairs[i], np.asarray(lams[i])])
        res = sim_path(x, jmask, Pairs(pos, pos_mask, neg, weight), lam, int(n_outer), int(n_inner))
        return jax.block_until_ready(res)

    # The first problem runs alone: it compiles (when the shape is new) once, not once per thread.
    first = one(0)
    workers = max(1, min(len(xs) - 1, os.cpu_count() or 1))
    if workers == 1:
        return [first, *(one(i) for i in range(1, len(xs)))]
    with ThreadPoolExecutor(workers) as pool:
        return [first, *pool.map(one, range(1, len(xs)))]


def _to_jax(arrays: list[np.ndarray]) -> list[Array]:
    """Masks stay bool, indices int32; floats become JAX's default (float32 unless ``jax_enable_x64``)."""
    return [jnp.asarray(a if a.dtype.kind in "bi" else a.astype(np.float64)) for a in arrays]
