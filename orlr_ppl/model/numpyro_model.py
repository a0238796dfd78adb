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

from collections.abc import Iterable, Sequence
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
import numpyro
import numpyro.distributions as dist
from numpyro import handlers

from ..dp.packing import Layout, PackedBags, pack_bags, pack_label_matrix
from ..dp.validation import DEFAULT_MAX_LABELS, check_features, check_flat_bags, check_label_sets
from .distribution import BagLabelSet

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


class ModelBucket(NamedTuple):
    """Bags of one label-set size, padded to one instance count.

    Attributes:
        features: (B_k, N_k, d) instance features (zero on padding).
        mask: (B_k, N_k) bool, real instances.
        label_sets: (B_k, C) int32 multi-hot observed label sets, or None.
        bag_ids: (R_k,) the input positions of the first ``R_k <= B_k`` bags;
            the rest are padding (``make_model_data(canonical_shapes=True)``),
            with no instances and an empty label set. None inside a compiled
            program (``join_model_data``), which never needs them.
        max_labels: label-set size of the bucket (the DP's K), or the cap
            when labels are unknown.
    """

    features: np.ndarray
    mask: np.ndarray
    label_sets: np.ndarray | None
    bag_ids: np.ndarray | None
    max_labels: int


class ModelData(NamedTuple):
    """Bags packed for ``orlr_model`` (see ``make_model_data``)."""

    buckets: tuple[ModelBucket, ...]
    n_bags: int
    n_features: int
    n_classes: int
    max_instances: int = 0  # from a shared ``Layout``: instances of any dataset packed alike (0: unknown)

    def site_name(self, k: int) -> str:
        """Name of bucket ``k``'s label-set site (its plate is ``bags_k``)."""
        return f"Y_{k}"

    def merge_sites(self, samples: dict[str, Array]) -> np.ndarray:
        """Stack per-bucket site values back into bag order.

        Args:
            samples: ``{"Y_k": (S, B_k, ...)}`` as returned by ``Predictive``
                or a ``log_likelihood`` computation.
        Returns:
            (S, B, ...) array in the input bag order (padding bags dropped).
        """
        parts = [np.asarray(samples[self.site_name(k)]) for k in range(len(self.buckets))]
        out = np.empty(parts[0].shape[:1] + (self.n_bags,) + parts[0].shape[2:], parts[0].dtype)
        for part, bucket in zip(parts, self.buckets):
            out[:, bucket.bag_ids] = part[:, : len(bucket.bag_ids)]
        return out


class ModelShape(NamedTuple):
    """What a compiled program of ``orlr_model`` depends on besides array shapes (hashable).

    The bag count is left out (the buckets' shapes hold it), so that datasets
    whose buckets pad to the same canonical shapes share a program.

    Attributes:
        max_labels: per bucket, its DP's label-slot count K.
        n_features, n_classes: as ``ModelData``.
    """

    max_labels: tuple[int, ...]
    n_features: int
    n_classes: int


ModelArrays = tuple[tuple[Array, Array, Array | None], ...]
"""Per bucket ``(features (B_k, N_k, d), mask (B_k, N_k), label_sets (B_k, C) or None)``."""


def split_model_data(data: ModelData) -> tuple[ModelArrays, ModelShape]:
    """``ModelData`` as traced arrays plus a static shape, for module-level jitted functions.

    Jitting a function of ``(arrays, shape)`` with ``shape`` static compiles
    once per shape family, where a closure over ``data`` would compile anew
    for every fit.
    """
    arrays = tuple((b.features, b.mask, b.label_sets) for b in data.buckets)
    shape = ModelShape(tuple(int(b.max_labels) for b in data.buckets), data.n_features, data.n_classes)
    return arrays, shape


def join_model_data(arrays: ModelArrays, shape: ModelShape) -> ModelData:
    """Inverse of ``split_model_data``, without ``bag_ids`` (None); ``n_bags`` counts padding bags."""
    buckets = tuple(ModelBucket(x, m, y, None, k) for (x, m, y), k in zip(arrays, shape.max_labels))
    n_bags = sum(int(m.shape[0]) for _, m, _ in arrays)
    return ModelData(buckets, n_bags, shape.n_features, shape.n_classes)


def make_model_data(
    bags: Sequence[np.ndarray],
    label_sets: Sequence[Iterable[int]] | None,
    n_classes: int,
    max_labels: int = DEFAULT_MAX_LABELS,
    dtype: type = np.float32,
    canonical_shapes: bool = False,
    layout: Layout | None = None,
) -> ModelData:
    """Validate and pack bags for ``orlr_model``.

    Args:
        bags: B arrays (n_b, d) of instance features (add a bias column
            yourself or rely on the model's intercept).
        label_sets: B iterables of class indices, or None (simulation).
        n_classes: C.
        max_labels: cap on label-set size (the DP holds ``2**K`` states).
        dtype: float dtype of the packed features.
        canonical_shapes: pad the buckets to canonical sizes
            (``dp.packing.canonical_size``) with bags that change no result,
            so that fits on other folds or datasets of similar shape reuse
            compiled programs; worth it where compiling dominates (EM, MAP).
        layout: pack into exactly these buckets (``dp.packing.shared_layout``
            of every fold of a cross-validation, say), so that all share one
            program; a ValueError if the bags do not fit it.
    """
    feats = check_features(bags)
    n_inst = [x.shape[0] for x in feats]
    sets = None if label_sets is None else check_label_sets(label_sets, n_inst, n_classes, max_labels)
    packed = pack_bags(n_inst, sets, canonical=canonical_shapes, layout=None if sets is None else layout)
    data = _model_data(packed, np.concatenate(feats).astype(dtype), sets is not None, n_classes, max_labels)
    return data if layout is None else data._replace(max_instances=int(layout.max_instances))


def make_model_data_flat(
    features: np.ndarray,
    sizes: np.ndarray,
    label_matrix: np.ndarray | None,
    n_classes: int,
    max_labels: int = DEFAULT_MAX_LABELS,
    dtype: type = np.float32,
    canonical_shapes: bool = False,
    first_bag: int = 0,
    source: str = "",
    layout: Layout | None = None,
) -> ModelData:
    """``make_model_data`` on bags held as flat arrays, with no Python loop over bags.

    The same ``ModelData`` as ``make_model_data`` on the same bags, for
    collections of millions of bags or minibatches streamed from a store
    (``data.store``).

    Args:
        features: (n_instances, d) instance features, bag after bag.
        sizes: (B,) instance count of each bag.
        label_matrix: (B, C) 0/1 multi-hot label sets, or None (simulation).
        n_classes, max_labels, dtype, canonical_shapes: as ``make_model_data``.
        first_bag, source: the first bag's number and the file holding the
            bags, for error messages (``dp.validation.check_flat_bags``).
        layout: pack into exactly these buckets (``dp.packing.Layout``), so
            that every minibatch of a stream has the same shapes.
    """
    feats, sizes, present = check_flat_bags(
        features, sizes, label_matrix, n_classes, max_labels, first_bag, source
    )
    packed = pack_label_matrix(sizes, present, canonical=canonical_shapes, layout=layout)
    return _model_data(packed, feats.astype(dtype, copy=False), present is not None, n_classes, max_labels)


def _model_data(
    packed: PackedBags, flat: np.ndarray, labelled: bool, n_classes: int, max_labels: int
) -> ModelData:
    """Features (n_instances, d) padded into ``packed``'s buckets, with their multi-hot label sets."""
    buckets = []
    for bucket in packed.buckets:
        rows, mask = np.asarray(bucket.rows).T, np.asarray(bucket.mask).T
        x = flat[rows]
        x[~mask] = 0.0  # in place: one (B_k, N_k, d) copy, the largest array a fit holds on the host
        labels = np.asarray(bucket.labels)
        obs = None
        if labelled:
            obs = np.zeros((mask.shape[0], n_classes), np.int32)
            obs[np.arange(mask.shape[0])[None, :], labels] = np.asarray(bucket.label_mask)
        k = labels.shape[0] if labelled else min(max_labels, n_classes)
        buckets.append(ModelBucket(x, mask, obs, np.asarray(bucket.bag_ids), k))
    return ModelData(tuple(buckets), packed.n_bags, flat.shape[1], n_classes)


def class_weights(
    n_features: int,
    n_classes: int,
    prior_scale: float | None,
    intercept_scale: float | None,
    fit_intercept: bool = True,
) -> tuple[Array, Array]:
    """Sample the sum-to-zero weights; returns ``W`` (d, C) and ``beta`` (C,).

    Sites: ``W_raw`` (d, C-1), ``beta_raw`` (C-1,; only with ``fit_intercept``)
    and the deterministic ``W``, ``beta``. A ``None`` scale is an improper
    flat prior. Without ``fit_intercept``, ``beta`` is zero.
    """
    basis = jnp.asarray(sum_to_zero_basis(n_classes))

    def _raw(name: str, shape: tuple[int, ...], scale: float | None) -> Array:
        if scale is None:
            prior = dist.ImproperUniform(dist.constraints.real, (), shape)
        else:
            prior = dist.Normal(0.0, scale).expand(shape).to_event(len(shape))
        return numpyro.sample(name, prior)

    w_raw = _raw("W_raw", (n_features, n_classes - 1), prior_scale)
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
        prior_scale: sd of the Normal prior on the weights (``1/sqrt(2 lam)``
            for an l2 strength ``lam``); None for a flat prior (maximum
            likelihood).
        intercept_scale: sd of the Normal prior on the intercepts; None flat.
        subsample_size: bags per minibatch (SVI). Each label-set bucket has its
            own plate ``bags_k`` and draws its share ``~ B_k / B`` of the
            minibatch, so the estimate is stratified and unbiased.
        observed: condition on ``data``'s label sets; False simulates them.
        fit_intercept: learn per-class intercepts ``beta`` (else zero).
        likelihood_scale: multiply the label-set sites' log-likelihood by this
            (``numpyro.handlers.scale``), the prior's not: ``n_bags /
            batch_bags`` makes a minibatch's log joint an unbiased estimate of
            the whole data's (``inference.streaming``). None: unscaled.

    Sites: ``W_raw``, ``beta_raw`` (latent), ``W``, ``beta`` (deterministic),
    and per bucket ``k`` the label sets ``Y_k`` (B_k, C) in plate ``bags_k``.
    """
    w, beta = class_weights(data.n_features, data.n_classes, prior_scale, intercept_scale, fit_intercept)
    if likelihood_scale is not None:
        with handlers.scale(scale=likelihood_scale):
            _label_sets(data, w, beta, subsample_size, observed)
    else:  # unwrapped, so the trace is the one every other method reads
        _label_sets(data, w, beta, subsample_size, observed)


def _label_sets(data: ModelData, w: Array, beta: Array, subsample_size: int | None, observed: bool) -> None:
    """The model's per-bucket label-set sites ``Y_k`` given the weights."""
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
            numpyro.sample(
                data.site_name(k),
                BagLabelSet(logits, take(bucket.mask), max_labels=bucket.max_labels),
                obs=obs,
            )
