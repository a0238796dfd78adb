"""When a point estimate is an optimum: the first-order condition, measured.

An EM or MAP fit has converged when the gradient of the log posterior vanishes
at its estimate, not when its progress slows: EM's steps shrink long before it
arrives wherever the bag labels leave much of the instance labels' information
missing, and in float32 a stalled line search looks like a converged one. The
measure is SciPy's "first-order optimality" (``scipy.optimize.least_squares``'s
``optimality``): the largest component of the gradient, or, under the l2,1
prior (whose penalty ``lam * sum_j ||w_j||`` has a kink at every zero row), of
the least-norm element of the subdifferential::

    row j with w_j != 0:   g_j - lam * w_j / ||w_j||        (every component)
    row j with w_j == 0:   max(0, ||g_j|| - lam)             (one number)

with ``g`` the gradient of the smooth part of the log posterior. It is zero
exactly at a stationary point, and a value ``eps`` bounds the distance in log
posterior to a nearby maximum by about ``eps**2 / (2 h)``, ``h`` the smallest
curvature there (at least ``1 / prior_scale**2`` where the prior dominates).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from ...model.priors import row_norms

Array = jax.Array
Params = dict[str, Array]


def stationarity(ascent: Params, params: Params, l21_strength: Array | float | None = None) -> Array:
    """() the first-order residual at ``params`` given ``ascent``, the smooth part's gradient.

    Args:
        ascent: the gradient of the log posterior (less the l2,1 penalty, if any) at
            ``params``, as a dict of arrays over (some of) the same sites.
        params: the raw parameters (``W_raw`` (d, k) and the rest).
        l21_strength: ``lam = 1 / prior_scale`` of the l2,1 penalty on ``W_raw``'s rows; None:
            the log posterior is smooth and the residual is ``max |ascent|``.
    Returns:
        The largest violation of the first-order condition (module docstring), >= 0.
    """
    parts = [jnp.max(jnp.abs(v)) for k, v in ascent.items() if k != "W_raw" or l21_strength is None]
    if l21_strength is not None and "W_raw" in ascent:
        w, g = params["W_raw"], ascent["W_raw"]
        norms = row_norms(w)
        on = norms > 0
        pulled = g - l21_strength * w / jnp.where(on, norms, 1.0)[:, None]
        rows = jnp.where(on, jnp.max(jnp.abs(pulled), axis=1), jnp.maximum(row_norms(g) - l21_strength, 0.0))
        parts.append(jnp.max(rows))
    return jnp.max(jnp.stack(parts))
