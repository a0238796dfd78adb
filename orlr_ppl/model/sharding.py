"""The packed bags sharded over devices: data parallelism with no change to the model.

``shard_model_data`` splits every bucket's bag axis over a ``jax.sharding.Mesh``
axis and replicates the rest (instances, features, classes)::

    features (B_k, N_k, d), mask (B_k, N_k), label_sets (B_k, C)  ->  NamedSharding(mesh, P("bags"))

The model's log density is a sum over bags plus a prior, and each bag's DP reads
only its own rows, so any jitted function of ``(params, arrays)`` (``log_density.
potential_and_grad``, ``e_step``, ``inference.point.em.fit_em``'s loop) compiles under
GSPMD to a data-parallel program: each device runs the DP on its own bags, and
only the (d, C)-sized sums (value, gradient, ``Q``) cross devices, as an
all-reduce. The parameters stay replicated. Nothing else changes: the same
programs, the same results to float rounding.

Each bucket's bag count is padded up to a multiple of the mesh axis with
padding bags (no instances, an empty label set): their likelihood is one and
their posteriors zero, so they change no result (``dp.packing``). ``bag_ids``
still lists only the real bags, so ``ModelData.merge_sites`` drops the padding.

Several hosts (``jax.distributed.initialize()``): each process passes its own
bags, and the arrays are assembled into global ones over a mesh of every
process's devices (``jax.make_array_from_process_local_data``). Every process
must pack the same bucket structure (label-set sizes, in order); bag and
instance counts may differ and are padded to the largest.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TypeVar

import jax
import numpy as np
from jax.sharding import Mesh, NamedSharding, PartitionSpec

from .numpyro_model import ModelBucket, ModelData

DEFAULT_AXIS = "bags"
T = TypeVar("T")  # a pytree of arrays


def _process_count(mesh: Mesh) -> int:
    """How many processes own devices of ``mesh``."""
    return len({d.process_index for d in mesh.devices.flat})


def bag_mesh(devices: Sequence[jax.Device] | None = None, axis: str = DEFAULT_AXIS) -> Mesh:
    """A one-axis mesh over ``devices``; default ``jax.devices()``, all processes' under jax.distributed."""
    devices = list(jax.devices() if devices is None else devices)
    if not devices:
        raise ValueError("no devices given: pass at least one jax.Device, e.g. jax.devices()[:2]")
    return Mesh(np.array(devices), (axis,))


def _pad(a: np.ndarray | None, rows: int, width: int | None = None) -> np.ndarray | None:
    """``a`` zero-padded to ``rows`` along axis 0 (and ``width`` along axis 1): padding bags, instances."""
    if a is None:
        return None
    widths = [(0, rows - a.shape[0])] + [(0, 0)] * (a.ndim - 1)
    if width is not None:
        widths[1] = (0, width - a.shape[1])
    return np.pad(a, widths) if any(w[1] for w in widths) else a


def _process_shapes(data: ModelData) -> np.ndarray:
    """(B_k, N_k) per bucket, the largest over all processes; ValueError if their buckets differ."""
    from jax.experimental import multihost_utils

    mine = np.array([[b.max_labels, b.mask.shape[0], b.mask.shape[1]] for b in data.buckets], np.int64)
    counts = multihost_utils.process_allgather(np.array([len(mine)]))
    if np.any(counts != len(mine)):
        raise ValueError(
            f"processes packed {np.ravel(counts).tolist()} buckets: every process must pack the same "
            "label-set sizes; draw larger minibatches, or pack every process's bags alike"
        )
    every = np.asarray(multihost_utils.process_allgather(mine))  # (processes, buckets, 3)
    if np.any(every[..., 0] != mine[None, :, 0]):
        raise ValueError(
            f"processes packed buckets of label-set sizes {every[..., 0].tolist()}: every process must "
            "pack the same ones; draw larger minibatches, or pack every process's bags alike"
        )
    return every[..., 1:].max(axis=0)


def shard_model_data(data: ModelData, mesh: Mesh | None = None, axis: str = DEFAULT_AXIS) -> ModelData:
    """``data`` with each bucket's bag axis split over ``mesh``'s ``axis`` (the rest replicated).

    Args:
        data: from ``make_model_data`` (or ``make_model_data_flat``); under
            several processes, this process's bags.
        mesh: default ``bag_mesh()``: every device on one axis.
        axis: the mesh axis the bags are split over; other axes replicate.
    Returns:
        The same bags as device arrays with ``NamedSharding(mesh, P(axis))``,
        each bucket padded with padding bags to a multiple of the devices
        along ``axis`` (per process, under several processes). ``n_bags`` and
        ``bag_ids`` are unchanged: they count and list the real bags.
    """
    mesh = bag_mesh(axis=axis) if mesh is None else mesh
    if axis not in mesh.shape:
        raise ValueError(f"mesh has axes {tuple(mesh.shape)}, not {axis!r}: pass axis= one of them")
    sharding = NamedSharding(mesh, PartitionSpec(axis))
    processes = _process_count(mesh)
    per_process = mesh.shape[axis] // processes  # the devices along ``axis`` that hold this process's bags
    if processes > 1:
        shapes = _process_shapes(data)
    else:
        shapes = np.array([b.mask.shape for b in data.buckets], np.int64)

    def place(a: np.ndarray | None) -> jax.Array | None:
        if a is None:
            return None
        if processes > 1:
            return jax.make_array_from_process_local_data(sharding, a)
        return jax.device_put(a, sharding)

    buckets = []
    for bucket, (rows, width) in zip(data.buckets, shapes):
        rows = -(-int(rows) // per_process) * per_process
        padded = (
            _pad(np.asarray(bucket.features), rows, int(width)),
            _pad(np.asarray(bucket.mask), rows, int(width)),
            _pad(None if bucket.label_sets is None else np.asarray(bucket.label_sets), rows),
        )
        known = None
        if bucket.instance_labels is not None:  # padding instances are unknown (-1), not class 0
            known = _pad(np.asarray(bucket.instance_labels) + 1, rows, int(width)) - 1
        x, m, y = (place(a) for a in padded)
        buckets.append(ModelBucket(x, m, y, bucket.bag_ids, bucket.max_labels, place(known)))
    return data._replace(buckets=tuple(buckets))


def replicate(tree: T, mesh: Mesh) -> T:
    """``tree``'s arrays copied whole onto every device of ``mesh`` (``NamedSharding(mesh, P())``).

    A jitted step whose parameters come back replicated from a sharded
    minibatch would otherwise see them placed differently from the host
    arrays it started with, and compile a second time.
    """
    sharding = NamedSharding(mesh, PartitionSpec())
    if _process_count(mesh) > 1:  # every process holds the same values
        return jax.tree.map(lambda a: jax.make_array_from_process_local_data(sharding, np.asarray(a)), tree)
    return jax.device_put(tree, sharding)


def is_sharded(arrays: tuple) -> bool:
    """Whether any array of ``arrays`` (a pytree) lies over several devices (``shard_model_data``)."""
    return any(
        len(getattr(a, "sharding", None).device_set) > 1
        for a in jax.tree.leaves(arrays)
        if isinstance(a, jax.Array)
    )
