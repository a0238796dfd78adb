"""The ORed-logistic model as a NumPyro model.

Instance ``i`` of bag ``b`` has ``y_bi ~ Categorical(softmax(W^T x_bi + beta))``
and the bag's label set is ``Y_b = union_i y_bi`` (``BagLabelSet``). One model
serves MAP/EM point estimates and full posteriors (NUTS, SVI).

Identifiability. Softmax probabilities do not change when one vector is added
to every class's weights, so the raw (d, C) weights have a flat ridge that
NUTS wanders along. The model uses the *sum-to-zero* parameterisation:
``W = W_raw @ H.T`` with ``H`` (C, C-1) an orthonormal basis of the vectors
orthogonal to ``1`` (Helmert contrasts), and likewise ``beta = beta_raw @ H.T``.
Every class is treated alike (unlike a reference class), ``W`` sums to zero
over classes, and ``||W||_F = ||W_raw||_F``.

Priors replace the l2 regulariser. ``W_raw ~ Normal(0, prior_scale)`` gives a
log-prior ``-||W||^2 / (2 prior_scale^2)``, so an l2 penalty ``lam * ||W||^2``
corresponds to ``prior_scale = 1 / sqrt(2 * lam)`` (and ``lam = 1 / (2
prior_scale^2)``). Because an l2 penalty already drives the overparameterised
softmax weights to sum to zero over classes, the MAP of this model equals the
l2-regularised maximum likelihood of the usual (d, C) parameterisation.
``prior_scale=None`` is an improper flat prior: plain maximum likelihood.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import numpyro
import numpyro.distributions as dist
from numpyro import handlers

from .distribution import BagLabelSet

# The model's data types, re-exported: inference imports them beside the model.
from .model_data import (  # noqa: F401
    LEAK_PRIOR,
    ModelArrays,
    ModelBucket,
    ModelData,
    ModelShape,
    fitted_leak,
    join_model_data,
    make_model_data,
    make_model_data_flat,
    split_model_data,
    start_params,
)
from .priors import group_horseshoe_rows, weight_prior

Array = jax.Array


def sum_to_zero_basis(n_classes: int) -> np.ndarray:
    """(C, C-1) orthonormal basis of the vectors summing to zero (Helmert).

    Column ``k`` is ``(1, ..., 1, -(k+1), 0, ..., 0) / sqrt((k+1)(k+2))``.
    """
    basis = np.zeros((n_classes, n_classes - 1))
    for k in range(n_classes - 1):
        basis[: k + 1, k] = 1.0
        basis[k + 1, k] = -(k + 1)
        basis[:, k] /= np.sqrt((k + 1) * (k + 2))
    return basis


def class_weights(
    n_features: int,
    n_classes: int,
    prior_scale: float | None,
    intercept_scale: float | None,
    fit_intercept: bool = True,
    family: str = "normal",
) -> tuple[Array, Array]:
    """Sample the sum-to-zero weights; returns ``W`` (d, C) and ``beta`` (C,).

    Sites: ``W_raw`` (d, C-1), ``beta_raw`` (C-1,; only with ``fit_intercept``)
    and the deterministic ``W``, ``beta``. A ``None`` scale is an improper
    flat prior. Without ``fit_intercept``, ``beta`` is zero. ``family``: the
    prior of ``W_raw``'s rows (``priors.weight_prior``); intercepts are Normal.
    """
    basis = jnp.asarray(sum_to_zero_basis(n_classes))

    def _raw(name: str, shape: tuple[int, ...], scale: float | None) -> Array:
        if scale is None:
            prior = dist.ImproperUniform(dist.constraints.real, (), shape)
        else:
            prior = dist.Normal(0.0, scale).expand(shape).to_event(len(shape))
        return numpyro.sample(name, prior)

    if family == "group_horseshoe":
        w_raw = group_horseshoe_rows(n_features, n_classes - 1, prior_scale)
    else:
        w_raw = numpyro.sample("W_raw", weight_prior(family, (n_features, n_classes - 1), prior_scale))
    if fit_intercept:
        b_raw = _raw("beta_raw", (n_classes - 1,), intercept_scale)
    else:
        b_raw = jnp.zeros((n_classes - 1,), w_raw.dtype)
    w = numpyro.deterministic("W", w_raw @ basis.T.astype(w_raw.dtype))
    beta = numpyro.deterministic("beta", b_raw @ basis.T.astype(b_raw.dtype))
    return w, beta


def orlr_model(
    data: ModelData,
    prior_scale: float | None = 1.0,
    intercept_scale: float | None = 10.0,
    subsample_size: int | None = None,
    observed: bool = True,
    fit_intercept: bool = True,
    likelihood_scale: float | Array | None = None,
) -> None:
    """ORed-logistic NumPyro model.

    Args:
        data: from ``make_model_data``.
        prior_scale: scale of the weights' prior (``data.weight_prior``): the
            Normal's sd (``1/sqrt(2 lam)`` for an l2 strength ``lam``), or the
            group Laplace's scale (``1/lam`` for an l2,1 strength ``lam``);
            None for a flat prior (maximum likelihood).
        intercept_scale: sd of the Normal prior on the intercepts; None flat.
        subsample_size: bags per minibatch (SVI). Each label-set bucket has its
            own plate ``bags_k`` and draws its share ``~ B_k / B`` of the
            minibatch, so the estimate is stratified and unbiased.
        observed: condition on ``data``'s label sets; False simulates them.
        fit_intercept: learn per-class intercepts ``beta`` (else zero).
        likelihood_scale: multiply the label-set sites' log-likelihood by this
            (``numpyro.handlers.scale``), the prior's not: ``n_bags /
            batch_bags`` makes a minibatch's log joint an unbiased estimate of
            the whole data's (``inference.streaming.stochastic_map``). None: unscaled.

    Sites: ``W_raw``, ``beta_raw`` (latent), ``W``, ``beta`` (deterministic),
    and per bucket ``k`` the label sets ``Y_k`` (B_k, C) in plate ``bags_k``.
    With ``data.novel_class``, ``W`` and ``beta`` have ``C + 1`` columns, the
    last the novel class. With ``data.leak == "learn"``, also ``leak_logit``
    (latent, real: the logit of the leak probability, so that every method
    works on one unconstrained space; its prior is the Beta(``leak_prior``)
    density carried through the logit) and ``leak`` (deterministic).
    """
    w, beta = class_weights(
        data.n_features, data.n_outputs, prior_scale, intercept_scale, fit_intercept, data.weight_prior
    )
    eps = leak_probability(data)
    if likelihood_scale is not None:
        with handlers.scale(scale=likelihood_scale):
            _label_sets(data, w, beta, subsample_size, observed, eps)
    else:  # unwrapped, so the trace is the one every other method reads
        _label_sets(data, w, beta, subsample_size, observed, eps)


def leak_prior_on_logit(leak_prior: tuple[float, float]) -> dist.Distribution:
    """The Beta(a, b) prior of the leak probability, as a density on its logit (real support)."""
    a, b = leak_prior
    return dist.TransformedDistribution(dist.Beta(a, b), dist.transforms.SigmoidTransform().inv)


def leak_probability(data: ModelData) -> Array | float | None:
    """The leak probability the model uses: None, the fixed value, or the ``leak`` site."""
    if data.leak is None or not isinstance(data.leak, str):
        return data.leak
    z = numpyro.sample("leak_logit", leak_prior_on_logit(data.leak_prior))
    return numpyro.deterministic("leak", jax.nn.sigmoid(z))


def _label_sets(
    data: ModelData,
    w: Array,
    beta: Array,
    subsample_size: int | None,
    observed: bool,
    eps: Array | float | None = None,
) -> None:
    """The model's per-bucket label-set sites ``Y_k`` given the weights (and the leak)."""
    for k, bucket in enumerate(data.buckets):
        size = bucket.mask.shape[0]
        sub = None
        if subsample_size is not None and subsample_size < data.n_bags:
            sub = min(size, max(1, round(subsample_size * size / data.n_bags)))
        with numpyro.plate(f"bags_{k}", size, subsample_size=sub) as idx:
            take = (lambda a: a) if sub is None else (lambda a: jnp.asarray(a)[idx])
            x = take(bucket.features)
            logits = x @ w.astype(x.dtype) + beta.astype(x.dtype)
            obs = take(bucket.label_sets) if observed and bucket.label_sets is not None else None
            known = None if bucket.instance_labels is None else take(bucket.instance_labels)
            label_set = BagLabelSet(
                logits,
                take(bucket.mask),
                max_labels=bucket.max_labels,
                novel=data.novel_class,
                leak=None if eps is None else jnp.asarray(eps, logits.dtype),
                instance_labels=known,
                # Packing checked every label set against its bucket's size; no run-time check.
                validate_args=False,
            )
            numpyro.sample(data.site_name(k), label_set, obs=obs)
