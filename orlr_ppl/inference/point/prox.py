"""Proximal gradient for the l2,1 (group Laplace) prior: EM's M-step and the MAP.

The objective is ``F(theta) = f(theta) + lam * sum_j ||W_raw[j]||`` with ``f``
smooth (the negative log likelihood, or EM's ``-Q``, under a flat prior on
``W_raw`` and the usual priors on everything else) and ``lam = 1 / scale``
(``model.priors.GroupLaplace``). A proximal gradient step::

    theta+ = prox_{t lam}(theta - t grad f(theta)),
    prox_{t lam}(W_raw)[j] = W_raw[j] * max(0, 1 - t lam / ||W_raw[j]||)

(group soft-thresholding, rows only; intercepts and the leak take the plain
gradient step) is accepted when ``f(theta+) <= f(theta) + <grad, theta+ -
theta> + ||theta+ - theta||^2 / (2 t)``, else ``t`` halves (backtracking). Each
accepted step lowers ``F``; rows whose gradient is small are set exactly to
zero, which is what makes the fit sparse (a gradient step on the
non-smooth penalty never reaches 0).

``proximal_steps`` takes a fixed number of such steps (EM's M-step), and
``fista`` runs the accelerated version with a restart whenever ``F`` rises
(O'Donoghue & Candes, 2015) until the gradient mapping, the first-order
residual, is below a tolerance (the MAP). Both are pure ``lax.while_loop`` programs over a
parameter dict.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from ...model.priors import row_norms

Array = jax.Array
Params = dict[str, Array]
SmoothLoss = Callable[[Params], Array]

MAX_HALVINGS = 60
"""Halvings a backtracking search may try before giving up on the step."""


def group_soft_threshold(w: Array, threshold: Array | float) -> Array:
    """(d, k) ``w`` with each row shrunk towards 0 by ``threshold`` in l2 norm (to 0 if shorter).

    The proximal map of ``threshold * sum_j ||w[j]||``.
    """
    norms = row_norms(w)
    factor = jnp.maximum(0.0, 1.0 - threshold / jnp.where(norms > 0, norms, 1.0))
    return w * jnp.where(norms > 0, factor, 0.0)[:, None]


def penalty(params: Params, strength: Array) -> Array:
    """``strength * sum_j ||W_raw[j]||``: the non-smooth part of ``F``."""
    return strength * jnp.sum(row_norms(params["W_raw"]))


def prox(params: Params, step: Array, strength: Array) -> Params:
    """The proximal map of ``step * penalty``: ``W_raw``'s rows soft-thresholded, the rest unchanged."""
    return {**params, "W_raw": group_soft_threshold(params["W_raw"], step * strength)}


def _tree_dot(a: Params, b: Params) -> Array:
    return sum(jnp.vdot(a[k], b[k]) for k in a)


class ProxStep(NamedTuple):
    """One backtracked proximal step from ``y``.

    Attributes:
        params: the accepted point (``y`` itself if no step was accepted).
        step: the accepted step size (the last one tried if none was).
        smooth: ``f`` at ``params``. accepted: whether a step was accepted.
    """

    params: Params
    step: Array
    smooth: Array
    accepted: Array


def backtracked_step(
    loss: SmoothLoss,
    y: Params,
    f_y: Array,
    grad: Params,
    step: Array,
    strength: Array,
    min_step: Array | float = 0.0,
) -> ProxStep:
    """A proximal gradient step from ``y`` (``f(y) = f_y``, gradient ``grad``), halving ``step`` until
    the quadratic upper bound holds; returns ``ProxStep``.

    ``min_step``: ``1 / L`` for ``L`` a Lipschitz constant of ``grad f``
    (``lipschitz_bound``), where the bound holds by the maths: the search
    stops there and takes that step. Without it (0), a float32 search near
    the minimum, where round-off in ``f`` exceeds ``||theta+ - theta||^2 / (2 t)``,
    shrinks the step without end and the fit stalls short of the minimum.
    """
    min_step = jnp.asarray(min_step, f_y.dtype)

    def _try(t: Array) -> tuple[Params, Array, Array]:
        cand = prox(jax.tree.map(lambda p, g: p - t * g, y, grad), t, strength)
        diff = jax.tree.map(jnp.subtract, cand, y)
        f_c = loss(cand)
        bound = f_y + _tree_dot(grad, diff) + _tree_dot(diff, diff) / (2 * t)
        return cand, f_c, jnp.isfinite(f_c) & ((f_c <= bound) | (t <= min_step))

    def _body(c: tuple) -> tuple:
        t, _, _, _, n = c
        t = jnp.maximum(t * 0.5, min_step)
        cand, f_c, ok = _try(t)
        return t, cand, f_c, ok, n + 1

    step = jnp.maximum(step, min_step)
    cand, f_c, ok = _try(step)
    t, cand, f_c, ok, _ = lax.while_loop(
        lambda c: ~c[3] & (c[4] < MAX_HALVINGS), _body, (step, cand, f_c, ok, jnp.asarray(0))
    )
    params = jax.tree.map(lambda a, b: jnp.where(ok, a, b), cand, y)
    return ProxStep(params, t, jnp.where(ok, f_c, f_y), ok)


def lipschitz_bound(arrays: tuple, intercept_scale: float | None, weight: float = 1.0) -> float:
    """An upper bound ``L`` on the curvature of the negative log likelihood (or ``-Q``) in the raw
    weights and intercepts, for the real instances of ``arrays`` (``model.split_model_data``).

    Per instance, the Hessian of ``-log softmax(W^T x + beta)_c`` is at most
    ``(1/2) [x; 1][x; 1]^T`` times the identity over classes (the softmax
    covariance is at most ``I / 2``), the sum-to-zero basis is orthonormal, and
    a marginal likelihood's curvature is at most the complete data's (the
    missing information is positive). So ``L = weight * (lambda_max(X^T X) +
    n) / 2 + 1 / intercept_scale^2``, with ``lambda_max`` by power iteration
    (a 1 % margin) and ``weight`` the largest responsibility weight (stochastic EM).
    """
    x = np.concatenate([np.asarray(f, np.float64)[np.asarray(m)] for f, m, *_ in arrays])
    v = np.ones(x.shape[1]) / np.sqrt(max(x.shape[1], 1))
    lam = 0.0
    for _ in range(100):
        u = x.T @ (x @ v)
        lam_new = float(np.linalg.norm(u))
        if lam_new == 0.0:
            break
        v = u / lam_new
        if abs(lam_new - lam) <= 1e-6 * lam_new:
            lam = lam_new
            break
        lam = lam_new
    prior = 0.0 if intercept_scale is None else 1.0 / float(intercept_scale) ** 2
    return weight * 0.5 * (1.01 * lam + x.shape[0]) + prior


def proximal_steps(
    loss: SmoothLoss,
    params: Params,
    strength: Array,
    n_steps: Array,
    step: Array,
    min_step: Array | float = 0.0,
) -> tuple[Params, Array]:
    """Up to ``n_steps`` backtracked proximal gradient steps (ISTA) on ``loss + penalty``.

    Each search starts at twice the last accepted step, and never goes below
    ``min_step`` (``backtracked_step``). Stops early when a search finds no
    step. Returns ``(params, step)``; ``F`` never rises.
    """
    value_and_grad = jax.value_and_grad(loss)

    def _body(c: tuple) -> tuple:
        p, t, i, _ = c
        f_p, g = value_and_grad(p)
        s = backtracked_step(loss, p, f_p, g, 2 * t, strength, min_step)
        return s.params, jnp.where(s.accepted, s.step, t), i + 1, ~s.accepted

    p, t, _, _ = lax.while_loop(
        lambda c: (c[2] < n_steps) & ~c[3], _body, (params, step, jnp.asarray(0), jnp.asarray(False))
    )
    return p, t


class FistaResult(NamedTuple):
    """The accelerated proximal gradient's result.

    Attributes:
        params: the minimiser found. objective: ``F`` there (scalar).
        n_iter: iterations run. converged: the first-order residual fell to
            ``tol`` or below (else ``max_iter`` was reached, or no step decreased
            ``F`` any more).
        residual: the largest component of the last accepted step's gradient mapping
            ``(y - params) / t``, the composite problem's first-order residual (zero
            exactly at a minimiser of ``F``; Beck 2017, 10.3).
    """

    params: Params
    objective: Array
    n_iter: Array
    converged: Array
    residual: Array


def fista(
    loss: SmoothLoss,
    params: Params,
    strength: Array,
    max_iter: int,
    tol: Array,
    step: Array | float = 1.0,
    min_step: Array | float = 0.0,
) -> FistaResult:
    """Minimise ``loss + penalty`` by FISTA with backtracking and adaptive restart.

    Momentum ``(k - 1) / (k + 2)`` extrapolates from the last two iterates;
    when ``F`` rises, the momentum restarts from the last (better) iterate,
    so ``F`` at the iterates never rises. Stops when the gradient mapping of an accepted
    step, ``(y - x+) / t`` (the proximal counterpart of the gradient, zero exactly at a
    minimiser of ``F``), is at most ``tol`` in every component, or after ``max_iter``.
    """
    value_and_grad = jax.value_and_grad(loss)
    f0 = loss(params)

    class _S(NamedTuple):
        x: Params
        x_prev: Params
        obj: Array
        t: Array
        k: Array  # iterations since the last restart
        n: Array
        converged: Array
        stuck: Array
        residual: Array

    def _body(s: _S) -> _S:
        beta = (s.k - 1.0) / (s.k + 2.0)
        y = jax.tree.map(lambda a, b: a + beta * (a - b), s.x, s.x_prev)
        f_y, g = value_and_grad(y)
        st = backtracked_step(loss, y, f_y, g, s.t * 2, strength, min_step)
        obj = st.smooth + penalty(st.params, strength)
        better = st.accepted & (obj <= s.obj)
        mapping = jax.tree.map(lambda a, b: jnp.max(jnp.abs(a - b)) / st.step, y, st.params)
        residual = jnp.where(better, jnp.max(jnp.stack(jax.tree.leaves(mapping))), s.residual)
        # A rise (or a failed search) restarts the momentum from x, whose F is lower.
        x_new = jax.tree.map(lambda a, b: jnp.where(better, a, b), st.params, s.x)
        return _S(
            x_new,
            s.x,  # after a restart x_prev = x: no momentum
            jnp.where(better, obj, s.obj),
            jnp.where(st.accepted, st.step, s.t),
            jnp.where(better, s.k + 1.0, 1.0),
            s.n + 1,
            better & (residual <= tol),
            ~better & (s.k <= 1.0),  # no descent even without momentum: at the minimum, to round-off
            residual,
        )

    start = _S(
        params,
        params,
        f0 + penalty(params, strength),
        jnp.asarray(step, f0.dtype),
        jnp.asarray(1.0, f0.dtype),
        jnp.asarray(0),
        jnp.asarray(False),
        jnp.asarray(False),
        jnp.asarray(jnp.inf, f0.dtype),
    )
    end = lax.while_loop(lambda s: (s.n < max_iter) & ~s.converged & ~s.stuck, _body, start)
    return FistaResult(end.x, end.obj, end.n, end.residual <= tol, end.residual)
