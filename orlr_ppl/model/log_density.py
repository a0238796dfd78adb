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
from jax import lax
from numpyro import handlers
from numpyro.infer.util import log_likelihood, potential_energy

from ..dp.packing import canonical_size
from .distribution import BagLabelSet
from .numpyro_model import ModelArrays, ModelShape, join_model_data, orlr_model, sum_to_zero_basis

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


def model_sites(params: Params, arrays: ModelArrays, scales: Scales, shape: ModelShape, fit_intercept: bool):
    """The model's latent and observed sample sites (NumPyro trace entries), run at ``params``."""
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
    latent, observed = model_sites(params, arrays, scales, shape, fit_intercept)
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
    latent, observed = model_sites(params, arrays, scales, shape, fit_intercept)
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
    latent, observed = model_sites(params, arrays, scales, shape, fit_intercept)
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


# -- the exact Hessian, by Louis' identity over the DP's pairwise posteriors ----------------------

HESSIAN_CHUNK_ENTRIES = 1 << 23
"""Most entries of the per-bag (R, K, R, K) moment arrays that ``potential_hessian`` holds at once
(64 MB in float64): the bags go through it in chunks (``hessian_chunks``) of about this size."""


def hessian_chunks(arrays: ModelArrays, shape: ModelShape, fit_intercept: bool) -> tuple[ModelArrays, int]:
    """``arrays`` padded with empty bags so that every bucket splits into the same number of chunks,
    and that number, for ``potential_hessian`` (host arrays; an empty bag adds nothing to it).

    Bucket ``k``'s chunks hold ``ceil(B_k / n)`` bags, ``n`` the least count that keeps
    ``sum_k G_k R^2 K_k^2`` at most ``HESSIAN_CHUNK_ENTRIES``.
    """
    r = shape.n_features + int(fit_intercept)
    k_out = [k + int(shape.novel_class) for k in shape.max_labels]
    entries = sum(int(np.shape(a[1])[0]) * r * r * k * k for a, k in zip(arrays, k_out))
    n = max(1, -(-entries // HESSIAN_CHUNK_ENTRIES))
    out = []
    for x, mask, sets, known in arrays:
        b = int(np.shape(mask)[0])
        extra = -(-b // n) * n - b
        out.append(
            tuple(
                None if a is None else _pad_bags(a, extra, f)
                for a, f in zip((x, mask, sets, known), (0, 0, 0, -1))
            )
        )
    return tuple(out), n


def _pad_bags(a: np.ndarray, extra: int, fill: int) -> np.ndarray:
    """``a`` (B, ...) with ``extra`` more bags of ``fill`` (an empty bag: no instance, no label)."""
    a = np.asarray(a)
    return np.pad(a, ((0, extra),) + ((0, 0),) * (a.ndim - 1), constant_values=fill)


@partial(jax.jit, static_argnums=(3, 4, 5, 6))
def potential_hessian(
    params: Params,
    arrays: ModelArrays,
    scales: Scales,
    shape: ModelShape,
    fit_intercept: bool = True,
    fallback: bool = True,
    n_chunks: int = 1,
) -> tuple[Array, Array]:
    """(P, P) the Hessian of ``potential`` at ``params`` (``W_raw``, ``beta_raw``), exactly, and ()
    whether every bag was resolved in probability space (always True with ``fallback``).

    The order is ``jax.flatten_util.ravel_pytree``'s: ``W_raw`` row by row, then
    ``beta_raw``; P = R (C - 1), R = d (+ 1 with intercepts). For the Normal or flat
    priors, a named leak or none, a novel class and known instance labels (a learnt
    leak, the l2,1 and horseshoe priors: not here). With ``x~`` the features (and a 1),
    ``p_i`` the softmax, ``H`` the (C, C - 1) sum-to-zero basis, and
    ``T_b = sum_i x~_i kron e_{y_i}`` the complete data's statistic, Louis' identity
    gives the likelihood's curvature from the posterior of the hidden labels::

        -d^2 log p(Y | theta) = (I kron H^T) [ sum_i x~_i x~_i^T kron (diag p_i - p_i p_i^T)
                                               - sum_b Cov(T_b | Y_b) ] (I kron H),

    and the prior adds ``1 / prior_scale**2`` on ``W_raw``'s diagonal, ``1 /
    intercept_scale**2`` on ``beta_raw``'s. ``Cov(T_b | Y_b)`` needs every pair of
    instances' joint posterior, ``p(y_i = j | Y) p(y_m = l | y_i = j, Y)``: the DP run
    once more with each instance held at each slot of its bag
    (``BagLabelSet.joint_pair_posteriors``), ``K + 1`` DPs a bag and instance position,
    one position at a time in a scan. The instances' covariance is what the union makes
    negative: where a label must come from one of two instances, taking it in one
    frees the other. The moments are summed over the bags' own K slots, then mapped to
    the classes; ``arrays`` from ``hessian_chunks`` go through in ``n_chunks`` chunks.
    """
    if shape.leak == "learn" or shape.weight_prior != "normal":
        raise ValueError(
            f"potential_hessian covers the Normal prior and a fixed leak, not weight_prior="
            f"{shape.weight_prior!r}, leak={shape.leak!r} (whose sites it would leave out)"
        )
    c = shape.n_classes + int(shape.novel_class)
    d = shape.n_features
    basis = jnp.asarray(sum_to_zero_basis(c), params["W_raw"].dtype)
    w = params["W_raw"] @ basis.T
    beta = params["beta_raw"] @ basis.T if fit_intercept else jnp.zeros((c,), w.dtype)
    coef = jnp.concatenate([w, beta[None]]) if fit_intercept else w  # (R, C)
    r = coef.shape[0]
    slots = [k + int(shape.novel_class) for k in shape.max_labels]

    def _chunk(acc: Array, index: Array) -> tuple[Array, Array]:
        sub = tuple(tuple(_chunk_of(a, index, n_chunks) for a in bucket) for bucket in arrays)
        _, observed = model_sites(params, sub, scales, shape, fit_intercept)
        sites = [(s["fn"], s["value"]) for s in observed]
        masks = [m for _, m, *_ in sub]
        feats = [_with_ones(x, m, fit_intercept) for (x, m, *_) in sub]

        def _position(carry: tuple, i: Array) -> tuple[tuple, None]:
            moments, _, ok = carry
            pairs, resolved = BagLabelSet.joint_pair_posteriors(sites, i, fallback)
            out, margs = [], []
            for xt, mom, pp in zip(feats, moments, pairs):
                joint = pp.weights[:, :, None, None] * pp.conditional  # p(y_i = j, y_m = l | Y)
                right = jnp.einsum("bma,bjml->bjal", xt, joint)
                x_i = lax.dynamic_index_in_dim(xt, jnp.minimum(i, xt.shape[1] - 1), axis=1, keepdims=False)
                out.append(mom + x_i[:, :, None, None, None] * right[:, None])  # E[T T^T] (B, R, K, R, K)
                margs.append(pp.marginals)
            return (out, margs, ok & resolved), None

        start = (
            [jnp.zeros((x.shape[0], r, k, r, k), x.dtype) for x, k in zip(feats, slots)],
            [jnp.zeros(x.shape[:2] + (k,), x.dtype) for x, k in zip(feats, slots)],
            jnp.asarray(True),
        )
        n_max = max(int(x.shape[1]) for x in feats)
        (moments, margs, ok), _ = lax.scan(_position, start, jnp.arange(n_max))
        for site, xt, mask, mom, marg in zip(sites, feats, masks, moments, margs):
            classes, slot_mask = site[0].slot_classes(site[1])
            mean = jnp.einsum("bna,bnj->baj", xt, marg)  # E[T_b | Y_b] over the slots
            cov = mom - mean[:, :, :, None, None] * mean[:, None, None, :, :]
            onehot = jax.nn.one_hot(classes, c, dtype=xt.dtype) * slot_mask[..., None]  # (B, K, C)
            acc = acc - jnp.einsum("bajxl,bjc,bld->acxd", cov, onehot, onehot)
            p = jnp.where(mask[..., None], jax.nn.softmax(xt @ coef, axis=-1), 0.0)
            acc = acc + jnp.einsum("bna,bnx,bnc,cd->acxd", xt, xt, p, jnp.eye(c, dtype=xt.dtype))
            z = (xt[..., :, None] * p[..., None, :]).reshape(-1, r * c)
            acc = acc - (z.T @ z).reshape(r, c, r, c)
        return acc, ok

    acc, ok = lax.scan(_chunk, jnp.zeros((r, c, r, c), w.dtype), jnp.arange(n_chunks))
    hess = jnp.einsum("acxd,ck,dl->akxl", acc, basis, basis).reshape(r * (c - 1), r * (c - 1))
    prior = jnp.zeros((r, c - 1), w.dtype)
    if scales.prior_scale is not None:
        prior = prior.at[:d].set(1.0 / scales.prior_scale**2)
    if fit_intercept and scales.intercept_scale is not None:
        prior = prior.at[d].set(1.0 / scales.intercept_scale**2)
    hess = hess + jnp.diag(prior.reshape(-1))
    return 0.5 * (hess + hess.T), jnp.all(ok)


def _chunk_of(a: Array | None, index: Array, n_chunks: int) -> Array | None:
    """Chunk ``index`` of ``n_chunks`` equal slices of ``a`` along its bag axis (None stays None)."""
    if a is None:
        return None
    size = a.shape[0] // n_chunks
    return lax.dynamic_slice_in_dim(a, index * size, size)


def _with_ones(x: Array, mask: Array, fit_intercept: bool) -> Array:
    """(B, N, R) the features, with a column of ones for the intercepts; zero on padding."""
    if fit_intercept:
        x = jnp.concatenate([x, jnp.ones(x.shape[:-1] + (1,), x.dtype)], axis=-1)
    return jnp.where(mask[..., None], x, 0.0)
