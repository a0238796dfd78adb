"""``orlr_model``'s log density as module-level functions of (parameters, data arrays).

MAP, EM, the NUTS driver and the per-bag log-likelihoods of the posterior object
all evaluate the one NumPyro model through these functions: EM's E-step and
M-step objective read the model's own trace (its priors and its
``BagLabelSet`` sites), so "one model serves every method" holds by
construction. The data enter as
traced arrays (``model.split_model_data``) and only the static ``ModelShape``
and ``fit_intercept`` select a compiled program, so a second fit of the same
shape family, or a MAP followed by NUTS, reuses what the first compiled:
``potential_and_grad_on_host`` is compiled once and serves both the MAP's
L-BFGS and the NUTS chains' starting states.

The prior's scales travel as ``Scales``: 0-d arrays or None (an improper flat
prior); None changes the model, hence the compiled program, a value does not.
"""

from __future__ import annotations

from functools import partial
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from numpyro import handlers
from numpyro.infer.util import log_likelihood, potential_energy

from ..dp.packing import canonical_size
from .distribution import BagLabelSet
from .numpyro_model import ModelArrays, ModelShape, join_model_data, orlr_model

Array = jax.Array
Params = dict[str, Array]


class Scales(NamedTuple):
    """The model's scalar settings that enter traced: each a 0-d array, or None.

    prior_scale: the weight prior's scale (None: a flat prior).
    intercept_scale: the intercept prior's scale (None: a flat prior).
    likelihood_power: ``k`` in ``p(theta) p(Y | theta)**k`` (``orlr_model``'s
        ``likelihood_scale``); None is the posterior itself (k = 1). SBC's
        deliberately broken posteriors set it.
    """

    prior_scale: Array | None
    intercept_scale: Array | None
    likelihood_power: Array | None = None


def prior_scales(prior_scale: float | None, intercept_scale: float | None, dtype=np.float32) -> Scales:
    """The scales as 0-d arrays, traced when passed to a jitted function (None stays None).

    Host arrays: a device array built here would compile a small program of its own.
    """
    return Scales(*(None if s is None else np.asarray(s, dtype) for s in (prior_scale, intercept_scale)))


def _model_kwargs(scales: Scales, fit_intercept: bool) -> dict:
    return {
        "prior_scale": scales.prior_scale,
        "intercept_scale": scales.intercept_scale,
        "fit_intercept": fit_intercept,
        "likelihood_scale": scales.likelihood_power,
    }


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


class EStep(NamedTuple):
    """EM's E-step at one parameter point.

    Attributes:
        log_joint: () ``log p(theta) + sum_b log p(Y_b | X_b, theta)``, the
            negative of ``potential``.
        posteriors: per bucket ``k``, (B_k, N_k, C) instance posteriors
            ``p(y_bi = c | Y_b, X_b, theta)``, zero on padding.
        log_likelihoods: per bucket ``k``, (B_k,) ``log p(Y_b | X_b, theta)``
            (zero on padding bags), whose sum with the log prior is ``log_joint``.
        resolved: () whether the DP resolved every bag in probability space;
            always True with the log-space fallback, and where False without
            it, the other fields are inexact.
        leaked: with a leak, per bucket ``k``, (B_k, C) the chance that a leak
            switched each class of each bag on; else None.
    """

    log_joint: Array
    posteriors: tuple[Array, ...]
    log_likelihoods: tuple[Array, ...]
    resolved: Array
    leaked: tuple[Array, ...] | None = None


def _trace(params: Params, arrays: ModelArrays, scales: Scales, shape: ModelShape, fit_intercept: bool):
    """The model's trace at ``params``."""
    data = join_model_data(arrays, shape)
    model = handlers.substitute(orlr_model, data=params)
    return handlers.trace(model).get_trace(data, **_model_kwargs(scales, fit_intercept))


def _sites(params: Params, arrays: ModelArrays, scales: Scales, shape: ModelShape, fit_intercept: bool):
    """The model's latent and observed sample sites, run at ``params``."""
    tr = _trace(params, arrays, scales, shape, fit_intercept)
    samples = [s for s in tr.values() if s["type"] == "sample"]
    latent = [s for s in samples if not s["is_observed"]]
    observed = [s for s in samples if s["is_observed"]]
    return latent, observed


def _log_prior(latent: list[dict]) -> Array:
    # ImproperUniform's log_prob is 0: a None scale adds nothing, as in the model's density.
    return sum(jnp.sum(s["fn"].log_prob(s["value"])) for s in latent)


def log_densities(
    params: Params, arrays: ModelArrays, scales: Scales, shape: ModelShape, fit_intercept: bool = True
) -> tuple[Array, tuple[Array, ...]]:
    """``potential`` () and ``bucket_log_likelihoods`` (per bucket (B_k,)) at one parameter point,
    from one run of the model: each bucket's DP runs once for both."""
    latent, observed = _sites(params, arrays, scales, shape, fit_intercept)
    lls = tuple(s["fn"].log_prob(s["value"]) for s in observed)
    scaled = sum(jnp.sum(ll) * (1.0 if s["scale"] is None else s["scale"]) for s, ll in zip(observed, lls))
    return -(_log_prior(latent) + scaled), lls


@partial(jax.jit, static_argnums=(3, 4))
def draws_log_densities(
    draws: Params, arrays: ModelArrays, scales: Scales, shape: ModelShape, fit_intercept: bool = True
) -> tuple[Array, tuple[Array, ...]]:
    """``log_densities`` at each of S draws (each site (S, ...)), 16 draws at a time: (S,) and
    per bucket (S, B_k).

    For a sampler that does not compute them along the way (SVI): the draws' log joint, which
    weights an approximate posterior's draws towards the posterior, and the posterior object's
    ``log_likelihood`` group (PSIS-LOO's input). Compiled once per shape family, so refits reuse it.
    """
    return jax.lax.map(lambda p: log_densities(p, arrays, scales, shape, fit_intercept), draws, batch_size=16)


def e_step(
    params: Params,
    arrays: ModelArrays,
    scales: Scales,
    shape: ModelShape,
    fit_intercept: bool = True,
    fallback: bool = True,
) -> EStep:
    """Log joint and instance posteriors from the model's ``BagLabelSet`` sites, in one DP call.

    ``fallback=False`` leaves the DP's log-space rerun out of the program (see
    ``EStep.resolved``).
    """
    latent, observed = _sites(params, arrays, scales, shape, fit_intercept)
    results, resolved = BagLabelSet.joint_posteriors([(s["fn"], s["value"]) for s in observed], fallback)
    log_joint = _log_prior(latent) + sum(jnp.sum(r.log_likelihood) for r in results)
    posteriors = tuple(r.posteriors for r in results)
    leaked = None if shape.leak is None else tuple(r.leak_posteriors for r in results)
    return EStep(log_joint, posteriors, tuple(r.log_likelihood for r in results), resolved, leaked)


def expected_log_joint(
    params: Params,
    posteriors: tuple[Array, ...],
    arrays: ModelArrays,
    scales: Scales,
    shape: ModelShape,
    fit_intercept: bool = True,
) -> Array:
    """EM's ``Q(theta; r) = log p(theta) + sum_k E_r[log p(y | X, theta)]`` (scalar).

    ``posteriors`` are the responsibilities ``r`` per bucket, as ``e_step``
    returns them. ``Q`` is concave in the raw parameters, and a rise in ``Q``
    never lowers the log joint (the EM inequality).
    """
    latent, observed = _sites(params, arrays, scales, shape, fit_intercept)
    expected = sum(jnp.sum(s["fn"].expected_complete_log_prob(r)) for s, r in zip(observed, posteriors))
    return _log_prior(latent) + expected


class FlatRows(NamedTuple):
    """The buckets' real instances as rows, for an M-step that skips their padding.

    Attributes:
        features: (M, d) features of every real instance, zero rows past them;
            ``M`` is a ``canonical_size`` (8 steps an octave), so folds of similar
            size share programs.
        cells: (M,) int32 each row's cell among the buckets' (B_k * N_k) cells
            laid end to end; rows past the real ones point one past the last cell.
    """

    features: np.ndarray
    cells: np.ndarray


def flat_rows(arrays: ModelArrays, max_instances: int = 0) -> FlatRows:
    """``FlatRows`` of host ``arrays`` (``split_model_data``), built on the host once per fit.

    ``max_instances`` (``ModelData.max_instances``, from a shared layout): size
    the rows for that many instances, so that every dataset of the layout gets
    the same ``M``; 0 sizes them for these instances.
    """
    masks = [np.asarray(m).reshape(-1) for _, m, *_ in arrays]
    offsets = np.cumsum([0] + [len(m) for m in masks])
    cells = np.concatenate([off + np.flatnonzero(m) for off, m in zip(offsets, masks)])
    feats = np.concatenate([np.asarray(x).reshape(len(m), -1)[m] for (x, *_), m in zip(arrays, masks)])
    # Eight steps an octave (at most 1.13x padding): the rows are the M-step's matmul, most of its
    # cost, and the ten folds of HJA (4,413-4,580 instances) still share one size, 4,608.
    rows = canonical_size(max(len(cells), int(max_instances)), steps=8)
    extra = rows - len(cells)
    return FlatRows(
        np.pad(feats, ((0, extra), (0, 0))),
        np.pad(cells, (0, extra), constant_values=offsets[-1]).astype(np.int32),
    )


def flat_responsibilities(posteriors: tuple[Array, ...], rows: FlatRows) -> Array:
    """(M, C) the rows' responsibilities from ``e_step``'s per-bucket (B_k, N_k, C); zero past real rows."""
    n_classes = posteriors[0].shape[-1]
    cells = [r.reshape(-1, n_classes) for r in posteriors] + [jnp.zeros((1, n_classes), posteriors[0].dtype)]
    return jnp.concatenate(cells)[rows.cells]


def expected_log_joint_flat(
    params: Params,
    responsibilities: Array,
    rows: FlatRows,
    arrays: ModelArrays,
    scales: Scales,
    shape: ModelShape,
    fit_intercept: bool = True,
) -> Array:
    """``expected_log_joint`` on ``rows`` (``flat_responsibilities``), with no padded instance.

    The same ``Q``: the model's log prior and its ``W``, ``beta`` (deterministic
    sites), and the label-set sites' expected complete log-likelihood summed
    over real instances only. A fit evaluates ``Q`` many times per E-step, and
    on the buckets half or more of its matmul is padding.
    """
    tr = _trace(params, arrays, scales, shape, fit_intercept)
    latent = [s for s in tr.values() if s["type"] == "sample" and not s["is_observed"]]
    x = rows.features
    logits = x @ tr["W"]["value"].astype(x.dtype) + tr["beta"]["value"].astype(x.dtype)
    return _log_prior(latent) + jnp.sum(responsibilities * jax.nn.log_softmax(logits, axis=-1))


def _fisher_value_and_grad(
    params: Params, arrays: ModelArrays, scales: Scales, shape: ModelShape, fit_intercept: bool
) -> tuple[Array, Params, Array]:
    # Fisher's identity: at theta, grad log p(theta, Y) = grad Q(theta; r(theta)) with r held fixed,
    # because each bag's likelihood is the posterior-weighted sum over the complete labellings.
    e = e_step(params, arrays, scales, shape, fit_intercept, fallback=False)
    post = jax.lax.stop_gradient(e.posteriors)
    grad = jax.grad(expected_log_joint)(params, post, arrays, scales, shape, fit_intercept)
    return -e.log_joint, jax.tree.map(jnp.negative, grad), e.resolved


_fisher_jit = jax.jit(_fisher_value_and_grad, static_argnums=(3, 4))


def potential_and_grad_on_host(
    params: Params, arrays: ModelArrays, scales: Scales, shape: ModelShape, fit_intercept: bool = True
) -> tuple[Array, Params]:
    """``potential_and_grad``'s values, for callers that return to the host after each call (L-BFGS).

    The E-step's DP (probability space only, all buckets in shared scans)
    gives the potential, and the gradient of ``Q`` at its posteriors gives the
    gradient, by Fisher's identity: a smaller program to compile than
    ``potential_and_grad``, which runs one DP per bucket, each with its
    log-space fallback. A bag near underflow (the flag
    the E-step returns)
    sends the call to ``potential_and_grad``, as does a learnt leak, whose
    parameter ``Q`` leaves out, or a likelihood power (``Scales``), which the
    E-step's value and ``Q`` leave out.
    """
    if shape.leak != "learn" and scales.likelihood_power is None:
        value, grad, resolved = _fisher_jit(params, arrays, scales, shape, fit_intercept)
        if bool(resolved):
            return value, grad
    return potential_and_grad(params, arrays, scales, shape, fit_intercept)
