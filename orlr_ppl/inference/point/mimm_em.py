"""EM for the multi-instance mixture model (MIMM, Foulds & Smyth), on multi-label bags.

The model, its prior, the exact E-step (the subset DP through ``BagLabelSet``)
and the closed-form MAP M-step are ``mimm_steps``; this module runs them
through ``em_driver``, M-step first (each pass's M-step proposes parameters and
the E-step after it judges them). The whole fit is the driver's one
``lax.while_loop`` in a module-level jitted program (``_em``) with the data as
arguments: it compiles once per shape family (bucket shapes, classes,
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

from typing import NamedTuple

import jax
import numpy as np

from ...model.model_data import ModelData
from . import em_driver
from .em_driver import EMSpec, EMState, EStepOut
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


HISTORY_SLOTS = 256
"""The history buffer's least length: fits with ``max_iter`` below it share one compiled program."""


def history_slots(max_iter: int) -> int:
    """Length of the history buffer: ``HISTORY_SLOTS``, or the power of two above ``max_iter``."""
    return em_driver.history_length(max_iter, HISTORY_SLOTS)


def _start(resp: np.ndarray, n_features: int, max_iter: int, covariance: str) -> EMState:
    """The state before the first M-step, on (M, C) responsibilities ``resp``, as host arrays.

    Host arrays: no program of its own to compile. Its parameters (uniform weights, zero
    means, unit covariances) are a placeholder, returned only by a fit whose first
    proposal is not kept.
    """
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
    nan = np.asarray(np.nan, dtype)  # the MIMM's stopping test is the relative change: no residual
    return EMState(params, (), resp, history, np.asarray(0), no, no, no, (), np.asarray(max_iter), nan)


# -- the MIMM's step functions for ``em_driver.run`` --------------------------------------------------


class _Data(NamedTuple):
    """The arrays the MIMM's step functions read: the bags (``mixture_data``) and the prior."""

    bags: MixtureData
    prior: MixturePrior


def _e_step(shape: MixtureShape, data: _Data, params: MixtureParams, key: tuple, fallback: bool) -> EStepOut:
    """The exact E-step (``mimm_steps.e_step``): ``sum_b log p(X_b, Y_b)`` and (M, C) responsibilities."""
    e = e_step(params, data.bags, shape, fallback)
    return EStepOut(e.log_likelihood, e.resolved, e.responsibilities, key)


def _m_step(
    shape: MixtureShape, data: _Data, params: MixtureParams, carry: tuple, resp: Array
) -> tuple[MixtureParams, tuple]:
    """The closed-form MAP M-step (``mimm_steps.m_step``) on (M, C) responsibilities; nothing carried."""
    return m_step(resp, data.bags.features, data.prior, shape.covariance), carry


def _log_prior(shape: MixtureShape, data: _Data, params: MixtureParams) -> Array:
    """() ``log p(theta)`` (``mimm_steps.log_prior``)."""
    return log_prior(params, data.prior, shape.covariance)


@em_driver.program("shape", "fallback")
def _em(
    start: EMState, data: MixtureData, prior: MixturePrior, tol: Array, shape: MixtureShape, fallback: bool
) -> EMState:
    """The whole EM from ``start``: ``em_driver.run`` with the MIMM's steps, M-step first.

    Each pass takes the M-step on the last kept responsibilities and the E-step at its
    parameters, so the returned parameters are those the last kept history entry was
    computed at. A non-finite log posterior (a covariance beyond the float's Cholesky)
    ends the fit, unconverged, at the last parameters whose log posterior was finite.
    ``fallback``: the DP's log-space rerun compiled in (``em_driver.fit``).
    """
    spec = EMSpec(_e_step, _m_step, _log_prior, config=shape, m_step_first=True)
    return em_driver.run(spec, start, _Data(data, prior), tol, fallback)


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
        start = _start(start_posteriors(rows, rng), data.n_features, int(max_iter), covariance)
        state = em_driver.fit(
            lambda s, fallback: _em(s, on_device, prior, tol, shape, fallback=fallback), start
        )
        history = np.asarray(state.history, np.float64)[: int(state.n_iter) + 1]
        history = history[: len(history) - int(np.isnan(history[-1]))]  # less a last proposal not kept
        count = len(history)
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
