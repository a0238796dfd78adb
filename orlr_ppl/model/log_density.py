"""``orlr_model``'s log density as module-level functions of (parameters, data arrays).

MAP, the NUTS driver and the per-bag log-likelihoods of ``InferenceData`` all
evaluate the one NumPyro model through these functions. The data enter as
traced arrays (``model.split_model_data``) and only the static ``ModelShape``
and ``fit_intercept`` select a compiled program, so a second fit of the same
shape family, or a MAP followed by NUTS, reuses what the first compiled:
``potential_and_grad`` is compiled once and serves both the MAP's L-BFGS and
the NUTS chains' starting states.

Scales are a pair ``(prior_scale, intercept_scale)`` of 0-d arrays or None
(an improper flat prior); None changes the model, hence the compiled program,
a value does not.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
from numpyro.infer.util import log_likelihood, potential_energy

from .numpyro_model import ModelArrays, ModelShape, join_model_data, orlr_model

Array = jax.Array
Params = dict[str, Array]
Scales = tuple[Array | None, Array | None]


def prior_scales(prior_scale: float | None, intercept_scale: float | None, dtype=jnp.float32) -> Scales:
    """The scales as traced 0-d arrays (None stays None)."""
    return tuple(None if s is None else jnp.asarray(s, dtype) for s in (prior_scale, intercept_scale))


def _model_kwargs(scales: Scales, fit_intercept: bool) -> dict:
    return {"prior_scale": scales[0], "intercept_scale": scales[1], "fit_intercept": fit_intercept}


def potential(
    params: Params, arrays: ModelArrays, scales: Scales, shape: ModelShape, fit_intercept: bool = True
) -> Array:
    """``-log p(theta, Y | X)`` (scalar) at raw parameters ``W_raw`` (d, C-1), ``beta_raw`` (C-1,).

    Both sites have real support, so this is also NumPyro's potential energy
    in the unconstrained space that NUTS samples.
    """
    data = join_model_data(arrays, shape)
    return potential_energy(orlr_model, (data,), _model_kwargs(scales, fit_intercept), params)


potential_and_grad = jax.jit(jax.value_and_grad(potential), static_argnums=(3, 4))
"""``(potential, its gradient)``; one compilation per shape family, ``fit_intercept`` and None scale."""


def bucket_log_likelihoods(
    params: Params, arrays: ModelArrays, scales: Scales, shape: ModelShape, fit_intercept: bool = True
) -> tuple[Array, ...]:
    """Per bucket ``k``, (B_k,) ``log p(Y_b | X_b, theta)`` at one parameter point.

    Merge them into bag order with ``ModelData.merge_sites``; the site of
    bucket ``k`` is ``ModelData.site_name(k)``.
    """
    data = join_model_data(arrays, shape)
    sites = log_likelihood(orlr_model, params, data, batch_ndims=0, **_model_kwargs(scales, fit_intercept))
    return tuple(sites[data.site_name(k)] for k in range(len(arrays)))
