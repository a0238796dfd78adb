"""Minibatches written already packed, and read ahead in the background.

A ``data.store.BagStore`` holds flat bags, and streaming it
(``streaming.model_minibatches``) shuffles, stratifies and packs every
minibatch on the host, in Python, at every epoch, while the device waits.
``stochastic_map.write_packed_stream`` does that work once, through this format's
writer ``write_packed``: one shuffled, stratified epoch of minibatches, every
one in the stream's fixed layout (``streaming.stream_plan``), written as one
``.npy`` file per bucket array with a leading minibatch axis.
``PackedStream.batches`` reads minibatch ``j`` as a slice of each
memory-mapped file, in a background thread that keeps ``prefetch`` minibatches
ready on the device while the fit computes.

What changes against a ``BagStore`` stream: a minibatch keeps its bags from
epoch to epoch (each epoch visits the minibatches in a fresh order), where a
``BagStore`` redraws them. Every epoch still counts each bag exactly once, so
the minibatch estimate of the log joint stays unbiased over an epoch. A packed
stream is read by one process on one device (no mesh).
"""

from __future__ import annotations

import json
import queue
import shutil
import threading
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

import jax
import numpy as np

from ...model.numpyro_model import ModelArrays, ModelShape

INDEX = "packed.json"
FORMAT, VERSION = "orlr-ppl packed stream", 1
PARTS = ("features", "mask", "labels")
"""Each bucket's arrays: (M, B_k, N_k, d) features, (M, B_k, N_k) bool mask, (M, B_k, C) int32 label sets."""


def _file(k: int, part: str) -> str:
    return f"bucket{k}_{part}.npy"


def write_packed(
    folder: str | Path,
    batches: Iterable[tuple[ModelArrays, ModelShape]],
    n_batches: int,
    about: dict[str, Any],
    overwrite: bool = False,
) -> PackedStream:
    """Write ``n_batches`` minibatches of one layout into ``folder`` as a packed stream; return it opened.

    ``batches``: ``(arrays, shape)`` as ``split_model_data`` gives them, every one of the same
    shapes (``stochastic_map.write_packed_stream`` makes them from a store). ``about``: the index's
    ``n_bags`` (real bags in all), ``batch_bags``, ``seed``, ``dtype`` and ``source``.
    ``overwrite`` replaces a packed stream already there, never another folder's files.
    """
    folder = Path(folder)
    if folder.exists() and any(folder.iterdir()):
        if not (overwrite and (folder / INDEX).is_file()):  # never delete a folder that is not ours
            raise ValueError(
                f"{folder} is not empty: give a new folder, or overwrite=True to replace a packed stream"
            )
        shutil.rmtree(folder)
    folder.mkdir(parents=True, exist_ok=True)
    files: list[dict[str, np.memmap]] = []
    shape = None
    for j, (arrays, this) in enumerate(batches):
        parts = [dict(zip(PARTS, (x, m, y))) for x, m, y, _ in arrays]
        if shape is None:  # the first minibatch fixes every file's shape
            shape = this
            files = [
                {
                    p: np.lib.format.open_memmap(
                        folder / _file(k, p), "w+", np.asarray(a).dtype, (n_batches, *np.shape(a))
                    )
                    for p, a in bucket.items()
                }
                for k, bucket in enumerate(parts)
            ]
        if this != shape or [b["mask"].shape for b in parts] != [f["mask"].shape[1:] for f in files]:
            raise ValueError(
                f"minibatch {j} did not pack into the first one's layout: {folder} is incomplete"
            )
        for bucket, out in zip(parts, files):
            for p, a in bucket.items():
                out[p][j] = a
    if shape is None or j + 1 != n_batches:
        raise ValueError(
            f"{folder}: {0 if shape is None else j + 1} minibatches written, {n_batches} expected"
        )
    for bucket in files:
        for out in bucket.values():
            out.flush()
    index = {"format": FORMAT, "version": VERSION, **about, "n_batches": n_batches}
    index["shape"] = {
        "max_labels": list(shape.max_labels),
        "n_features": shape.n_features,
        "n_classes": shape.n_classes,
    }
    (folder / INDEX).write_text(json.dumps(index, indent=1))
    return PackedStream(folder)


class PackedStream:
    """A stream written by ``write_packed_stream``, opened and checked; ``stochastic_map.fit_streaming``,
    ``svi.fit_streaming_svi`` and ``stochastic_map.log_likelihood_and_grad_epoch`` take it in
    place of a ``BagStore``.

    Attributes:
        folder; n_bags (real bags in the stream), n_batches, batch_bags, seed;
        dtype, n_features, n_classes; shape (the minibatches' ``ModelShape``).
    Raises:
        ValueError: naming the file, for a missing or damaged index, another
            format or version, or a missing array or one whose shape does not
            match the index.
    """

    def __init__(self, folder: str | Path) -> None:
        self.folder = Path(folder)
        path = self.folder / INDEX
        if not path.is_file():
            raise ValueError(f"{path} not found: {self.folder} is not a packed stream (write_packed_stream)")
        try:
            index = json.loads(path.read_text())
            if index.get("format") != FORMAT or index.get("version") != VERSION:
                raise ValueError(
                    f"{path} is format {index.get('format')!r} version {index.get('version')!r}, not "
                    f"{FORMAT!r} version {VERSION}: write the stream again with this orlr-ppl"
                )
            self.n_bags, self.n_batches = int(index["n_bags"]), int(index["n_batches"])
            self.batch_bags, self.seed = int(index["batch_bags"]), int(index["seed"])
            self.dtype = np.dtype(index["dtype"])
            s = index["shape"]
            self.shape = ModelShape(
                tuple(int(k) for k in s["max_labels"]), int(s["n_features"]), int(s["n_classes"])
            )
        except (json.JSONDecodeError, KeyError, TypeError, AttributeError) as e:
            raise ValueError(f"{path} is damaged ({type(e).__name__}: {e}): write the stream again") from e
        self.n_features, self.n_classes = self.shape.n_features, self.shape.n_classes
        self._files = [self._open(k) for k in range(len(self.shape.max_labels))]

    def _open(self, k: int) -> dict[str, np.ndarray]:
        """Bucket ``k``'s arrays, memory-mapped, their shapes checked against the index and each other."""
        out = {}
        for p in PARTS:
            path = self.folder / _file(k, p)
            try:
                out[p] = np.load(path, mmap_mode="r", allow_pickle=False)
            except (OSError, ValueError) as e:
                raise ValueError(f"{path} could not be read ({e}): write the stream again") from e
        m, (b, n) = self.n_batches, out["mask"].shape[1:]
        expected = {
            "features": (m, b, n, self.n_features),
            "mask": (m, b, n),
            "labels": (m, b, self.n_classes),
        }
        for p, want in expected.items():
            if out[p].shape != want:
                raise ValueError(
                    f"{self.folder / _file(k, p)} holds shape {out[p].shape}, the stream's index asks for "
                    f"{want}: the stream is damaged; write it again"
                )
        return out

    def minibatch(self, j: int) -> ModelArrays:
        """Minibatch ``j``'s arrays (host copies), as ``split_model_data`` gives them."""
        return tuple((f["features"][j], f["mask"][j], f["labels"][j], None) for f in self._files)

    def batches(
        self, seed: int = 0, epoch: int = 0, shuffle: bool = True, prefetch: int = 2
    ) -> Iterator[ModelArrays]:
        """One epoch: every minibatch once, in an order drawn from ``(seed, epoch)`` (or stored order),
        each on the device. A background thread reads ``prefetch`` minibatches ahead; stopping early
        (or an error in the reader, re-raised here) ends it."""
        order = (
            np.random.default_rng([seed, epoch]).permutation(self.n_batches)
            if shuffle
            else range(self.n_batches)
        )
        ready: queue.Queue = queue.Queue(maxsize=max(int(prefetch), 1))
        stop = threading.Event()

        def hand(item: object) -> bool:
            """Queue ``item`` unless the consumer has stopped; False once it has."""
            while not stop.is_set():
                try:
                    ready.put(item, timeout=0.1)
                    return True
                except queue.Full:
                    continue
            return False

        def read() -> None:
            try:
                for j in order:
                    # A copy here, so that the reading happens in this thread, not in the step's page faults.
                    host = jax.tree.map(np.array, self.minibatch(int(j)))
                    if not hand(jax.device_put(host)):
                        return
                hand(None)
            except BaseException as e:  # handed to the consumer, who re-raises it
                hand(e)

        reader = threading.Thread(target=read, name="orlr-ppl packed stream", daemon=True)
        reader.start()
        try:
            while (item := ready.get()) is not None:
                if isinstance(item, BaseException):
                    raise item
                yield item
        finally:
            stop.set()
            reader.join()
