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

from collections.abc import Iterable, Sequence
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from .bags import (
    DEFAULT_MAX_LABELS,
    PackedBags,
    check_label_sets,
    pack_bags,
    packed_log_likelihood,
    packed_posteriors,
)
from .model import check_features, sum_to_zero_basis

Array = jax.Array


class FlatData(NamedTuple):
    """Bags laid end to end, for objectives over all instances at once.

    Attributes:
        features: (n_instances, d) float features.
        packed: the DP packing of the bags' label sets.
        basis: (C, C-1) sum-to-zero basis.
    """

    features: Array
    packed: PackedBags
    basis: Array


def make_flat_data(
    bags: Sequence[np.ndarray],
    label_sets: Sequence[Iterable[int]],
    n_classes: int,
    max_labels: int = DEFAULT_MAX_LABELS,
) -> FlatData:
    """Validate bags and label sets and lay them out for EM."""
    feats = check_features(bags)
    sets = check_label_sets(label_sets, [len(x) for x in feats], n_classes, max_labels)
    packed = pack_bags([len(x) for x in feats], sets)
    x = jnp.asarray(np.concatenate(feats))
    return FlatData(x, packed, jnp.asarray(sum_to_zero_basis(n_classes), x.dtype))


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


def _log_prior(params: dict[str, Array], prior_scale: float | None, intercept_scale: float | None) -> Array:
    total = jnp.zeros((), params["W_raw"].dtype)
    for name, scale in (("W_raw", prior_scale), ("beta_raw", intercept_scale)):
        if scale is not None:
            z = params[name] / scale
            total = total - 0.5 * jnp.sum(z * z) - z.size * (np.log(scale) + 0.5 * np.log(2 * np.pi))
    return total


def instance_scores(params: dict[str, Array], data: FlatData) -> Array:
    """(n_instances, C) logits ``x W + beta`` from the raw parameters."""
    return data.features @ (params["W_raw"] @ data.basis.T) + params["beta_raw"] @ data.basis.T


def log_posterior(
    params: dict[str, Array], data: FlatData, prior_scale: float | None, intercept_scale: float | None
) -> Array:
    """``sum_b log p(Y_b | X_b, theta) + log p(theta)`` (scalar); same as ``orlr_model``'s."""
    ll = packed_log_likelihood(instance_scores(params, data), data.packed)
    return jnp.sum(ll) + _log_prior(params, prior_scale, intercept_scale)


def _expected_complete(params, data, resp, prior_scale, intercept_scale) -> Array:
    log_probs = jax.nn.log_softmax(instance_scores(params, data), axis=-1)
    return jnp.sum(resp * log_probs) + _log_prior(params, prior_scale, intercept_scale)


def fit_em(
    data: FlatData,
    prior_scale: float | None = None,
    intercept_scale: float | None = None,
    max_iter: int = 50,
    tol: float = 1e-6,
    m_steps: int = 10,
    init: dict[str, Array] | None = None,
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
    """
    d, c = data.features.shape[1], data.basis.shape[0]
    dtype = data.features.dtype
    params = init or {"W_raw": jnp.zeros((d, c - 1), dtype), "beta_raw": jnp.zeros((c - 1,), dtype)}
    scales = (prior_scale, intercept_scale)

    @jax.jit
    def e_step(params):
        ll, post = packed_posteriors(instance_scores(params, data), data.packed)
        return jnp.sum(ll) + _log_prior(params, *scales), post

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
        np.asarray(params["beta_raw"]) @ basis.T,
        history[-1],
        np.asarray(history),
        n_iter,
        converged,
    )
