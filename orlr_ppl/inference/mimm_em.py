"""EM for the multi-instance mixture model (MIMM, Foulds & Smyth), on multi-label bags.

The model, its prior, the exact E-step (the subset DP through ``BagLabelSet``)
and the closed-form MAP M-step are ``mimm_steps``; this module runs them. The
whole fit is one ``lax.while_loop`` in a module-level jitted program with the
data as arguments: it compiles once per shape family (bucket shapes, classes,
features, covariance type; ``max_iter`` only past ``HISTORY_SLOTS``) and makes
no host round trip until it returns. The starts are host arrays, so a fit
compiles that one loop and nothing else. As in ``em``, the loop runs the DP
in probability space only and, should an E-step come near underflow,
continues from there with the DP's exact log-space fallback compiled in.
Each iteration's M-step is exact, so the log posterior (``history``) never
falls, up to round-off.

Starts: the first is deterministic, the M-step on responsibilities spread
evenly over each bag's label set (``start_posteriors``); further ones
(``n_init``) spread them by flat Dirichlet draws, and the start of highest
final log posterior wins.
"""

from __future__ import annotations

import functools
import inspect
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from ..model.model_data import ModelData
from .mimm_steps import (
    COVARIANCES,
    MixtureData,
    MixtureParams,
    MixturePrior,
    MixtureShape,
    e_step,
    log_prior,
    m_step,
    mixture_data,
    start_posteriors,
)

Array = jax.Array


class MIMMResult(NamedTuple):
    """A MIMM fit by EM.

    Attributes:
        weights: (C,) pi; means: (C, d); covariances: (C, d) ("diag") or (C, d, d) ("full").
        log_posterior: ``sum_b log p(X_b, Y_b) + log p(theta)`` at these parameters.
        history: (n_iter + 1,) the log posterior at the start (the M-step on the
            starting responsibilities) and after each iteration, of the best start;
            it never falls, up to round-off.
        n_iter: iterations (E-step and M-step) after the start; converged: whether
            the relative change fell below ``tol`` within ``max_iter`` iterations.
    """

    weights: np.ndarray
    means: np.ndarray
    covariances: np.ndarray
    log_posterior: float
    history: np.ndarray
    n_iter: int
    converged: bool


class _State(NamedTuple):
    resp: Array  # (M, C) the responsibilities the next M-step takes
    params: MixtureParams  # the parameters of the last recorded E-step
    history: Array  # (history_slots(max_iter),), NaN past the last recorded E-step
    max_iter: Array  # () the iterations allowed
    count: Array  # E-steps recorded: iterations + 1
    converged: Array
    done: Array
    unresolved: Array  # stopped at an E-step the probability-space DP could not resolve


HISTORY_SLOTS = 256
"""The history buffer's least length: fits with ``max_iter`` below it share one compiled program."""


def history_slots(max_iter: int) -> int:
    """Length of the history buffer: ``HISTORY_SLOTS``, or the power of two above ``max_iter``."""
    return max(HISTORY_SLOTS, 1 << int(max_iter).bit_length())


def _start(resp: np.ndarray, n_features: int, max_iter: int, covariance: str) -> _State:
    """The state before the first M-step, as host arrays (no program of its own to compile)."""
    dtype, n_classes = resp.dtype, resp.shape[1]
    eye = np.eye(n_features, dtype=dtype)
    covs = (
        np.ones((n_classes, n_features), dtype) if covariance == "diag" else np.tile(eye, (n_classes, 1, 1))
    )
    params = MixtureParams(
        np.full(n_classes, 1.0 / n_classes, dtype), np.zeros((n_classes, n_features), dtype), covs
    )
    history = np.full((history_slots(max_iter),), np.nan, dtype)
    no = np.asarray(False)
    return _State(resp, params, history, np.asarray(max_iter), np.asarray(0), no, no, no)


# LLVM's level 1, as ``em``: it compiles faster, and for a short EM compiling is most of the cost.
_JIT_OPTIONS = (
    {"compiler_options": {"xla_backend_optimization_level": 1}}
    if "compiler_options" in inspect.signature(jax.jit).parameters
    else {}
)


@functools.partial(jax.jit, static_argnames=("shape", "fallback"), **_JIT_OPTIONS)
def _em(
    start: _State, data: MixtureData, prior: MixturePrior, tol: Array, shape: MixtureShape, fallback: bool
) -> _State:
    """The whole EM from ``start``: a ``while_loop`` of M-step, E-step, then the stopping test.

    Each pass takes the M-step on the last responsibilities and the E-step at
    its parameters, so the returned parameters are those the last history
    entry was computed at. A non-finite log posterior (a covariance beyond the
    float's Cholesky) ends the fit, unconverged, at the last parameters whose
    log posterior was finite. Without ``fallback``, the loop stops, with
    ``unresolved`` set, at the first E-step that leaves a bag near underflow,
    before using it; ``fit_mimm`` redoes that pass with ``fallback=True`` (see
    ``em._em``).
    """

    def _pass(s: _State) -> _State:
        params = m_step(s.resp, data.features, prior, shape.covariance)
        e = e_step(params, data, shape, fallback)
        lp = e.log_likelihood + log_prior(params, prior, shape.covariance)
        old = s.history[jnp.maximum(s.count - 1, 0)]
        converged = (s.count > 0) & (jnp.abs(lp - old) <= tol * jnp.maximum(jnp.abs(old), 1.0))
        keep = e.resolved & jnp.isfinite(lp)  # record this pass
        count = s.count + keep.astype(s.count.dtype)
        done = ~keep | converged | (count > s.max_iter)
        history = s.history.at[s.count].set(jnp.where(keep, lp, s.history[s.count]))
        params = jax.tree.map(lambda new, last: jnp.where(keep, new, last), params, s.params)
        resp = jnp.where(keep, e.responsibilities, s.resp)
        return _State(resp, params, history, s.max_iter, count, converged & keep, done, ~e.resolved)

    return lax.while_loop(lambda s: ~s.done, _pass, start)


def fit_mimm(
    data: ModelData,
    prior: MixturePrior,
    covariance: str = "diag",
    max_iter: int = 200,
    tol: float = 1e-6,
    n_init: int = 1,
    seed: int = 0,
) -> MIMMResult:
    """Fit the MIMM by EM from ``n_init`` starts; the one of highest log posterior wins.

    A ValueError if every start reaches a non-finite log posterior at once.

    Args:
        data: from ``model.make_model_data`` (label sets required; its
            features' dtype is the fit's).
        prior: ``make_prior``'s, in the features' dtype.
        covariance: "diag" or "full".
        max_iter: EM iterations at most (a value, not a shape: below
            ``HISTORY_SLOTS`` every value shares one compiled program).
        tol: stop when the log posterior's relative change is below this.
        n_init: starts. The first is deterministic: the M-step on responsibilities
            spread evenly over each bag's label set (``start_posteriors``). Each
            further one spreads them by a flat Dirichlet draw, from ``seed``.
            Each start is one compiled EM (no host round trip per iteration).
    """
    if covariance not in COVARIANCES:
        raise ValueError(f"covariance={covariance!r}: choose one of {COVARIANCES}")
    if int(max_iter) < 0 or int(n_init) < 1:
        raise ValueError(f"need max_iter >= 0 and n_init >= 1, got max_iter={max_iter}, n_init={n_init}")
    rows, max_labels = mixture_data(data)
    shape = MixtureShape(max_labels, covariance)
    tol = np.asarray(tol, rows.features.dtype)
    on_device = jax.device_put(rows)
    best = None
    for restart in range(int(n_init)):
        rng = np.random.default_rng([int(seed), restart]) if restart else None
        state = _start(start_posteriors(rows, rng), data.n_features, int(max_iter), covariance)
        state = _em(state, on_device, prior, tol, shape, fallback=False)
        if bool(state.unresolved):  # near underflow: redo that pass, and go on, in exact arithmetic
            state = state._replace(done=jnp.asarray(False), unresolved=jnp.asarray(False))
            state = _em(state, on_device, prior, tol, shape, fallback=True)
        count = int(state.count)
        history = np.asarray(state.history, np.float64)[:count]
        if count and (best is None or history[-1] > best.log_posterior):
            params = [np.asarray(a) for a in state.params]
            best = MIMMResult(*params, float(history[-1]), history, count - 1, bool(state.converged))
    if best is None:
        raise ValueError(
            "EM reached a non-finite log posterior (a class covariance too ill-conditioned for the "
            "float precision): use covariance='diag', a larger covariance_prior, or float64 "
            "(jax.config.update('jax_enable_x64', True))"
        )
    return best
