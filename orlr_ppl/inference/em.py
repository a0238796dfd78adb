"""Generalised EM for the ORed-logistic model (Pham, Raich & Fern's ORLR-EM).

E-step: the exact instance posteriors ``r_ic = p(y_i = c | Y_b, X_b, theta)``
from the subset DP. M-step: gradient ascent, with a backtracking (Armijo) line
search, on the expected complete-data log-likelihood plus the log-prior::

    Q(theta; r) = sum_i sum_c r_ic log softmax(W^T x_i + beta)_c + log p(theta).

Every accepted step raises ``Q``, which (the EM inequality) never lowers the
log posterior ``sum_b log p(Y_b | X_b, theta) + log p(theta)``. Parameters are
the model's sum-to-zero ``W_raw``, ``beta_raw`` (see ``orlr_ppl.model``), so EM
and MAP optimise the same objective.
"""

from __future__ import annotations

from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from ..dp.ragged import packed_posteriors
from ..objective import FlatData, instance_scores, log_prior

Array = jax.Array


class EMResult(NamedTuple):
    """An EM fit.

    Attributes:
        W: (d, C) weights; beta: (C,) intercepts (both sum to zero over classes).
        log_posterior: final log likelihood + log prior.
        history: (n_iter + 1,) log posterior at the start and after each iteration.
        n_iter: iterations run.
        converged: whether the relative change fell below ``tol``.
    """

    W: np.ndarray
    beta: np.ndarray
    log_posterior: float
    history: np.ndarray
    n_iter: int
    converged: bool


def _expected_complete(params, data, resp, prior_scale, intercept_scale) -> Array:
    log_probs = jax.nn.log_softmax(instance_scores(params, data), axis=-1)
    return jnp.sum(resp * log_probs) + log_prior(params, prior_scale, intercept_scale)


def fit_em(
    data: FlatData,
    prior_scale: float | None = None,
    intercept_scale: float | None = None,
    max_iter: int = 50,
    tol: float = 1e-6,
    m_steps: int = 10,
    init: dict[str, Array] | None = None,
    fit_intercept: bool = True,
) -> EMResult:
    """Fit by generalised EM.

    Args:
        data: from ``make_flat_data``.
        prior_scale, intercept_scale: Normal prior sds; None (default) is no
            prior, plain maximum likelihood, as in the paper.
        max_iter: EM iterations (the paper's 50 by default).
        tol: stop when the log posterior's relative change is below this.
        m_steps: gradient-ascent steps per M-step.
        init: starting raw parameters; default zeros (uniform probabilities).
        fit_intercept: learn intercepts (``beta_raw``); else they stay zero.
    """
    d, c = data.features.shape[1], data.basis.shape[0]
    dtype = data.features.dtype
    params = init or {"W_raw": jnp.zeros((d, c - 1), dtype)}
    if fit_intercept and "beta_raw" not in params:
        params["beta_raw"] = jnp.zeros((c - 1,), dtype)
    scales = (prior_scale, intercept_scale)

    @jax.jit
    def e_step(params):
        ll, post = packed_posteriors(instance_scores(params, data), data.packed)
        return jnp.sum(ll) + log_prior(params, *scales), post

    q_and_grad = jax.jit(jax.value_and_grad(lambda p, r: _expected_complete(p, data, r, *scales)))
    q_only = jax.jit(lambda p, r: _expected_complete(p, data, r, *scales))

    current, resp = e_step(params)
    history = [float(current)]
    step, converged, n_iter = 1.0, False, 0
    for n_iter in range(1, max_iter + 1):  # noqa: B007 - n_iter is reported
        for _ in range(m_steps):
            q0, grad = q_and_grad(params, resp)
            sq = float(sum(jnp.sum(g * g) for g in jax.tree.leaves(grad)))
            if sq == 0.0:
                break
            step *= 2.0  # try a longer step than last time's accepted one
            while step > 1e-12:
                trial = jax.tree.map(lambda p, g, s=step: p + s * g, params, grad)
                # Armijo: accept when Q rises by at least a fraction of the linear prediction.
                if float(q_only(trial, resp)) >= float(q0) + 1e-4 * step * sq:
                    params = trial
                    break
                step *= 0.5
            else:
                break
        new, resp = e_step(params)
        history.append(float(new))
        if abs(history[-1] - history[-2]) <= tol * max(abs(history[-2]), 1.0):
            converged = True
            break
    basis = np.asarray(data.basis)
    return EMResult(
        np.asarray(params["W_raw"]) @ basis.T,
        np.asarray(params.get("beta_raw", np.zeros(c - 1))) @ basis.T,
        history[-1],
        np.asarray(history),
        n_iter,
        converged,
    )
