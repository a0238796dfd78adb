"""Generalised EM for the ORed-logistic model (Pham, Raich & Fern's ORLR-EM).

E-step: the exact instance posteriors ``r_ic = p(y_i = c | Y_b, X_b, theta)``
from the model's ``BagLabelSet`` sites (the subset DP). M-step: ``m_steps``
gradient-ascent steps, each with an Armijo backtracking line search (optax's),
on the expected complete-data log joint, concave in the raw parameters::

    Q(theta; r) = sum_i sum_c r_ic log softmax(W^T x_i + beta)_c + log p(theta).

An M-step is kept only when it raises ``Q``, which (the EM inequality) never
lowers the log posterior ``sum_b log p(Y_b | X_b, theta) + log p(theta)``.
Both ``Q`` and the E-step come from ``orlr_model`` itself
(``model.log_density.e_step``, ``expected_log_joint``), with its sum-to-zero
``W_raw``, ``beta_raw``, so EM, MAP and the samplers share one objective. The
M-step evaluates ``Q`` on the real instances alone (``expected_log_joint_flat``):
it runs ``Q`` many times per E-step, and the buckets are half padding or more.

The whole fit (E-steps, M-steps with their line searches, and the stopping
test) is one ``lax.while_loop`` in a module-level jitted program, with the data
as arguments: it compiles once per shape family and makes no host round trip
until it returns. The loop runs the DP in probability space only; should an
E-step come near underflow, the same loop, with the DP's log-space fallback,
continues from there (see ``_em``).

Stochastic EM (Pham, Raich & Fern, 6.6.1; ``bag_fraction < 1``): each
iteration draws, in every label-set bucket, the same fraction of its bags
without replacement, runs the E-step on them alone, and takes the M-step on
``Q`` with their responsibilities weighted by (real bags in the bucket) /
(real bags drawn), an unbiased estimate of the full ``Q``, so the prior keeps
its weight. The draw sizes are static (part of the shape family), the draws
themselves come from a key carried in the loop. Per-iteration values are then
estimates and no longer monotone, so there is no stopping test: the fit runs
``max_iter`` iterations and its ``log_posterior`` is one exact evaluation on
all bags at the end.
"""

from __future__ import annotations

import functools
import inspect
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
import optax
from jax import lax, random

from ..model.log_density import (
    EStep,
    FlatRows,
    Params,
    Scales,
    e_step,
    expected_log_joint,
    expected_log_joint_flat,
    flat_responsibilities,
    flat_rows,
    potential,
    prior_scales,
)
from ..model.numpyro_model import (
    ModelArrays,
    ModelData,
    ModelShape,
    fitted_leak,
    split_model_data,
    start_params,
    sum_to_zero_basis,
)
from ..model.priors import group_laplace_log_prob, l21_log_prior
from ..model.sharding import is_sharded
from .leak_step import leak_update
from .methods import EM
from .prox import lipschitz_bound, proximal_steps
from .stochastic_em import draw_bags, sample_sizes, weighted

Array = jax.Array


class EMResult(NamedTuple):
    """An EM fit.

    Attributes:
        W: (d, C) weights; beta: (C,) intercepts (both sum to zero over classes).
        log_posterior: final log likelihood + log prior.
        history: (n_iter + 1,) log posterior at the start and after each
            iteration; for stochastic EM, its unbiased estimates from each
            iteration's bags (the last is at the final parameters).
        n_iter: iterations run.
        converged: whether the relative change fell below ``tol``; always
            False for stochastic EM, which has no stopping test.
        leak: the fitted leak probability with ``leak="learn"`` (else None).
    """

    W: np.ndarray
    beta: np.ndarray
    log_posterior: float
    history: np.ndarray
    n_iter: int
    converged: bool
    leak: float | None = None


LINE_SEARCH_STEPS = 60
"""Halvings a line search may try: from the last accepted step down by ``2**-60``."""


def _ascent() -> optax.GradientTransformationExtraArgs:
    """Gradient steps with an Armijo backtracking line search (on ``-Q``, so ascent on ``Q``).

    Each search starts at twice the last accepted step and halves it until
    ``Q`` rises by at least ``1e-4 * step * |grad|**2``: the classic
    generalised EM's M-step. The step carries over across M-steps through the
    optimiser's state, and so do ``Q`` and its gradient at the accepted point
    (``store_grad``), which the next step of the same M-step reuses rather
    than evaluates again.
    """
    return optax.chain(
        optax.sgd(learning_rate=1.0),
        optax.scale_by_backtracking_linesearch(
            max_backtracking_steps=LINE_SEARCH_STEPS,
            slope_rtol=1e-4,
            decrease_factor=0.5,
            increase_factor=2.0,
            max_learning_rate=1e30,
            store_grad=True,
        ),
    )


class _State(NamedTuple):
    params: Params
    opt_state: optax.OptState  # the line search's last accepted step
    history: Array  # (H,), H = history_length(max_iter); NaN past the last iteration
    n_iter: Array  # M-steps taken
    converged: Array
    done: Array
    unresolved: Array  # stopped at an E-step the probability-space DP could not resolve
    key: Array  # stochastic EM's draws of bags
    max_iter: Array  # () int32: a value, not a shape, so fits of any max_iter share one program


MIN_HISTORY = 512
"""The shortest history buffer: every fit of up to 511 iterations shares one compiled ``_em``."""


def history_length(max_iter: int) -> int:
    """The history buffer's length for ``max_iter`` iterations: a power of two, at least ``MIN_HISTORY``."""
    return max(MIN_HISTORY, 1 << int(max_iter).bit_length())


def _start(params: Params, max_iter: int, key: Array, proximal: bool = False) -> _State:
    """The state before the first E-step, its history ``history_length(max_iter)`` long.

    ``proximal``: the M-step is ``prox.proximal_steps``, whose state is its last step size.
    """
    return _start_state(params, history_length(int(max_iter)), np.int32(max_iter), key, proximal)


@functools.partial(jax.jit, static_argnums=(1, 4))
def _start_state(params: Params, length: int, max_iter: Array, key: Array, proximal: bool) -> _State:
    """``_start``'s state; one small program, not one per array built eagerly."""
    dtype = jax.tree.leaves(params)[0].dtype
    history = jnp.full((length,), jnp.nan, dtype)
    no = jnp.asarray(False)
    opt_state = jnp.asarray(1.0, dtype) if proximal else _ascent().init(_weights(params))
    return _State(
        params, opt_state, history, jnp.asarray(0), no, no, no, key, jnp.asarray(max_iter, jnp.int32)
    )


def _weights(params: Params) -> Params:
    """The parameters the M-step's gradient steps move: all but the leak, which has a closed form."""
    return {k: v for k, v in params.items() if k != "leak_logit"}


def _m_step(
    params: Params,
    opt_state: optax.OptState,
    e: EStep,
    arrays: ModelArrays,
    scales: Scales,
    m_steps: Array,
    shape: ModelShape,
    fit_intercept: bool,
    rows: FlatRows | None = None,
    l21: Array | None = None,
    min_step: Array | float = 0.0,
) -> tuple[Params, optax.OptState]:
    """``m_steps`` line-searched gradient steps on ``Q``; the start back if ``Q`` did not rise.

    With ``l21`` (the group Laplace prior's scale; ``scales`` then leave ``W_raw``
    flat), ``m_steps`` proximal gradient steps on ``-Q + sum_j ||W_raw[j]|| / l21``
    (``prox.proximal_steps``, steps of at least ``min_step``), which never raise it;
    ``opt_state`` is then their step size.

    A line search that finds no step with sufficient rise (in float32 that
    happens near the M-step's maximum, where the rise is below round-off) ends
    the M-step without taking its step, and the next M-step's search starts
    afresh from a step of 1: carrying the collapsed step over would leave every
    later search too short to move, and EM stuck short of the optimum.
    """

    fixed, params = {k: v for k, v in params.items() if k == "leak_logit"}, _weights(params)
    if rows is None:

        def loss(p: Params) -> Array:
            return -expected_log_joint({**p, **fixed}, e.posteriors, arrays, scales, shape, fit_intercept)

    else:  # the same Q on the real instances alone (``expected_log_joint_flat``)
        resp = flat_responsibilities(e.posteriors, rows)

        def loss(p: Params) -> Array:
            return -expected_log_joint_flat({**p, **fixed}, resp, rows, arrays, scales, shape, fit_intercept)

    if l21 is not None:
        new, step = proximal_steps(loss, params, 1.0 / l21, m_steps, opt_state, min_step)
        return {**new, **fixed}, step
    opt = _ascent()
    failed_before = optax.tree_utils.tree_get(opt_state, "decrease_error") > 0
    step = optax.tree_utils.tree_get(opt_state, "learning_rate")
    # The stored value and gradient are the last M-step's, of another Q: recompute them.
    inf = jnp.asarray(jnp.inf, jax.tree.leaves(params)[0].dtype)
    opt_state = optax.tree_utils.tree_set(
        opt_state, learning_rate=jnp.where(failed_before, 1.0, step), value=inf
    )
    value_and_grad = optax.value_and_grad_from_state(loss)

    def _step(
        carry: tuple[Params, optax.OptState, Array, Array, Array, Array],
    ) -> tuple[Params, optax.OptState, Array, Array, Array, Array]:
        p, state, i, first, _, _ = carry
        value, grad = value_and_grad(p, state=state)
        updates, state = opt.update(grad, state, p, value=value, grad=grad, value_fn=loss)
        failed = optax.tree_utils.tree_get(state, "decrease_error") > 0
        moved = jax.tree.map(lambda a, b: jnp.where(failed, a, b), p, optax.apply_updates(p, updates))
        return moved, state, i + 1, jnp.where(i == 0, value, first), value, failed

    # -Q at the start comes from the first step's own evaluation (m_steps >= 1), not a new one.
    start = (params, opt_state, jnp.asarray(0), inf, inf, jnp.asarray(False))
    new, opt_state, _, before, last, failed = lax.while_loop(lambda c: (c[2] < m_steps) & ~c[5], _step, start)
    # -Q where the loop stopped: the search's accepted value, or, after a failed search, the
    # value at the point it started from (no evaluation is repeated here). A NaN never counts.
    after = jnp.where(failed, last, optax.tree_utils.tree_get(opt_state, "value"))
    keep = jnp.isfinite(after) & (after <= before)
    return {**jax.tree.map(lambda a, b: jnp.where(keep, a, b), new, params), **fixed}, opt_state


# LLVM's level 1 rather than XLA's default 2 for this program: it compiles ~1.5 s faster
# (4.8-5.5 s against 6.3 s on a Letter Frost fold) and runs as fast (0.03-0.04 s for
# 50 iterations), and for EM, unlike NUTS, compiling is most of a fit's cost.
_COMPILE = {"xla_backend_optimization_level": 1}
_JIT_TAKES_OPTIONS = "compiler_options" in inspect.signature(jax.jit).parameters  # newer JAX only
_JIT_OPTIONS = {"compiler_options": _COMPILE} if _JIT_TAKES_OPTIONS else {}


@functools.partial(jax.jit, static_argnames=("shape", "fit_intercept", "fallback", "sizes"), **_JIT_OPTIONS)
def _em(
    start: _State,
    arrays: ModelArrays,
    scales: Scales,
    tol: Array,
    m_steps: Array,
    shape: ModelShape,
    fit_intercept: bool,
    fallback: bool,
    sizes: tuple[int, ...] | None = None,
    rows: FlatRows | None = None,
    l21: Array | None = None,
    min_step: Array | None = None,
) -> _State:
    """The whole EM from ``start``: a ``while_loop`` of E-step, stopping test, then M-step.

    Each pass runs one E-step on the current parameters; the M-step that
    follows is skipped on the last pass, so the returned parameters are those
    the last history entry was computed at. The E-step, the costliest part
    (the DP), appears once in the loop body.

    Without ``fallback`` the E-step runs the DP in probability space only,
    which halves the compiled program; at the first E-step that leaves a bag
    unresolved (near underflow) the loop stops before using it, with
    ``unresolved`` set, and ``fit_em`` continues from there with the exact
    program (``fallback=True``), compiled only for fits that need it.

    With ``sizes`` (``sample_sizes``), stochastic EM: each pass draws that
    many bags per bucket, and the loop stops only at ``max_iter``.

    With ``l21`` (a scale; ``scales`` leave ``W_raw`` flat) the group Laplace
    prior of that scale is added to the log joint and the M-step is proximal,
    with steps of at least ``min_step`` (``prox.lipschitz_bound``).
    """
    max_iter = start.max_iter

    def _e_step(params: Params, batch: ModelArrays) -> EStep:
        e = e_step(params, batch, scales, shape, fit_intercept, fallback)
        prior = 0.0 if l21 is None else group_laplace_log_prob(params["W_raw"], l21)
        return e._replace(log_joint=e.log_joint + prior)

    def _pass(s: _State) -> _State:
        key = s.key
        weights = None
        if sizes is None:
            batch = arrays
            e = _e_step(s.params, batch)
            old = s.history[jnp.maximum(s.n_iter - 1, 0)]
            change = jnp.abs(e.log_joint - old)
            converged = (s.n_iter > 0) & (change <= tol * jnp.maximum(jnp.abs(old), 1.0))
        else:
            key, draw = random.split(s.key)
            batch, weights = draw_bags(draw, arrays, sizes)
            _, e = weighted(_e_step(s.params, batch), weights)

            converged = jnp.asarray(False)  # estimates are noisy: a fixed budget, no stopping test
        done = converged | (s.n_iter >= max_iter)
        stop = done | ~e.resolved  # no M-step after the last E-step, nor after an inexact one

        def _update() -> tuple[Params, optax.OptState]:
            params, opt_state = _m_step(
                s.params, s.opt_state, e, batch, scales, m_steps, shape, fit_intercept, rows, l21, min_step
            )
            if shape.leak == "learn":
                params = leak_update(params, e, batch, weights, shape)
            return params, opt_state

        params, opt_state = lax.cond(stop, lambda: (s.params, s.opt_state), _update)
        history = s.history.at[s.n_iter].set(jnp.where(e.resolved, e.log_joint, jnp.nan))
        n_iter = s.n_iter + jnp.where(stop, 0, 1)
        # An unresolved pass is redone (with the fallback) on the same draw: keep the key.
        key = jnp.where(e.resolved, key, s.key)
        done_now = converged & e.resolved
        return _State(params, opt_state, history, n_iter, done_now, stop, ~e.resolved, key, s.max_iter)

    return lax.while_loop(lambda s: ~s.done, _pass, start)


_potential = jax.jit(potential, static_argnums=(3, 4))
"""``-log p(theta, Y | X)`` alone: stochastic EM's one exact evaluation, without a gradient."""


def fit_em(
    data: ModelData,
    prior_scale: float | None = None,
    intercept_scale: float | None = None,
    max_iter: int = EM.max_iter,
    tol: float = EM.tol,
    m_steps: int = EM.m_steps,
    init: dict[str, Array] | None = None,
    fit_intercept: bool = True,
    bag_fraction: float = EM.bag_fraction,
    seed: int = 0,
) -> EMResult:
    """Fit by generalised EM.

    Args:
        data: from ``model.make_model_data``.
        prior_scale, intercept_scale: Normal prior sds; None (default) is no
            prior, plain maximum likelihood, as in the paper.
        max_iter: EM iterations (the paper's 50 by default); a value of the
            compiled program, so fits that differ only in it share one.
        tol: stop when the log posterior's relative change is below this.
        m_steps: line-searched gradient steps per M-step (1 is the classic
            generalised EM).
        init: starting raw parameters ``W_raw`` (d, C-1), ``beta_raw``
            (C-1,); default zeros (uniform probabilities).
        fit_intercept: learn intercepts (``beta_raw``); else they stay zero.
        bag_fraction: in (0, 1]; below 1, stochastic EM on this fraction of
            each bucket's bags per iteration (see the module docstring),
            drawn from ``seed``.

    Under the l2,1 prior (``data.weight_prior == "l21"``), ``prior_scale`` is the group
    Laplace's scale and each M-step takes ``m_steps`` proximal steps (``prox``).
    """
    if int(m_steps) < 1 or int(max_iter) < 0:
        raise ValueError(f"need m_steps >= 1 and max_iter >= 0, got m_steps={m_steps}, max_iter={max_iter}")
    if not 0.0 < float(bag_fraction) <= 1.0:
        raise ValueError(f"bag_fraction={bag_fraction}: give the fraction of bags per iteration, in (0, 1]")
    arrays, shape = split_model_data(data)
    c = data.n_outputs
    dtype = data.buckets[0].features.dtype
    # Host arrays throughout: each eagerly built device array would compile a small program.
    params = start_params(data, fit_intercept, dtype)
    for name, value in (init or {}).items():
        if name in params:
            params[name] = np.asarray(value, dtype)
    l21 = np.asarray(prior_scale, dtype) if data.weight_prior == "l21" and prior_scale is not None else None
    args = (
        jax.device_put(arrays),
        prior_scales(None if l21 is not None else prior_scale, intercept_scale, dtype),
        np.asarray(tol, dtype),
        np.asarray(m_steps, np.int32),
        shape,
        fit_intercept,
    )
    sizes = sample_sizes(arrays, float(bag_fraction))
    # Plain EM's M-steps run on the real instances alone. Stochastic EM's run on the buckets it
    # draws, and sharded data's on the buckets too, which stay split over the devices.
    flat = sizes is None and not is_sharded(arrays)
    rows = jax.device_put(flat_rows(arrays, data.max_instances)) if flat else None
    key = random.PRNGKey(int(seed))
    min_step = None  # steps of at least 1 / L (prox.backtracked_step)
    if l21 is not None:
        bound = lipschitz_bound(arrays, intercept_scale if fit_intercept else None, 1.0 / float(bag_fraction))
        min_step = np.asarray(1.0 / bound, dtype)
    state = _em(
        _start(params, int(max_iter), key, l21 is not None),
        *args,
        fallback=False,
        sizes=sizes,
        rows=rows,
        l21=l21,
        min_step=min_step,
    )
    if bool(state.unresolved):  # near underflow: go on, from the same state, in exact arithmetic
        state = _em(
            state._replace(done=jnp.asarray(False), unresolved=jnp.asarray(False)),
            *args,
            fallback=True,
            sizes=sizes,
            rows=rows,
            l21=l21,
            min_step=min_step,
        )
    n_iter = int(state.n_iter)
    history = np.asarray(state.history, np.float64)[: n_iter + 1]
    log_posterior = float(history[-1])
    if sizes is not None:  # the history holds estimates: evaluate the fit on every bag once
        log_posterior = -float(_potential(state.params, *args[:2], shape, fit_intercept))
        if l21 is not None:
            log_posterior += l21_log_prior(np.asarray(state.params["W_raw"]), float(prior_scale))
    basis = sum_to_zero_basis(c)
    beta_raw = np.asarray(state.params["beta_raw"]) if fit_intercept else np.zeros(c - 1)
    return EMResult(
        np.asarray(state.params["W_raw"]) @ basis.T,
        beta_raw @ basis.T,
        log_posterior,
        history,
        n_iter,
        bool(state.converged),
        fitted_leak(state.params, data),
    )
