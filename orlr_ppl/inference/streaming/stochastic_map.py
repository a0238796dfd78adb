"""Stochastic optimisation over bags streamed from a store: the stream, its objective, a minibatch MAP.

A minibatch of ``B_t`` real bags, of the store's ``n_bags``, gives an estimate
of the log joint::

    log p(theta) + (n_bags / B_t) sum_{b in batch} log p(Y_b | X_b, theta),

which is ``orlr_model`` itself with ``likelihood_scale = n_bags / B_t`` (its
label-set sites under ``numpyro.handlers.scale``, the prior not). It is
unbiased over an epoch's shuffled order: a step's minibatch is a stratified
sample of a random shard, each stratum in proportion to its share (up to the
rounding of those shares, and to unequal shard sizes), and every bag counts
exactly once an epoch. ``B_t`` counts the bags with an instance, so padding
bags (fixed layouts, sharding) count for nothing, and under a multi-device or
multi-host mesh it is the global count.

``fit_streaming`` follows the estimate's gradient with Adam: a stochastic MAP
(``streaming.svi.fit_streaming_svi`` fits a mean-field Gaussian posterior on
the same stream). ``log_likelihood_and_grad_epoch`` sums the exact full-data
potential and gradient over one pass of the stream.

The steps are module-level jitted functions of (state, minibatch arrays), static
only in the minibatch's ``ModelShape``. Every minibatch of a store packs into
one fixed layout of buckets (``stream_plan``: each bucket's bags dealt evenly
over the minibatches), so a fit compiles its step once. Each minibatch's arrays
may be sharded over a mesh (``model.sharding``): every step then runs data
parallel.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, NamedTuple, TypeVar

import jax
import jax.numpy as jnp
import numpy as np
import optax
from jax.sharding import Mesh
from numpyro.infer.util import potential_energy

from ...dp.packing import Layout, stream_layout
from ...model.log_density import Params, Scales, prior_scales
from ...model.numpyro_model import (
    ModelArrays,
    ModelData,
    ModelShape,
    join_model_data,
    make_model_data_flat,
    orlr_model,
    split_model_data,
    sum_to_zero_basis,
)
from ...model.sharding import replicate, shard_model_data
from .packed import PackedStream, write_packed

if TYPE_CHECKING:  # the store is the data layer's; this layer takes it as an argument
    from ...data.store import BagStore

Array = jax.Array
S = TypeVar("S")  # a fit's optimiser state

DEFAULT_BATCH_BAGS = 4096


class StreamPlan(NamedTuple):
    """How a store's minibatches pack: one fixed layout for all, so one compiled step serves them.

    Attributes:
        layout: the buckets every minibatch packs into (``dp.packing.Layout``).
        strata: per shard, (n_s,) each bag's bucket, dealt evenly over the
            shard's minibatches (``BagStore.minibatches``'s ``strata``).
    """

    layout: Layout
    strata: tuple[np.ndarray, ...]


def stream_plan(store: BagStore, batch_bags: int = DEFAULT_BATCH_BAGS) -> StreamPlan:
    """Plan ``store``'s minibatches of ``batch_bags`` (``dp.packing.stream_layout``).

    From every shard's bag shapes, not their features, so that every process
    of a multi-host run plans the same.
    """
    shapes = [store.shard_shapes(i) for i in range(len(store.shards))]
    return StreamPlan(*stream_layout(shapes, batch_bags))


def model_minibatches(
    store: BagStore,
    batch_bags: int = DEFAULT_BATCH_BAGS,
    seed: int = 0,
    epoch: int = 0,
    shuffle: bool = True,
    mesh: Mesh | None = None,
    process_index: int = 0,
    process_count: int = 1,
    plan: StreamPlan | None = None,
) -> Iterator[ModelData]:
    """``store.minibatches`` stratified by bucket, packed into one fixed layout (and sharded over ``mesh``).

    Each is ``make_model_data_flat(..., layout=plan.layout)`` of one
    minibatch, so all have the same shapes; with ``mesh``, sharded over it
    (``shard_model_data``). ``plan``: default ``stream_plan(store, batch_bags)``.
    """
    plan = stream_plan(store, batch_bags) if plan is None else plan
    batches = store.minibatches(
        batch_bags, seed, epoch, shuffle, process_index, process_count, True, plan.strata
    )
    for batch in batches:
        data = make_model_data_flat(
            batch.features,
            batch.sizes,
            batch.labels,
            store.n_classes,
            max_labels=max(store.max_labels, 1),
            dtype=store.dtype.type,
            first_bag=int(batch.bag_ids[0]) if len(batch.bag_ids) else 0,
            source=str(store.folder),
            layout=plan.layout,
        )
        yield data if mesh is None else shard_model_data(data, mesh)


def epoch_arrays(
    store: BagStore | PackedStream,
    batch_bags: int,
    seed: int,
    epoch: int,
    shuffle: bool,
    mesh: Mesh | None,
    process_index: int,
    process_count: int,
    plan: StreamPlan | None = None,
) -> Iterator[tuple[ModelArrays, ModelShape]]:
    """One epoch's minibatches as ``(arrays, shape)`` for a jitted step: packed on the host from a
    ``BagStore`` (``model_minibatches``), or read ahead from a ``PackedStream`` (already on the device)."""
    if isinstance(store, PackedStream):
        for arrays in store.batches(seed, epoch, shuffle):
            yield arrays, store.shape
        return
    for data in model_minibatches(
        store, batch_bags, seed, epoch, shuffle, mesh, process_index, process_count, plan
    ):
        yield split_model_data(data)


def _batch_bags(
    store: BagStore | PackedStream, batch_bags: int | None, mesh: Mesh | None, process_count: int
) -> int:
    """The minibatch size: ``batch_bags``, default ``DEFAULT_BATCH_BAGS``; a packed stream's own, which
    another value contradicts (ValueError), as a mesh or several processes do."""
    if not isinstance(store, PackedStream):
        return DEFAULT_BATCH_BAGS if batch_bags is None else int(batch_bags)
    if batch_bags is not None and int(batch_bags) != store.batch_bags:
        raise ValueError(
            f"batch_bags={batch_bags}: {store.folder} was packed in minibatches of {store.batch_bags} bags; "
            "leave batch_bags out, or write the stream again (write_packed_stream) with that size"
        )
    if mesh is not None or process_count != 1:
        raise ValueError(
            f"{store.folder} is a packed stream, read by one process on one device: use its BagStore"
        )
    return store.batch_bags


def write_packed_stream(
    store: BagStore,
    folder: str | Path,
    batch_bags: int | None = None,
    seed: int = 0,
    overwrite: bool = False,
) -> PackedStream:
    """Pack one shuffled, stratified epoch of ``store``'s minibatches into ``folder``, once; return it opened.

    Args:
        store: a ``data.store.BagStore``.
        folder: a new or empty folder (or a packed stream to replace, with ``overwrite``).
        batch_bags: bags a minibatch holds at most; None: ``DEFAULT_BATCH_BAGS``.
        seed: the shuffle that deals the bags to the minibatches.
    The files hold the padded buckets, with their masks (``streaming.packed``): 5.5 GB for the
    synthetic million of ``benchmarks/bench_scale.py``, whose store takes 1.5 GB.
    """
    batch_bags = DEFAULT_BATCH_BAGS if batch_bags is None else int(batch_bags)
    plan = stream_plan(store, batch_bags)
    batches = (split_model_data(d) for d in model_minibatches(store, batch_bags, seed, 0, True, plan=plan))
    about = {
        "source": str(store.folder),
        "n_bags": store.n_bags,
        "batch_bags": batch_bags,
        "seed": int(seed),
        "dtype": store.dtype.name,
    }
    return write_packed(folder, batches, store.n_batches(batch_bags), about, overwrite)


def minibatch_potential(
    params: Params, arrays: ModelArrays, weight: Array, scales: Scales, shape: ModelShape, fit_intercept: bool
) -> Array:
    """``-(log p(theta) + weight * sum_b log p(Y_b | X_b, theta))``, from ``orlr_model``'s trace."""
    kwargs = {
        "prior_scale": scales.prior_scale,
        "intercept_scale": scales.intercept_scale,
        "fit_intercept": fit_intercept,
        "likelihood_scale": weight,
    }
    return potential_energy(orlr_model, (join_model_data(arrays, shape),), kwargs, params)


def likelihood_weight(arrays: ModelArrays, n_bags: Array) -> Array:
    """``n_bags / B_t``, ``B_t`` the minibatch's real bags (those with an instance), counted on device."""
    real = sum(jnp.sum(jnp.any(m, axis=1)) for _, m, *_ in arrays)
    return n_bags / jnp.maximum(real, 1).astype(n_bags.dtype)


@functools.partial(jax.jit, static_argnames=("shape", "fit_intercept"))
def _likelihood_and_grad(
    params: Params, arrays: ModelArrays, shape: ModelShape, fit_intercept: bool
) -> tuple[Array, Params]:
    """``-sum_b log p(Y_b | X_b, theta)`` over one minibatch, and its gradient (flat prior: no prior term)."""
    one = jnp.ones((), arrays[0][0].dtype)
    return jax.value_and_grad(minibatch_potential)(
        params, arrays, one, Scales(None, None), shape, fit_intercept
    )


@functools.partial(jax.jit, static_argnames=("shape", "fit_intercept"))
def _prior_and_grad(
    params: Params, scales: Scales, shape: ModelShape, fit_intercept: bool
) -> tuple[Array, Params]:
    """``-log p(theta)`` and its gradient: the model with no bags (``shape`` with no buckets)."""
    one = jnp.ones((), jax.tree.leaves(params)[0].dtype)
    return jax.value_and_grad(minibatch_potential)(params, (), one, scales, shape, fit_intercept)


class EpochResult(NamedTuple):
    """The full-data log density and gradient, summed over one pass of a stream.

    Attributes:
        potential: ``-(log p(theta) + sum_b log p(Y_b | X_b, theta))``, as
            ``model.log_density.potential_and_grad`` gives it on all the data.
        grad: its gradient in the raw parameters (``W_raw``, ``beta_raw``).
        log_likelihood: ``sum_b log p(Y_b | X_b, theta)``.
        n_batches: minibatches read.
    """

    potential: float
    grad: dict[str, np.ndarray]
    log_likelihood: float
    n_batches: int


def log_likelihood_and_grad_epoch(
    store: BagStore | PackedStream,
    params: Params,
    prior_scale: float | None = 1.0,
    intercept_scale: float | None = 10.0,
    fit_intercept: bool = True,
    batch_bags: int | None = None,
    mesh: Mesh | None = None,
    process_index: int = 0,
    process_count: int = 1,
) -> EpochResult:
    """One pass over ``store`` summing the exact potential and its gradient.

    What L-BFGS or a full-batch gradient step needs on data that do not fit
    one device: the sum over minibatches of each one's log-likelihood and
    gradient (on device, no host round trip until the end), plus the prior's
    once. ``params`` are raw: ``W_raw`` (d, C-1), ``beta_raw`` (C-1,).
    ``store``, ``batch_bags``, ``mesh``, ``process_index``, ``process_count``: as ``fit_streaming``.
    """
    batch_bags = _batch_bags(store, batch_bags, mesh, process_count)
    _check_steps(store, batch_bags, process_count)
    dtype = store.dtype
    params = {k: np.asarray(v, dtype) for k, v in params.items()}
    value, grad, n_batches = None, None, 0
    for arrays, shape in epoch_arrays(store, batch_bags, 0, 0, False, mesh, process_index, process_count):
        v, g = _likelihood_and_grad(params, arrays, shape, fit_intercept)
        value, grad = (v, g) if value is None else (value + v, jax.tree.map(jnp.add, grad, g))
        n_batches += 1
    empty = ModelShape((), store.n_features, store.n_classes)
    prior, prior_grad = _prior_and_grad(
        params, prior_scales(prior_scale, intercept_scale, dtype), empty, fit_intercept
    )
    # On the host: under several processes ``value`` is a global (replicated) array, the prior a local one.
    total = jax.tree.map(lambda a, b: np.asarray(a, np.float64) + np.asarray(b, np.float64), grad, prior_grad)
    return EpochResult(float(value) + float(prior), total, -float(value), n_batches)


class _AdamState(NamedTuple):
    params: Params
    opt_state: optax.OptState


@functools.partial(jax.jit, static_argnames=("shape", "fit_intercept"))
def _map_step(
    state: _AdamState,
    arrays: ModelArrays,
    n_bags: Array,
    scales: Scales,
    learning_rate: Array,
    shape: ModelShape,
    fit_intercept: bool,
) -> tuple[_AdamState, Array]:
    """One Adam step on the minibatch estimate of ``-log p(theta, Y)``; returns the state and the estimate."""
    weight = likelihood_weight(arrays, n_bags)
    loss, grad = jax.value_and_grad(minibatch_potential)(
        state.params, arrays, weight, scales, shape, fit_intercept
    )
    updates, opt_state = optax.adam(learning_rate).update(grad, state.opt_state, state.params)
    return _AdamState(optax.apply_updates(state.params, updates), opt_state), loss


class StreamingMAPResult(NamedTuple):
    """A stochastic MAP fit by minibatch gradient.

    Attributes:
        W: (d, C) weights; beta: (C,) intercepts (both sum to zero over classes).
        params: the raw parameters ``W_raw`` (d, C-1), ``beta_raw`` (C-1,).
        losses: (n_steps,) each step's minibatch estimate of ``-log p(theta, Y)``.
        n_steps: Adam steps taken.
    """

    W: np.ndarray
    beta: np.ndarray
    params: dict[str, np.ndarray]
    losses: np.ndarray
    n_steps: int


def zero_start(store: BagStore, fit_intercept: bool, init: Params | None) -> dict[str, np.ndarray]:
    """Raw starting parameters in the store's dtype: zeros (``W_raw`` (d, C-1), ``beta_raw`` (C-1,)),
    replaced by ``init``'s values where it names them."""
    d, c = store.n_features, store.n_classes
    params = {"W_raw": np.zeros((d, c - 1), store.dtype)}
    if fit_intercept:
        params["beta_raw"] = np.zeros((c - 1,), store.dtype)
    for name, value in (init or {}).items():
        if name in params:
            params[name] = np.asarray(value, store.dtype)
    return params


def weights_of(raw: dict[str, np.ndarray], n_classes: int) -> tuple[np.ndarray, np.ndarray]:
    """Raw (d, C-1), (C-1,) -> sum-to-zero ``W`` (d, C), ``beta`` (C,)."""
    basis = sum_to_zero_basis(n_classes)
    beta_raw = raw.get("beta_raw", np.zeros(n_classes - 1))
    return np.asarray(raw["W_raw"]) @ basis.T, np.asarray(beta_raw) @ basis.T


def _check_steps(store: BagStore | PackedStream, batch_bags: int, process_count: int) -> None:
    """Every process must take the same number of steps: each step is one global program."""
    if isinstance(store, PackedStream):
        return
    counts = [store.n_batches(batch_bags, p, process_count) for p in range(process_count)]
    if len(set(counts)) > 1:
        raise ValueError(
            f"with batch_bags={batch_bags}, the {process_count} processes would read {counts} minibatches "
            f"from {store.folder}: write the store in a multiple of {process_count} shards of equal size"
        )


class StreamSettings(NamedTuple):
    """How a streamed fit walks the store (``fit_streaming``'s arguments of the same names)."""

    learning_rate: float
    fit_intercept: bool
    epochs: int
    batch_bags: int | None
    seed: int
    mesh: Mesh | None
    process_index: int
    process_count: int


def minibatch_stream(
    step: Callable[..., tuple[S, Array]],
    state: S,
    store: BagStore | PackedStream,
    scales: Scales,
    how: StreamSettings,
) -> tuple[S, np.ndarray]:
    """``state`` after ``step`` on each minibatch of ``epochs`` shuffled epochs, and (n_steps,) its losses."""
    learning_rate, fit_intercept, epochs, batch_bags, seed, mesh, process_index, process_count = how
    batch_bags = _batch_bags(store, batch_bags, mesh, process_count)
    if int(epochs) < 1 or int(batch_bags) < 1 or not learning_rate > 0:
        raise ValueError(
            f"need epochs >= 1, batch_bags >= 1 and learning_rate > 0, got epochs={epochs}, "
            f"batch_bags={batch_bags}, learning_rate={learning_rate}"
        )
    _check_steps(store, batch_bags, process_count)
    n_bags, lr = np.asarray(store.n_bags, store.dtype), np.asarray(learning_rate, store.dtype)
    # One layout, one compiled step, for every epoch (a packed stream holds its own).
    losses, plan = [], None if isinstance(store, PackedStream) else stream_plan(store, batch_bags)
    if mesh is not None:  # placed as the step returns it, so the second step reuses the first's program
        state = replicate(state, mesh)
    for epoch in range(int(epochs)):
        batches = epoch_arrays(store, batch_bags, seed, epoch, True, mesh, process_index, process_count, plan)
        for arrays, shape in batches:
            state, loss = step(state, arrays, n_bags, scales, lr, shape, fit_intercept)
            losses.append(loss)  # on device: no host round trip per step
    return state, np.asarray(jnp.stack(losses), np.float64)


def fit_streaming(
    store: BagStore | PackedStream,
    prior_scale: float | None = 1.0,
    intercept_scale: float | None = 10.0,
    fit_intercept: bool = True,
    epochs: int = 1,
    batch_bags: int | None = None,
    learning_rate: float = 0.01,
    seed: int = 0,
    init: Params | None = None,
    mesh: Mesh | None = None,
    process_index: int = 0,
    process_count: int = 1,
) -> StreamingMAPResult:
    """Stochastic MAP by minibatch gradient: Adam on the unbiased minibatch log joint, streamed.

    Args:
        store: a ``data.store.BagStore``, whose minibatches are drawn and packed
            afresh every epoch; or a ``packed.PackedStream``, packed
            once and read ahead in the background (fixed minibatches, a fresh
            order every epoch), for a host that would otherwise keep the
            device waiting.
        prior_scale, intercept_scale, fit_intercept: ``orlr_model``'s priors
            (a flat prior, None, is maximum likelihood).
        epochs: passes over the store, each in a fresh shuffled order.
        batch_bags: bags a minibatch holds at most; None: ``DEFAULT_BATCH_BAGS``,
            or a packed stream's own.
        learning_rate: Adam's step size on the raw weights.
        seed: the shuffles'.
        init: starting raw parameters; default zeros.
        mesh: shard every minibatch over it (``model.sharding``).
        process_index, process_count: under ``jax.distributed``, this
            process's place (``jax.process_index()``, ``jax.process_count()``):
            it reads only its own shards.
    """
    params = zero_start(store, fit_intercept, init)
    scales = prior_scales(prior_scale, intercept_scale, store.dtype)
    state = _AdamState(params, optax.adam(learning_rate).init(params))
    how = StreamSettings(
        learning_rate, fit_intercept, epochs, batch_bags, seed, mesh, process_index, process_count
    )
    state, losses = minibatch_stream(_map_step, state, store, scales, how)
    raw = {k: np.asarray(v) for k, v in state.params.items()}
    return StreamingMAPResult(*weights_of(raw, store.n_classes), raw, losses, len(losses))
