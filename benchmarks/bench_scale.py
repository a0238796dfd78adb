"""Scale: one epoch of log-likelihood + gradient, and one stochastic pass, on a million synthetic bags.

Synthetic bags (mean 10 instances: 1 + Poisson(9); 20 classes; 40 features;
|Y| <= 3): each bag draws 1-3 classes, each instance a label uniformly among
them and features ``x ~ N(mu_y, I)`` (class means ``mu``; the true weights of
``p(y | x)`` are then ``W = mu^T``, ``beta_c = -|mu_c|^2 / 2``); the label set
is the union of the instance labels. They are generated in chunks straight
into a sharded store (``orlr_ppl.data.store``), then timed:

  (a) one epoch of the exact log-likelihood + gradient over every bag,
      (i) streamed from the store (``inference.streaming.stochastic_map.log_likelihood_and_grad_epoch``:
      read, pack and evaluate minibatch by minibatch), (i') from a stream packed once and read
      ahead in a background thread (``inference.streaming.packed``; one device), and (ii) with the whole
      dataset resident on device (``model.log_density.potential_and_grad`` on
      all bags in one call), when it fits;
  (b) one streaming stochastic pass (one epoch): minibatch-gradient MAP
      (``fit_streaming``) and mean-field SVI (``streaming_svi.fit_streaming_svi``);

and, as the reference in the same run, a jitted softmax-regression
log-likelihood + gradient with the instance labels known, on the same
instances (as ``bench_dp``). First calls (compiling) are reported apart
from the medians of the repeats; every minibatch of the stream packs into one
layout (``inference.streaming.stochastic_map.stream_plan``), so a streamed pass compiles one
program, in its first call. Peak host memory is ``ru_maxrss``; on a GPU, the
device's ``peak_bytes_in_use``.

    python -m benchmarks.bench_scale --n-bags 1000000 [--store DIR] [--devices N]

``--devices N`` shards every array over the first N devices (``model.sharding``); on a CPU
the script makes N host devices first (``orlr_ppl.set_host_device_count``).
"""

from __future__ import annotations

import argparse
import os
import resource
import shutil
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import NamedSharding, PartitionSpec

from benchmarks.harness import host_devices, machine
from benchmarks.harness import repeat as _repeat
from orlr_ppl.data.store import BagStore, BagStoreWriter
from orlr_ppl.inference.streaming.stochastic_map import (
    fit_streaming,
    log_likelihood_and_grad_epoch,
    model_minibatches,
    write_packed_stream,
)
from orlr_ppl.inference.streaming.svi import fit_streaming_svi
from orlr_ppl.model import bag_mesh, make_model_data_flat, shard_model_data
from orlr_ppl.model.log_density import potential_and_grad, prior_scales
from orlr_ppl.model.numpyro_model import split_model_data

N_CLASSES, N_FEATURES, MAX_SET = 20, 40, 3


def class_means(rng: np.random.Generator) -> np.ndarray:
    """(C, d) class means, spread so that the true weights label ~94% of instances right (of 20 classes)."""
    return rng.normal(scale=0.6, size=(N_CLASSES, N_FEATURES))


def synthetic_chunk(
    rng: np.random.Generator, n_bags: int, mu: np.ndarray
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """``n_bags`` bags, vectorised: features (n, d), sizes (B,), label matrix (B, C), instance labels (n,)."""
    sizes = 1 + rng.poisson(9, n_bags)
    classes = np.argsort(rng.random((n_bags, N_CLASSES)), axis=1)[:, :MAX_SET]  # 3 distinct classes a bag
    n_drawn = rng.integers(1, MAX_SET + 1, n_bags)
    bag = np.repeat(np.arange(n_bags), sizes)
    y = classes[bag, (rng.random(len(bag)) * n_drawn[bag]).astype(np.int64)]
    x = (mu[y] + rng.standard_normal((len(y), N_FEATURES))).astype(np.float32)
    labels = np.zeros((n_bags, N_CLASSES), np.uint8)
    labels[bag, y] = 1  # the union of the instance labels
    return x, sizes, labels, y.astype(np.int8)


def _rss_gb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20  # KiB on Linux


def _device_peak_gb() -> str:
    stats = jax.devices()[0].memory_stats() or {}
    peak = stats.get("peak_bytes_in_use")
    return "n/a (no memory_stats on this backend)" if peak is None else f"{peak / 2**30:.2f} GB"


def _available_bytes() -> float:
    stats = jax.devices()[0].memory_stats() or {}
    if "bytes_limit" in stats:
        return float(stats["bytes_limit"])
    try:
        return float(os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE"))
    except (ValueError, OSError):
        return float("inf")


def write_store(folder: Path, n_bags: int, seed: int, shard: int) -> tuple[np.ndarray, np.ndarray, float]:
    """Generate ``n_bags`` bags into a store in chunks; returns the instance labels, class means, seconds."""
    rng = np.random.default_rng(seed)
    mu = class_means(rng)
    t0, ys = time.perf_counter(), []
    with BagStoreWriter(folder, N_FEATURES, N_CLASSES, bags_per_shard=shard, overwrite=True) as writer:
        for start in range(0, n_bags, shard):
            x, sizes, labels, y = synthetic_chunk(rng, min(shard, n_bags - start), mu)
            writer.append(x, sizes, labels)
            ys.append(y)
    return np.concatenate(ys), mu, time.perf_counter() - t0


def _instance_accuracy(w: np.ndarray, beta: np.ndarray, mu: np.ndarray, seed: int) -> float:
    x, _, _, y = synthetic_chunk(np.random.default_rng(seed + 1), 5000, mu)
    return float(np.mean(np.argmax(x @ w + beta, axis=1) == y))


def packed_rows(row: Callable[..., None], store: BagStore, folder: Path, params, streamed, args) -> tuple:
    """The same epoch from a stream packed once (``inference.streaming.packed``), read ahead in a thread.

    The host's share is the time reading the packed minibatches takes alone (file to device, no
    step) against the epoch's: what the host would add if none of it overlapped the steps.
    Returns (epoch median s, read-alone median s).
    """
    t0 = time.perf_counter()
    packed = write_packed_stream(store, folder, batch_bags=args.batch_bags, overwrite=True)
    disk = sum(f.stat().st_size for f in folder.iterdir()) / 2**30
    row("write the packed stream (once)", time.perf_counter() - t0, float("nan"), f"{disk:.2f} GB on disk")

    def epoch() -> object:
        return log_likelihood_and_grad_epoch(packed, params)

    def read_alone() -> int:
        return sum(1 for a in packed.batches(shuffle=False) if jax.block_until_ready(a) is not None)

    first, t_epoch, result = _repeat(epoch, args.repeats)
    gap = abs(result.potential - streamed.potential) / abs(streamed.potential)
    row("(a) loglik+grad epoch, packed stream", first, t_epoch, f"rel. diff to streamed {gap:.1e}")
    first, t_read, n = _repeat(read_alone, args.repeats)
    row("    of which: read alone (host)", first, t_read, f"{n} minibatches; share {t_read / t_epoch:.1%}")
    return t_epoch, t_read


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--n-bags", type=int, default=20000)
    parser.add_argument("--store", type=Path, default=None, help="store folder (default: a temporary one)")
    parser.add_argument("--devices", type=int, default=1, help="shard over the first N devices")
    parser.add_argument("--batch-bags", type=int, default=4096)
    parser.add_argument("--bags-per-shard", type=int, default=1 << 16)
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--learning-rate", type=float, default=0.02)
    parser.add_argument(
        "--resident-max-gb",
        type=float,
        default=None,
        help="skip the resident epoch above this (default: three quarters of free memory)",
    )
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    if args.devices > 1:
        host_devices(args.devices)  # N host devices on a CPU, before JAX starts
    devices = jax.devices()[: args.devices]
    if len(devices) < args.devices:
        raise SystemExit(f"--devices {args.devices}: only {len(jax.devices())} devices")
    mesh = bag_mesh(devices) if args.devices > 1 else None
    print(f"{machine()}; sharded over {len(devices)}; dtype=float32")
    folder = args.store or Path(tempfile.mkdtemp(prefix="orlr-store-"))
    packed_folder = Path(tempfile.mkdtemp(prefix="orlr-packed-"))
    rows: list[tuple[str, str, str, str]] = []

    def row(name: str, first: float, median: float, note: str = "") -> None:
        rows.append((name, f"{first:.2f}", "-" if np.isnan(median) else f"{median:.2f}", note))

    try:
        y_all, mu, seconds = write_store(folder, args.n_bags, args.seed, args.bags_per_shard)
        store = BagStore(folder)
        disk = sum(f.stat().st_size for f in folder.iterdir()) / 2**30
        print(
            f"data: {store.n_bags} bags, {store.n_instances} instances "
            f"({store.n_instances / store.n_bags:.2f} a bag), {len(store.shards)} shards, "
            f"{disk:.2f} GB on disk, largest |Y| {store.max_labels}"
        )
        row("generate + write store", seconds, float("nan"), f"host RSS {_rss_gb():.2f} GB")

        rng = np.random.default_rng(args.seed + 2)
        params = {
            "W_raw": rng.normal(scale=0.1, size=(N_FEATURES, N_CLASSES - 1)).astype(np.float32),
            "beta_raw": np.zeros(N_CLASSES - 1, np.float32),
        }

        def read_and_pack() -> tuple[int, int]:
            shapes = [
                tuple(b.mask.shape for b in data.buckets)
                for data in model_minibatches(store, args.batch_bags, shuffle=False)
            ]
            return len(shapes), len(set(shapes))

        def epoch() -> object:
            return log_likelihood_and_grad_epoch(store, params, batch_bags=args.batch_bags, mesh=mesh)

        first, med, streamed = _repeat(epoch, args.repeats)
        row("(a) loglik+grad epoch, streamed", first, med, f"host RSS {_rss_gb():.2f} GB")
        t_stream = med
        first, med, (n_batches, n_shapes) = _repeat(read_and_pack, 1)
        shapes = f"{n_shapes} shape famil{'y' if n_shapes == 1 else 'ies'}"
        note = f"{n_batches} minibatches of <= {args.batch_bags} bags, {shapes}"
        row("    of which: read + pack (host)", first, med, note)
        t_packed = packed_rows(row, store, packed_folder, params, streamed, args) if mesh is None else None

        # Resident: every bag packed once (tight shapes: one program either way) and held on device.
        flat = [store.read_shard(i) for i in range(len(store.shards))]
        x = np.concatenate([f.features for f in flat])
        sizes = np.concatenate([f.sizes for f in flat])
        labels = np.concatenate([f.labels for f in flat])
        del flat
        # ~3x padded cells (dp.packing's buckets), each with d features and ~8 (C,)-arrays in the gradient;
        # calibrated: 5.5 GB peak at 200,000 bags on a CPU.
        # A conservative estimate: on an H100 it said 22.4 GB for a million bags, and the device
        # peaked at 7.6 GB.
        estimate = x.shape[0] * 3 * (N_FEATURES + 8 * N_CLASSES) * 4
        budget = args.resident_max_gb * 2**30 if args.resident_max_gb else 0.75 * _available_bytes()
        t_resident = float("nan")
        if estimate <= budget:
            t0 = time.perf_counter()
            data = make_model_data_flat(x, sizes, labels, N_CLASSES, max_labels=store.max_labels)
            data = shard_model_data(data, mesh) if mesh is not None else data
            arrays, shape = split_model_data(data)
            arrays = jax.block_until_ready(jax.device_put(arrays))
            pack_s = time.perf_counter() - t0
            cells = sum(int(np.prod(b.mask.shape)) for b in data.buckets)
            row(
                "    resident: pack + to device",
                pack_s,
                float("nan"),
                f"padded cells {cells / x.shape[0]:.2f}x instances",
            )
            scales = prior_scales(1.0, 10.0)
            first, t_resident, resident = _repeat(
                lambda: potential_and_grad(params, arrays, scales, shape, True), args.repeats
            )
            gap = abs(float(resident[0]) - streamed.potential) / abs(streamed.potential)
            row("(a) loglik+grad epoch, resident", first, t_resident, f"rel. diff to streamed {gap:.1e}")
            del data, arrays, resident
        else:
            row(
                "(a) loglik+grad epoch, resident",
                float("nan"),
                float("nan"),
                f"skipped: ~{estimate / 2**30:.1f} GB",
            )

        # The reference: softmax regression with the instance labels known, on the same instances,
        # split over the same devices (rows padded to a multiple of them: the timing's, not the value's).
        y = np.asarray(y_all, np.int32)
        if mesh is not None:
            pad = -len(y) % args.devices
            x, y = np.pad(x, ((0, pad), (0, 0))), np.pad(y, (0, pad))
            split = NamedSharding(mesh, PartitionSpec("bags"))
            reference = (jax.device_put(x, split), jax.device_put(y, split))
        else:
            reference = (jax.device_put(x), jax.device_put(y))
        del x, y

        @jax.jit
        def softmax_loglik_and_grad(
            w: jax.Array, xs: jax.Array, ys: jax.Array
        ) -> tuple[jax.Array, jax.Array]:
            def loglik(w: jax.Array) -> jax.Array:
                logp = jax.nn.log_softmax(xs @ w, axis=1)
                return jnp.sum(jnp.take_along_axis(logp, ys[:, None], axis=1))

            return jax.value_and_grad(loglik)(w)

        w0 = jnp.asarray(rng.normal(scale=0.1, size=(N_FEATURES, N_CLASSES)), jnp.float32)
        first, t_soft, _ = _repeat(lambda: softmax_loglik_and_grad(w0, *reference), max(args.repeats, 3))
        row("reference: softmax loglik+grad", first, t_soft, "instance labels known, resident")
        reference = None

        for name, fit in (("MAP (Adam)", fit_streaming), ("SVI (mean-field)", fit_streaming_svi)):

            def one_pass(fit=fit) -> object:
                return fit(
                    store, epochs=1, batch_bags=args.batch_bags, learning_rate=args.learning_rate, mesh=mesh
                )

            first, med, res = _repeat(one_pass, max(args.repeats - 1, 1))
            acc = _instance_accuracy(res.W, res.beta, mu, args.seed)
            row(
                f"(b) stochastic pass, {name}",
                first,
                med,
                f"{res.n_steps} steps, loss {res.losses[0]:.3g} -> {np.median(res.losses[-5:]):.3g}, "
                f"instance acc {acc:.3f}",
            )
        w_true, b_true = mu.T, -0.5 * np.sum(mu**2, axis=1)
        print(
            f"instance accuracy of the true weights: {_instance_accuracy(w_true, b_true, mu, args.seed):.3f}"
        )
    finally:
        shutil.rmtree(packed_folder, ignore_errors=True)
        if args.store is None:
            shutil.rmtree(folder, ignore_errors=True)

    width = max(len(r[0]) for r in rows)
    print(f"\n{'phase':<{width}}  {'first (s)':>9}  {'median (s)':>10}  notes")
    for name, first, med, note in rows:
        print(f"{name:<{width}}  {first:>9}  {med:>10}  {note}")
    print(f"\npeak host memory (ru_maxrss): {_rss_gb():.2f} GB; device peak: {_device_peak_gb()}")
    ratio = t_resident / t_soft if np.isfinite(t_resident) else float("nan")
    print(
        f"epoch_streamed_s={t_stream:.3f} epoch_resident_s={t_resident:.3f} softmax_s={t_soft:.3f} "
        f"resident_ratio={ratio:.2f} streamed_ratio={t_stream / t_soft:.2f}"
    )
    if t_packed is not None:
        epoch_s, read_s = t_packed
        print(f"epoch_packed_s={epoch_s:.3f} packed_read_s={read_s:.3f} host_share={read_s / epoch_s:.3f}")


if __name__ == "__main__":
    main()
