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

The stopping test is a first-order condition (``optimality``): the largest
component of the log posterior's gradient at the E-step's parameters, which by
Fisher's identity is ``Q``'s gradient at that E-step's responsibilities, so it
costs no DP. EM is slow where the bag labels leave much of the instance labels'
information missing (its rate is that fraction), and a relative change of the
log posterior can fall below any tolerance far from the optimum.

The whole fit (E-steps, M-steps with their line searches, and the stopping
test) is ``em_driver``'s one ``lax.while_loop`` over this module's step
functions, in the module-level jitted program ``_em``, with the data as
arguments: it compiles once per shape family and makes no host round trip
until it returns. The loop runs the DP in probability space only; should an
E-step come near underflow, the same loop, with the DP's log-space fallback,
continues from there (``em_driver.fit``). Each variant below is a choice of
step functions (``_Steps``), not a flag: stochastic EM's E-step draws bags,
the l2,1 prior's E-step adds its term and its M-step is proximal, and a learnt
leak's closed-form update (``leak_step``) follows either M-step.

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
from collections.abc import Callable
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
import optax
from jax import lax, random

from ...model.log_density import (
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
from ...model.numpyro_model import (
    ModelArrays,
    ModelData,
    ModelShape,
    fitted_leak,
    split_model_data,
    start_params,
    sum_to_zero_basis,
)
from ...model.priors import group_laplace_log_prob, l21_log_prior
from ...model.sharding import is_sharded
from ..methods import EM, PointFit
from . import em_driver
from .em_driver import EMSpec, EMState, EStepFn, EStepOut, MStepFn
from .leak_step import leak_gradient, leak_update
from .optimality import stationarity
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
        converged: whether the first-order condition holds: ``optimality <= tol``;
            always False for stochastic EM, which has no stopping test.
        leak: the fitted leak probability with ``leak="learn"`` (else None).
        optimality: the first-order residual at the estimate (``optimality.stationarity``);
            NaN for stochastic EM.
    """

    W: np.ndarray
    beta: np.ndarray
    log_posterior: float
    history: np.ndarray
    n_iter: int
    converged: bool
    leak: float | None = None
    optimality: float = float("nan")


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


MIN_HISTORY = 512
"""The shortest history buffer: every fit of up to 511 iterations shares one compiled ``_em``."""


def history_length(max_iter: int) -> int:
    """The history buffer's length for ``max_iter`` iterations: a power of two, at least ``MIN_HISTORY``."""
    return em_driver.history_length(max_iter, MIN_HISTORY)


def _start(params: Params, max_iter: int, key: Array, proximal: bool = False) -> EMState:
    """The state before the first E-step, its history ``history_length(max_iter)`` long.

    ``proximal``: the M-step is ``prox.proximal_steps``, whose state is its last step size.
    """
    return _start_state(params, history_length(int(max_iter)), np.int32(max_iter), key, proximal)


@functools.partial(jax.jit, static_argnums=(1, 4))
def _start_state(params: Params, length: int, max_iter: Array, key: Array, proximal: bool) -> EMState:
    """``_start``'s state; one small program, not one per array built eagerly."""
    dtype = jax.tree.leaves(params)[0].dtype
    history = jnp.full((length,), jnp.nan, dtype)
    no = jnp.asarray(False)
    opt_state = jnp.asarray(1.0, dtype) if proximal else _ascent().init(_weights(params))
    return EMState(
        params,
        opt_state,
        (),
        history,
        jnp.asarray(0),
        no,
        no,
        no,
        key,
        jnp.asarray(max_iter, jnp.int32),
        jnp.asarray(jnp.nan, dtype),
    )


def _weights(params: Params) -> Params:
    """The parameters the M-step's gradient steps move: all but the leak, which has a closed form."""
    return {k: v for k, v in params.items() if k != "leak_logit"}


# -- ORLR's step functions for ``em_driver.run`` ------------------------------------------------


class _Data(NamedTuple):
    """The arrays ORLR's step functions read (the compiled program's data arguments).

    Attributes:
        arrays: the buckets (``split_model_data``). scales: the Normal priors' (``prior_scales``).
        m_steps: () int32, gradient steps per M-step.
        rows: the real instances (``flat_rows``), for ``_row_loss``; else None.
        l21: () the group Laplace prior's scale, for ``_group_laplace``; else None.
        min_step: () the proximal steps' least size (``prox.lipschitz_bound``), for
            ``_proximal_m_step``; else None.
    """

    arrays: ModelArrays
    scales: Scales
    m_steps: Array
    rows: FlatRows | None = None
    l21: Array | None = None
    min_step: Array | None = None


class _Stats(NamedTuple):
    """What ORLR's E-step hands its M-step.

    Attributes:
        e: the E-step (its responsibilities weighted, under stochastic EM).
        batch: the buckets it ran on: all of them, or stochastic EM's draw.
        weights: (K,) each bucket's weight under stochastic EM; None: all 1.
    """

    e: EStep
    batch: ModelArrays
    weights: Array | None


class _Config(NamedTuple):
    """ORLR's static settings, passed first to each step function (``EMSpec.config``)."""

    shape: ModelShape
    fit_intercept: bool
    steps: _Steps


def _no_prior(data: _Data, params: Params) -> float:
    """No prior term beyond the model's own (its Normal priors are in ``e_step``'s log joint)."""
    return 0.0


def _group_laplace(data: _Data, params: Params) -> Array:
    """() the l2,1 prior's log density of ``W_raw``'s rows, of scale ``data.l21``."""
    return group_laplace_log_prob(params["W_raw"], data.l21)


def _scored_e_step(cfg: _Config, data: _Data, params: Params, batch: ModelArrays, fallback: bool) -> EStep:
    """The model's E-step on ``batch``, its log joint with the step's prior term (``_Steps.log_prior``)."""
    e = e_step(params, batch, data.scales, cfg.shape, cfg.fit_intercept, fallback)
    return e._replace(log_joint=e.log_joint + cfg.steps.log_prior(data, params))


def _e_step(cfg: _Config, data: _Data, params: Params, key: Array, fallback: bool) -> EStepOut:
    """The E-step on every bag: the exact log posterior, responsibilities and first-order residual."""
    e = _scored_e_step(cfg, data, params, data.arrays, fallback)
    stats = _Stats(e, data.arrays, None)
    return EStepOut(e.log_joint, e.resolved, stats, key, _residual(cfg, data, params, stats))


def _residual(cfg: _Config, data: _Data, params: Params, stats: _Stats) -> Array:
    """() ``optimality.stationarity`` of the log posterior at the E-step's ``params``.

    By Fisher's identity the log posterior's gradient there is ``Q``'s with the E-step's
    responsibilities held (the leak's: ``leak_gradient``), so it costs one gradient of the
    M-step's objective and no DP.
    """
    fixed = {k: v for k, v in params.items() if k == "leak_logit"}
    loss = cfg.steps.loss(cfg, data, stats, fixed)
    ascent = jax.tree.map(jnp.negative, jax.grad(loss)(_weights(params)))
    if cfg.shape.leak == "learn":
        ascent["leak_logit"] = leak_gradient(params, stats.e, stats.batch, cfg.shape)
    return stationarity(ascent, params, None if data.l21 is None else 1.0 / data.l21)


def _drawn_e_step(cfg: _Config, data: _Data, params: Params, key: Array, fallback: bool) -> EStepOut:
    """Stochastic EM's E-step: on ``cfg.steps.sizes`` bags drawn per bucket, weighted (``stochastic_em``).

    Its value is an unbiased estimate of the log posterior; the next key is split off ``key``.
    """
    key, draw = random.split(key)
    batch, weights = draw_bags(draw, data.arrays, cfg.steps.sizes)
    _, e = weighted(_scored_e_step(cfg, data, params, batch, fallback), weights)
    return EStepOut(e.log_joint, e.resolved, _Stats(e, batch, weights), key)


_Loss = Callable[[Params], Array]


def _bucket_loss(cfg: _Config, data: _Data, stats: _Stats, fixed: Params) -> _Loss:
    """``-Q`` over the E-step's buckets, of the weights (``fixed``: the leak, held)."""

    def loss(p: Params) -> Array:
        return -expected_log_joint(
            {**p, **fixed}, stats.e.posteriors, stats.batch, data.scales, cfg.shape, cfg.fit_intercept
        )

    return loss


def _row_loss(cfg: _Config, data: _Data, stats: _Stats, fixed: Params) -> _Loss:
    """The same ``-Q`` on the real instances alone (``expected_log_joint_flat``; ``data.rows``).

    The M-step evaluates ``Q`` many times per E-step, and the buckets are half padding or more.
    """
    resp = flat_responsibilities(stats.e.posteriors, data.rows)

    def loss(p: Params) -> Array:
        return -expected_log_joint_flat(
            {**p, **fixed}, resp, data.rows, stats.batch, data.scales, cfg.shape, cfg.fit_intercept
        )

    return loss


def _line_searched_steps(
    loss: _Loss, params: Params, opt_state: optax.OptState, m_steps: Array
) -> tuple[Params, optax.OptState]:
    """``m_steps`` line-searched gradient steps on ``loss`` (``-Q``); the start back if it did not fall.

    A line search that finds no step with sufficient rise (in float32 that
    happens near the M-step's maximum, where the rise is below round-off) ends
    the M-step without taking its step, and the next M-step's search starts
    afresh from a step of 1: carrying the collapsed step over would leave every
    later search too short to move, and EM stuck short of the optimum.
    """
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
    return jax.tree.map(lambda a, b: jnp.where(keep, a, b), new, params), opt_state


def _leak_step(cfg: _Config, params: Params, stats: _Stats) -> Params:
    """The leak's closed-form M-step (``leak_step``) where the model learns it; else ``params``."""
    if cfg.shape.leak != "learn":
        return params
    return leak_update(params, stats.e, stats.batch, stats.weights, cfg.shape)


def _ascent_m_step(
    cfg: _Config, data: _Data, params: Params, opt_state: optax.OptState, stats: _Stats
) -> tuple[Params, optax.OptState]:
    """The generalised EM's M-step: ``data.m_steps`` line-searched gradient steps on ``Q``, then the leak's.

    ``opt_state``: the line search's (``_ascent``), carrying its last accepted step.
    """
    fixed = {k: v for k, v in params.items() if k == "leak_logit"}
    loss = cfg.steps.loss(cfg, data, stats, fixed)
    new, opt_state = _line_searched_steps(loss, _weights(params), opt_state, data.m_steps)
    return _leak_step(cfg, {**new, **fixed}, stats), opt_state


def _proximal_m_step(
    cfg: _Config, data: _Data, params: Params, step: Array, stats: _Stats
) -> tuple[Params, Array]:
    """The M-step under the l2,1 prior: proximal gradient steps, then the leak's.

    ``data.m_steps`` steps on ``-Q + sum_j ||W_raw[j]|| / l21`` (``prox.proximal_steps``,
    of at least ``data.min_step``), which never raise it; ``step`` is their last size.
    """
    fixed = {k: v for k, v in params.items() if k == "leak_logit"}
    loss = cfg.steps.loss(cfg, data, stats, fixed)
    new, step = proximal_steps(loss, _weights(params), 1.0 / data.l21, data.m_steps, step, data.min_step)
    return _leak_step(cfg, {**new, **fixed}, stats), step


class _Steps(NamedTuple):
    """Which ORLR EM: its step functions (static, hashable; the default is plain EM over the buckets).

    Attributes:
        e_step: ``_e_step`` (every bag) or ``_drawn_e_step`` (stochastic EM).
        m_step: ``_ascent_m_step`` or, under the l2,1 prior, ``_proximal_m_step``.
        log_prior: the prior term the E-step adds to the model's log joint: ``_no_prior``
            or, under the l2,1 prior, ``_group_laplace``.
        loss: ``-Q`` as the M-step evaluates it: ``_bucket_loss`` or ``_row_loss``.
        sizes: ``_drawn_e_step``'s bags per bucket (``sample_sizes``).
    """

    e_step: EStepFn = _e_step
    m_step: MStepFn = _ascent_m_step
    log_prior: Callable[[_Data, Params], Array | float] = _no_prior
    loss: Callable[[_Config, _Data, _Stats, Params], _Loss] = _bucket_loss
    sizes: tuple[int, ...] = ()


class _Extra(NamedTuple):
    """``_Data``'s optional arrays, as ``_em`` takes them: each for the steps that read it (None: unused)."""

    rows: FlatRows | None = None
    l21: Array | None = None
    min_step: Array | None = None


_PLAIN = _Steps()
"""Plain EM on every bag, line-searched gradient M-steps on ``Q`` over the buckets."""
_NO_EXTRA = _Extra()


@em_driver.program("shape", "fit_intercept", "fallback", "steps")
def _em(
    start: EMState,
    arrays: ModelArrays,
    scales: Scales,
    tol: Array,
    m_steps: Array,
    shape: ModelShape,
    fit_intercept: bool,
    fallback: bool,
    steps: _Steps = _PLAIN,
    extra: _Extra = _NO_EXTRA,
) -> EMState:
    """ORLR's whole EM from ``start``: ``em_driver.run`` with ``steps``, E-step first.

    One compiled program per shape family and ``steps``; the data are arguments.
    ``fallback``: the DP's log-space rerun compiled in (``em_driver.fit``). Stochastic EM
    (``_drawn_e_step``) has no stopping test: its values are estimates.
    """
    spec = EMSpec(
        steps.e_step,
        steps.m_step,
        config=_Config(shape, fit_intercept, steps),
        stopping_test=steps.e_step is not _drawn_e_step,
    )
    data = _Data(arrays, scales, m_steps, extra.rows, extra.l21, extra.min_step)
    return em_driver.run(spec, start, data, tol, fallback)


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
        max_iter: EM iterations; a value of the compiled program, so fits that
            differ only in it share one.
        tol: stop when the first-order residual (``optimality.stationarity``: the
            largest component of the log posterior's gradient) is at most this, or
            when an iteration leaves the log posterior unchanged (a stall, which is
            converged only if the residual is below ``tol`` too). Run in float64
            (``jax.enable_x64``) for a ``tol`` below float32's resolution.
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
    steps = _Steps(
        e_step=_e_step if sizes is None else _drawn_e_step,
        m_step=_ascent_m_step if l21 is None else _proximal_m_step,
        log_prior=_no_prior if l21 is None else _group_laplace,
        loss=_row_loss if flat else _bucket_loss,
        sizes=sizes or (),
    )
    extra = _Extra(rows, l21, min_step)
    state = em_driver.fit(
        lambda s, fallback: _em(s, *args, fallback=fallback, steps=steps, extra=extra),
        _start(params, int(max_iter), key, l21 is not None),
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
        float(state.residual),
    )


def run(
    method: EM,
    data: ModelData,
    prior_scale: float | None,
    intercept_scale: float | None,
    fit_intercept: bool,
    seed: int = 0,
) -> PointFit:
    """``EM.fit``: ``fit_em`` with ``method``'s settings (stochastic EM's subsets drawn from ``seed``)."""
    res = fit_em(
        data,
        prior_scale,
        intercept_scale,
        fit_intercept=fit_intercept,
        max_iter=method.max_iter,
        m_steps=method.m_steps,
        tol=method.tol,
        bag_fraction=method.bag_fraction,
        seed=seed,
    )
    coef, intercept = np.asarray(res.W), np.asarray(res.beta)
    return PointFit(
        coef, intercept, res.log_posterior, res.n_iter, res.converged, res.history, res.leak, res.optimality
    )
