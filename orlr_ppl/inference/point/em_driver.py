"""The one EM loop that ORLR's EM (``em``) and the MIMM's (``mimm_em``) both run through.

In the spirit of dynamax's ``SSM.fit_em``, which loops over a model's ``e_step``,
``m_step`` and ``log_prior``: a model supplies those as small pure functions
(``EMSpec``), and this module owns what every EM shares:

* the state (``EMState``) and its one ``lax.while_loop`` (``run``), traced inside the
  model's own module-level jitted program (``program``, LLVM level 1), with the data as
  arguments: a fit compiles once per shape family and makes no host round trip until it
  returns;
* the stopping test: a first-order condition where the model's E-step reports how far its
  parameters are from one (``EStepOut.residual``: ORLR's, by Fisher's identity, at no extra
  DP), else a relative change of the log posterior of at most ``tol`` (the MIMM's, whose
  M-step is exact); and a stop when a pass leaves the log posterior exactly unchanged (a
  stall: no step could rise), which counts as converged only where the test passes too;
* the history of the log posterior at each kept E-step (NaN past the last);
* no M-step after the last E-step, nor after an unresolved one;
* the restart protocol (``fit``): a first run without the subset DP's log-space fallback,
  which halves the compiled program, and, should an E-step come near underflow, a second
  run, with the fallback compiled in, from where the first stopped.

A variant of a model's EM is another choice of functions (stochastic EM: an E-step that
draws bags; the l2,1 prior: a proximal M-step), not a flag threaded through the loop.

Two orders of a pass, the model's choice (``EMSpec.m_step_first``):

* E-step first (ORLR): the E-step at the current parameters, the stopping test, then,
  unless the fit stops there, the M-step on that E-step. The parameters returned are
  those the last history entry was computed at.
* M-step first (the MIMM, whose M-step is a closed form of the last responsibilities):
  the M-step proposes parameters from the last kept E-step's statistics (``EMState.stats``,
  the start's responsibilities on the first pass), and the E-step judges them: a
  proposal whose log posterior is not finite (a covariance beyond the float's Cholesky)
  is not kept and ends the fit, at the last parameters whose log posterior was.
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable, Hashable
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
from jax import lax

Array = jax.Array
PyTree = Any


def relative_change(old: Array, new: Array) -> Array:
    """``|new - old| / max(|old|, 1)``: the stopping quantity of an EM without a first-order test
    (the MIMM's), at most ``tol`` to stop, and the final change a report gives for any EM."""
    return jnp.abs(new - old) / jnp.maximum(jnp.abs(old), 1.0)


class EStepOut(NamedTuple):
    """An E-step's result, as the loop reads it.

    Attributes:
        value: () the log posterior at the E-step's parameters (less ``EMSpec.log_prior``'s
            term, which the loop adds), or an unbiased estimate of it (stochastic EM).
        resolved: () bool: False where the probability-space DP (``fallback=False``) left a
            bag near underflow; the other fields are then inexact and the loop stops unused.
        stats: what the M-step takes (a pytree: responsibilities and what else it needs).
        key: the PRNG key the next pass takes (the one given if the E-step draws nothing;
            any pytree, ``()`` for a model that never draws).
        residual: () how far the E-step's parameters are from a first-order optimum (ORLR:
            the largest component of the log posterior's gradient, or of its least-norm
            subgradient under a non-smooth prior); the stopping test is then
            ``residual <= tol``. None: the relative change of the log posterior is.
    """

    value: Array
    resolved: Array
    stats: PyTree
    key: PyTree
    residual: Array | None = None


EStepFn = Callable[[Hashable, PyTree, PyTree, PyTree, bool], EStepOut]
"""``e_step(config, data, params, key, fallback) -> EStepOut``."""
MStepFn = Callable[[Hashable, PyTree, PyTree, PyTree, PyTree], tuple[PyTree, PyTree]]
"""``m_step(config, data, params, carry, stats) -> (params, carry)``."""
LogPriorFn = Callable[[Hashable, PyTree, PyTree], Array]
"""``log_prior(config, data, params) -> ()``."""


class EMSpec(NamedTuple):
    """A model's EM: its step functions, which ``run`` calls with the model's data (static, hashable).

    Attributes:
        e_step: ``(config, data, params, key, fallback) -> EStepOut``; ``fallback``
            (static) compiles the DP's log-space rerun in.
        m_step: ``(config, data, params, carry, stats) -> (params, carry)``: new parameters
            from an E-step's ``stats``; ``carry`` is the M-step's own state across passes
            (a line search's last step; ``()`` if none).
        log_prior: ``(config, data, params) -> ()``, added to each E-step's value; None
            where the E-step's value already holds the prior.
        config: the model's static settings, passed first to each function.
        m_step_first: the pass's order (module docstring): False, E-step then M-step;
            True, the M-step's proposal judged by the E-step after it.
        stopping_test: False where the E-step's values are noisy estimates (stochastic EM):
            then the fit runs ``max_iter`` iterations and never reports convergence.
    """

    e_step: EStepFn
    m_step: MStepFn
    log_prior: LogPriorFn | None = None
    config: Hashable = None
    m_step_first: bool = False
    stopping_test: bool = True


class EMState(NamedTuple):
    """The loop's state, between passes and between the two runs of ``fit``.

    Attributes:
        params: the parameters the next E-step runs at (E-step first), or those of the last
            kept E-step (M-step first).
        carry: the M-step's own state (``EMSpec.m_step``).
        stats: M-step first: the statistics of the last kept E-step (at the start, the
            starting responsibilities), which the next M-step takes; else ``()``.
        history: (H,) the log posterior of each kept E-step in order, NaN past the last.
        residual: () the last E-step's first-order residual (``EStepOut.residual``); NaN
            where the E-step reports none.
        n_iter: () int, the history slot of the pass in progress: the iterations (E-step and
            M-step) before it. It advances only when another pass follows, so at the end
            ``history[: n_iter + 1]`` holds every pass, the last NaN if it was not kept.
        converged: () bool: the last pass met the stopping test.
        done: () bool: the loop has stopped.
        unresolved: () bool: it stopped at an E-step the probability-space DP could not resolve.
        key: the PRNG key of the next pass's draws (``()`` for a model that never draws).
        max_iter: () int, the iterations allowed: a value, not a shape, so that fits of any
            ``max_iter`` with one history length share one program.
    """

    params: PyTree
    carry: PyTree
    stats: PyTree
    history: Array
    n_iter: Array
    converged: Array
    done: Array
    unresolved: Array
    key: PyTree
    max_iter: Array
    residual: Array


def history_length(max_iter: int, least: int) -> int:
    """The history buffer's length for ``max_iter`` iterations: a power of two above it, at least ``least``.

    A shape of the compiled program: every ``max_iter`` below ``least`` shares one.
    """
    return max(int(least), 1 << int(max_iter).bit_length())


# LLVM's level 1 rather than XLA's default 2 for the EM programs: they compile faster and run
# as fast, and for EM, unlike NUTS, compiling is most of a fit's cost (BENCHMARKS.md).
COMPILER_OPTIONS = {"xla_backend_optimization_level": 1}
JIT_OPTIONS = (
    {"compiler_options": COMPILER_OPTIONS}
    if "compiler_options" in inspect.signature(jax.jit).parameters
    else {}
)
"""``jax.jit``'s keyword arguments for an EM program (``compiler_options`` on newer JAX only)."""


def program(*static_argnames: str) -> Callable[[Callable[..., EMState]], Callable[..., EMState]]:
    """A decorator: ``jax.jit`` with these static arguments and the EM programs' compiler options.

    Each model's fit is one module-level program so decorated, which calls ``run``.
    """
    return functools.partial(jax.jit, static_argnames=static_argnames, **JIT_OPTIONS)


def _where(condition: Array, new: PyTree, old: PyTree) -> PyTree:
    return jax.tree.map(lambda a, b: jnp.where(condition, a, b), new, old)


def run(spec: EMSpec, start: EMState, data: PyTree, tol: Array, fallback: bool) -> EMState:
    """The whole EM from ``start``: a ``lax.while_loop`` of passes, until a stop. Traced, not jitted.

    Each pass runs one E-step, so the DP, the costliest part, appears once in the loop
    body. A pass stops the fit when it converges (``residual <= tol`` where the E-step
    reports a residual, else ``|L - L_prev| <= tol * max(|L_prev|, 1)``, ``L_prev`` the
    last history entry), when it stalls (``L == L_prev``: the last M-step found no rise),
    when it is pass ``max_iter`` (the ``max_iter + 1``-th history entry), when its E-step is
    unresolved (``fit`` goes on from there, with the fallback), and, M-step first, when its
    log posterior is not finite.

    Args:
        spec: the model's functions (static).
        start: the state before the first pass (``history`` NaN, ``n_iter`` 0), or a state
            that stopped unresolved, with ``done`` and ``unresolved`` cleared.
        data: the model's arrays, passed to each of ``spec``'s functions.
        tol: () the stopping test's relative tolerance.
        fallback: (static) whether the E-step's DP may rerun in log space.
    Returns:
        The state where the loop stopped.
    """
    config = spec.config

    def _pass(s: EMState) -> EMState:
        if spec.m_step_first:
            params, carry = spec.m_step(config, data, s.params, s.carry, s.stats)
        else:
            params, carry = s.params, s.carry
        out = spec.e_step(config, data, params, s.key, fallback)
        value = out.value if spec.log_prior is None else out.value + spec.log_prior(config, data, params)
        old = s.history[jnp.maximum(s.n_iter - 1, 0)]
        stalled = jnp.asarray(False)
        if not spec.stopping_test:
            converged = jnp.asarray(False)
        elif out.residual is not None:
            converged = out.residual <= tol
            stalled = (s.n_iter > 0) & (value == old)
        else:
            converged = (s.n_iter > 0) & (relative_change(old, value) <= tol)
        kept = out.resolved & jnp.isfinite(value) if spec.m_step_first else out.resolved
        stop = converged | stalled | (s.n_iter >= s.max_iter) | ~kept
        if spec.m_step_first:  # the proposal stands only where its E-step is kept
            params, carry, stats = _where(kept, (params, carry, out.stats), (s.params, s.carry, s.stats))
        else:  # no M-step after the last E-step, nor after an unresolved one

            def _m_step() -> tuple[PyTree, PyTree]:
                return spec.m_step(config, data, s.params, s.carry, out.stats)

            params, carry = lax.cond(stop, lambda: (s.params, s.carry), _m_step)
            stats = s.stats
        history = s.history.at[s.n_iter].set(jnp.where(kept, value, jnp.nan))
        n_iter = s.n_iter + jnp.where(stop, 0, 1)
        key = _where(out.resolved, out.key, s.key)  # an unresolved pass is redone on the same draw
        residual = s.residual if out.residual is None else jnp.where(kept, out.residual, s.residual)
        return EMState(
            params,
            carry,
            stats,
            history,
            n_iter,
            converged & kept,
            stop,
            ~out.resolved,
            key,
            s.max_iter,
            residual,
        )

    return lax.while_loop(lambda s: ~s.done, _pass, start)


def fit(em: Callable[..., EMState], start: EMState) -> EMState:
    """The restart protocol: ``em(start, fallback=False)``, then, if it stopped unresolved, on.

    ``em(state, fallback=...)`` is the model's jitted program (which calls ``run``) with its
    data bound. The first run leaves the DP's log-space fallback out, which
    halves the compiled program; at the first E-step near underflow it stops before using
    it, and the second run, with the fallback (compiled only for fits that need it),
    redoes that pass exactly and goes on to the end. One host round trip between them.
    """
    state = em(start, fallback=False)
    if bool(state.unresolved):
        state = em(state._replace(done=jnp.asarray(False), unresolved=jnp.asarray(False)), fallback=True)
    return state
