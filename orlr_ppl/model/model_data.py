"""Bags packed for ``orlr_model``: ``ModelData``, its arrays and static shape, and the fits' start.

``make_model_data`` validates and pads ragged bags into the DP's buckets
(``dp.packing``); ``split_model_data`` turns the result into traced arrays and
a hashable ``ModelShape``, so that module-level jitted functions compile once
per shape family.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import NamedTuple

import jax
import numpy as np

from ..dp.packing import Layout, PackedBags, canonical_layout, pack_bags, pack_label_matrix
from ..dp.validation import (
    DEFAULT_MAX_LABELS,
    check_features,
    check_flat_bags,
    check_known_labels,
    check_label_sets,
)
from .priors import WEIGHT_PRIORS, horseshoe_start

Array = jax.Array


class ModelBucket(NamedTuple):
    """Bags of at most ``max_labels`` labels (most often exactly), padded to one instance count.

    Attributes:
        features: (B_k, N_k, d) instance features (zero on padding).
        mask: (B_k, N_k) bool, real instances.
        label_sets: (B_k, C) int32 multi-hot observed label sets, or None.
        bag_ids: (R_k,) the input positions of the first ``R_k <= B_k`` bags;
            the rest are padding (``make_model_data(canonical_shapes=True)``),
            with no instances and an empty label set. None inside a compiled
            program (``join_model_data``), which never needs them.
        max_labels: the bucket's label slots (the DP's K): its largest
            label-set size, or the cap when labels are unknown.
        instance_labels: (B_k, N_k) int32 known instance labels, -1 where
            unknown and on padding, or None (none known).
    """

    features: np.ndarray
    mask: np.ndarray
    label_sets: np.ndarray | None
    bag_ids: np.ndarray | None
    max_labels: int
    instance_labels: np.ndarray | None = None


LEAK_PRIOR = (1.0, 10.0)
"""Beta(a, b) prior of a learnt leak probability: mean 1/11, most mass under 0.25."""


class ModelData(NamedTuple):
    """Bags packed for ``orlr_model`` (see ``make_model_data``), and the union the model assumes.

    ``novel_class``, ``leak`` and ``leak_prior`` choose the model's relaxation
    of the union (``BagLabelSet``): a novel class (column ``n_classes`` of
    ``W``), and a leak probability that is None, fixed (a float) or
    ``"learn"`` (a latent ``leak_logit`` with a Beta(``leak_prior``) prior on
    its sigmoid).
    """

    buckets: tuple[ModelBucket, ...]
    n_bags: int
    n_features: int
    n_classes: int
    max_instances: int = 0  # from a shared ``Layout``: instances of any dataset packed alike (0: unknown)
    novel_class: bool = False
    leak: float | str | None = None
    leak_prior: tuple[float, float] = LEAK_PRIOR
    weight_prior: str = "normal"  # the prior family of the weights' rows (``priors.WEIGHT_PRIORS``)

    @property
    def n_outputs(self) -> int:
        """Columns of ``W``: the named classes and, with ``novel_class``, the novel one."""
        return self.n_classes + int(self.novel_class)

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
    novel_class: bool = False
    leak: float | str | None = None
    leak_prior: tuple[float, float] = LEAK_PRIOR
    weight_prior: str = "normal"


ModelArrays = tuple[tuple[Array, Array, Array | None, Array | None], ...]
"""Per bucket ``(features (B_k, N_k, d), mask (B_k, N_k), label_sets (B_k, C) or None,
instance_labels (B_k, N_k) or None)``."""


def split_model_data(data: ModelData) -> tuple[ModelArrays, ModelShape]:
    """``ModelData`` as traced arrays plus a static shape, for module-level jitted functions.

    Jitting a function of ``(arrays, shape)`` with ``shape`` static compiles
    once per shape family, where a closure over ``data`` would compile anew
    for every fit.
    """
    arrays = tuple((b.features, b.mask, b.label_sets, b.instance_labels) for b in data.buckets)
    shape = ModelShape(
        tuple(int(b.max_labels) for b in data.buckets),
        data.n_features,
        data.n_classes,
        data.novel_class,
        data.leak,
        tuple(data.leak_prior),
        data.weight_prior,
    )
    return arrays, shape


def join_model_data(arrays: ModelArrays, shape: ModelShape, n_bags: int | None = None) -> ModelData:
    """Inverse of ``split_model_data``, without ``bag_ids`` (None).

    ``n_bags``: the real bag count, which only minibatches' shares read (``orlr_model``'s
    ``subsample_size``); None counts the padding bags too, so that the program does not depend on it.
    """
    buckets = tuple(ModelBucket(x, m, y, None, k, z) for (x, m, y, z), k in zip(arrays, shape.max_labels))
    if n_bags is None:
        n_bags = sum(int(a[1].shape[0]) for a in arrays)
    return ModelData(
        buckets,
        n_bags,
        shape.n_features,
        shape.n_classes,
        novel_class=shape.novel_class,
        leak=shape.leak,
        leak_prior=shape.leak_prior,
        weight_prior=shape.weight_prior,
    )


def make_model_data(
    bags: Sequence[np.ndarray],
    label_sets: Sequence[Iterable[int]] | None,
    n_classes: int,
    max_labels: int = DEFAULT_MAX_LABELS,
    dtype: type = np.float32,
    canonical_shapes: bool = False,
    layout: Layout | None = None,
    instance_labels: Sequence[Iterable[int]] | None = None,
    novel_class: bool = False,
    leak: float | str | None = None,
    leak_prior: tuple[float, float] = LEAK_PRIOR,
    weight_prior: str = "normal",
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
            reusing a layout this process packed before where the bags fit
            it (``dp.packing.canonical_layout``), so that fits on other folds
            or datasets of similar shape reuse compiled programs; worth it
            where compiling dominates (EM, MAP).
        layout: pack into exactly these buckets (``dp.packing.shared_layout``
            of every fold of a cross-validation, say), so that all share one
            program; a ValueError if the bags do not fit it.
        instance_labels: B arrays (n_b,) of known instance labels, -1 where
            unknown (a semi-supervised fit); each known one must lie in its
            bag's label set, or be the novel class ``n_classes``.
        novel_class, leak, leak_prior: the model's relaxation of the union
            (``ModelData``). A leak allows bags with more labels than
            instances, a novel class bags with no label.
        weight_prior: the prior family of the weights' rows (``priors.WEIGHT_PRIORS``).
    """
    if weight_prior not in WEIGHT_PRIORS:
        raise ValueError(f"weight_prior={weight_prior!r}: choose one of {WEIGHT_PRIORS}")
    feats = check_features(bags)
    n_inst = [x.shape[0] for x in feats]
    sets = None
    if label_sets is not None:
        sets = check_label_sets(label_sets, n_inst, n_classes, max_labels, leak is not None, novel_class)
    known = None
    if instance_labels is not None:
        if sets is None:
            raise ValueError("instance_labels need the bags' label sets")
        novel = n_classes if novel_class else None
        known = np.concatenate(check_known_labels(instance_labels, n_inst, sets, novel))
    if sets is None:
        layout = None
    elif canonical_shapes and layout is None:  # a layout this process used before, where the bags fit it
        layout = canonical_layout(n_inst, [len(y) for y in sets])
    packed = pack_bags(n_inst, sets, canonical=canonical_shapes, layout=layout)
    data = _model_data(
        packed, np.concatenate(feats).astype(dtype), sets is not None, n_classes, max_labels, known
    )
    data = data._replace(
        novel_class=bool(novel_class), leak=leak, leak_prior=tuple(leak_prior), weight_prior=weight_prior
    )
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
    packed: PackedBags,
    flat: np.ndarray,
    labelled: bool,
    n_classes: int,
    max_labels: int,
    known: np.ndarray | None = None,
) -> ModelData:
    """Features (n_instances, d) padded into ``packed``'s buckets, with their multi-hot label sets
    and, given ``known`` (n_instances,), the known instance labels (-1 unknown)."""
    buckets = []
    for bucket in packed.buckets:
        rows, mask = np.asarray(bucket.rows).T, np.asarray(bucket.mask).T
        x = flat[rows]
        x[~mask] = 0.0  # in place: one (B_k, N_k, d) copy, the largest array a fit holds on the host
        labels = np.asarray(bucket.labels)
        obs = None
        if labelled:
            obs = np.zeros((mask.shape[0], n_classes), np.int32)
            real = np.asarray(bucket.label_mask)  # a bag may fill fewer than the bucket's K slots
            obs[np.broadcast_to(np.arange(mask.shape[0]), labels.shape)[real], labels[real]] = 1
        k = labels.shape[0] if labelled else min(max_labels, n_classes)
        z = None if known is None else np.where(mask, known[rows], -1).astype(np.int32)
        buckets.append(ModelBucket(x, mask, obs, np.asarray(bucket.bag_ids), k, z))
    return ModelData(tuple(buckets), packed.n_bags, flat.shape[1], n_classes)


def start_params(
    data: ModelData, fit_intercept: bool = True, dtype: type = np.float32
) -> dict[str, np.ndarray]:
    """The point fits' start: zero weights (uniform class probabilities) and the leak prior's mean.

    ``W_raw`` (d, C_out - 1) (under the group horseshoe its sites instead,
    ``priors.HORSESHOE_SITES``, at zero weights), ``beta_raw`` (C_out - 1,)
    with intercepts, and ``leak_logit`` () when the leak is learnt. Host
    arrays (no compile).
    """
    c = data.n_outputs
    params = {"W_raw": np.zeros((data.n_features, c - 1), dtype)}
    if data.weight_prior == "group_horseshoe":  # zero weights; the scales at tau0 (scale 1), lam = c = 1
        hs = horseshoe_start(np.zeros((data.n_features, c - 1)), 1.0)
        params = {
            **{k: np.asarray(v, dtype) for k, v in hs.items()},
            "hs_log_lambda": np.zeros(data.n_features, dtype),
        }
        params["hs_log_slab"] = np.asarray(0.0, dtype)
    if fit_intercept:
        params["beta_raw"] = np.zeros((c - 1,), dtype)
    if data.leak == "learn":
        a, b = data.leak_prior
        params["leak_logit"] = np.asarray(np.log(a / b), dtype)  # logit of the mean a / (a + b)
    return params


def fitted_leak(params: dict[str, Array], data: ModelData) -> float | None:
    """The leak probability at ``params``: learnt, fixed, or None."""
    if data.leak == "learn":
        return float(1.0 / (1.0 + np.exp(-float(params["leak_logit"]))))
    return None if data.leak is None else float(data.leak)
