"""A sharded on-disk store of bags, for collections too large for one device (or one host's lists).

Layout of a store folder::

    index.json          {"format": "orlr-ppl-bag-store", "version": 1, "n_bags", "n_instances",
                         "n_features", "n_classes", "dtype", "max_labels", "shards": [...]}
    shard-00000.npz     features (n_s, d) dtype, sizes (B_s,) int64, labels (B_s, C) uint8
    shard-00001.npz     ...

Bags are held flat, as in ``FlatBags``: the instances of every bag one after
another, each bag's instance count, and its label set as a 0/1 row. Shards are
written with ``np.savez`` and read with ``allow_pickle=False``; the index is
checked against every shard's array headers when the store is opened and each
shard's content when it is read, and any mismatch is a ``ValueError`` naming the
file. ``BagStoreWriter`` appends chunks of flat arrays, so a million bags never
exist as Python lists; ``BagStore.minibatches`` streams them back one shard in
memory at a time. Packing a minibatch for the model is the model layer's
(``model.make_model_data_flat``; ``inference.streaming.stochastic_map.model_minibatches``
does both).
"""

from __future__ import annotations

import json
import zipfile
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path
from typing import NamedTuple

import numpy as np

from ..dp.validation import DEFAULT_MAX_LABELS, check_features, check_flat_bags, check_label_sets

FORMAT = "orlr-ppl-bag-store"
VERSION = 1
INDEX = "index.json"
ARRAYS = ("features", "sizes", "labels")
DEFAULT_BAGS_PER_SHARD = 1 << 16
"""65,536 bags a shard: ~100 MB of float32 features at 10 instances x 40 features a bag."""


class FlatBags(NamedTuple):
    """Bags held flat (host arrays).

    Attributes:
        features: (n_instances, d) instance features, bag after bag.
        sizes: (B,) int64 instance count of each bag.
        labels: (B, C) uint8 multi-hot label sets.
        bag_ids: (B,) int64 each bag's position in the store.
    """

    features: np.ndarray
    sizes: np.ndarray
    labels: np.ndarray
    bag_ids: np.ndarray


class ShardInfo(NamedTuple):
    """One shard file: its name, bag and instance counts, and its first bag's position in the store."""

    file: str
    n_bags: int
    n_instances: int
    first_bag: int


def take_bags(bags: FlatBags, idx: np.ndarray) -> FlatBags:
    """The bags at positions ``idx`` (in that order), with no Python loop over bags."""
    idx = np.asarray(idx, np.int64)
    starts = np.concatenate([[0], np.cumsum(bags.sizes)[:-1]]).astype(np.int64)
    sizes = bags.sizes[idx]
    # Row r of the output is instance (r - where its bag starts in the output) of its bag.
    out_starts = np.concatenate([[0], np.cumsum(sizes)[:-1]]).astype(np.int64)
    rows = np.repeat(starts[idx] - out_starts, sizes) + np.arange(int(sizes.sum()))
    return FlatBags(bags.features[rows], sizes, bags.labels[idx], bags.bag_ids[idx])


def _shard_name(i: int) -> str:
    return f"shard-{i:05d}.npz"


class BagStoreWriter:
    """Write a store chunk by chunk: ``append`` flat arrays, then ``close`` (or use ``with``).

    Args:
        folder: the store's folder (created).
        n_features, n_classes: d and C of every bag.
        bags_per_shard: bags a shard file holds (the last holds the rest).
        dtype: float dtype the features are stored in.
        max_labels: the largest label set accepted (the DP holds ``2**K`` states).
        overwrite: replace a store already in ``folder``; else a ValueError.
    """

    def __init__(
        self,
        folder: str | Path,
        n_features: int,
        n_classes: int,
        bags_per_shard: int = DEFAULT_BAGS_PER_SHARD,
        dtype: str | type = np.float32,
        max_labels: int = DEFAULT_MAX_LABELS,
        overwrite: bool = False,
    ) -> None:
        self.folder = Path(folder)
        if int(bags_per_shard) < 1:
            raise ValueError(f"bags_per_shard={bags_per_shard}: a shard holds at least one bag")
        if (self.folder / INDEX).exists() and not overwrite:
            raise ValueError(f"{self.folder / INDEX} exists: pass overwrite=True to replace the store")
        self.folder.mkdir(parents=True, exist_ok=True)
        for old in [self.folder / INDEX, *self.folder.glob("shard-*.npz")]:
            old.unlink(missing_ok=True)
        self.n_features, self.n_classes, self.max_labels = int(n_features), int(n_classes), int(max_labels)
        self.bags_per_shard, self.dtype = int(bags_per_shard), np.dtype(dtype)
        self._pending: list[FlatBags] = []
        self._shards: list[ShardInfo] = []
        self._n_bags = self._largest_set = 0
        self._closed = False

    def append(self, features: np.ndarray, sizes: np.ndarray, label_matrix: np.ndarray) -> None:
        """Add bags: features (n, d) bag after bag, sizes (B,), label matrix (B, C) 0/1.

        Validated as ``dp.validation.check_flat_bags``, errors naming bags by
        their position in the store. Full shards are written at once.
        """
        if self._closed:
            raise ValueError(f"the writer of {self.folder} is closed: open a new BagStoreWriter to add bags")
        n_pending = sum(len(p.sizes) for p in self._pending)
        first = self._n_bags + n_pending
        feats, sizes, present = check_flat_bags(
            features,
            sizes,
            label_matrix,
            self.n_classes,
            self.max_labels,
            first,
            f"the chunk for {self.folder}",
        )
        if feats.shape[1] != self.n_features:
            raise ValueError(
                f"bags {first}.. have {feats.shape[1]} features, the store {self.n_features}: "
                "append bags of the store's feature count"
            )
        if len(sizes):
            self._largest_set = max(self._largest_set, int(present.sum(axis=1).max()))
        ids = np.arange(first, first + len(sizes))
        self._pending.append(
            FlatBags(feats.astype(self.dtype, copy=False), sizes, present.astype(np.uint8), ids)
        )
        if n_pending + len(sizes) >= self.bags_per_shard:
            self._flush(final=False)

    def _flush(self, final: bool) -> None:
        """Write every full shard in the pending chunks (and, when ``final``, the rest)."""
        if not self._pending:
            return
        joined = FlatBags(*(np.concatenate(parts) for parts in zip(*self._pending)))
        n, start = len(joined.sizes), 0
        while n - start >= self.bags_per_shard or (final and start < n):
            stop = min(start + self.bags_per_shard, n)
            self._write(take_bags(joined, np.arange(start, stop)))
            start = stop
        self._pending = [take_bags(joined, np.arange(start, n))] if start < n else []

    def _write(self, shard: FlatBags) -> None:
        name = _shard_name(len(self._shards))
        np.savez(self.folder / name, features=shard.features, sizes=shard.sizes, labels=shard.labels)
        self._shards.append(ShardInfo(name, len(shard.sizes), int(shard.sizes.sum()), self._n_bags))
        self._n_bags += len(shard.sizes)

    def close(self) -> BagStore:
        """Write the last shard and the index; returns the store, opened."""
        if not self._closed:
            self._flush(final=True)
            if not self._shards:
                raise ValueError(f"no bags were appended to {self.folder}: a store holds at least one bag")
            index = {
                "format": FORMAT,
                "version": VERSION,
                "n_bags": self._n_bags,
                "n_instances": sum(s.n_instances for s in self._shards),
                "n_features": self.n_features,
                "n_classes": self.n_classes,
                "dtype": self.dtype.name,
                "max_labels": self._largest_set,
                "shards": [
                    {"file": s.file, "n_bags": s.n_bags, "n_instances": s.n_instances} for s in self._shards
                ],
            }
            tmp = self.folder / (INDEX + ".tmp")
            tmp.write_text(json.dumps(index, indent=1))
            tmp.replace(self.folder / INDEX)  # the index appears whole, after every shard
            self._closed = True
        return BagStore(self.folder)

    def __enter__(self) -> BagStoreWriter:
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        if exc_type is None:
            self.close()
        else:  # no index: a half-written folder is not a store
            self._closed = True


def write_bag_store(
    folder: str | Path,
    bags: Sequence[np.ndarray],
    label_sets: Sequence[Iterable[int]],
    n_classes: int,
    bags_per_shard: int = DEFAULT_BAGS_PER_SHARD,
    dtype: str | type = np.float32,
    max_labels: int = DEFAULT_MAX_LABELS,
    overwrite: bool = False,
) -> BagStore:
    """Write ragged bags (arrays (n_b, d)) and their label sets as a store; returns it, opened.

    For bags already held as flat arrays, or too many for lists, use
    ``BagStoreWriter.append`` chunk by chunk.
    """
    feats = check_features(bags)
    sets = check_label_sets(label_sets, [len(x) for x in feats], n_classes, max_labels)
    matrix = np.zeros((len(sets), n_classes), np.uint8)
    matrix[np.repeat(np.arange(len(sets)), [len(s) for s in sets]), np.concatenate(sets).astype(np.int64)] = 1
    with BagStoreWriter(
        folder, feats[0].shape[1], n_classes, bags_per_shard, dtype, max_labels, overwrite
    ) as writer:
        writer.append(np.concatenate(feats), np.array([len(x) for x in feats]), matrix)
    return BagStore(folder)


def _npy_headers(path: Path) -> dict[str, tuple[tuple[int, ...], np.dtype]]:
    """Shape and dtype of each array in an .npz, from the headers alone (no data read)."""
    out = {}
    with zipfile.ZipFile(path) as zf:
        for name in zf.namelist():
            with zf.open(name) as f:
                version = np.lib.format.read_magic(f)
                read = (
                    np.lib.format.read_array_header_1_0
                    if version == (1, 0)
                    else np.lib.format.read_array_header_2_0
                )
                shape, _, dtype = read(f)
            out[name.removesuffix(".npy")] = (tuple(shape), np.dtype(dtype))
    return out


class BagStore:
    """A store written by ``BagStoreWriter`` or ``write_bag_store``, opened and checked.

    Attributes:
        folder; n_bags, n_instances, n_features, n_classes; dtype (of the
        features); max_labels (the largest label set in the store); shards
        (tuple of ``ShardInfo``).
    Raises:
        ValueError: naming the file, for a missing or unreadable index, another
            format or version, a missing shard, or a shard whose arrays do not
            match the index.
    """

    def __init__(self, folder: str | Path) -> None:
        self.folder = Path(folder)
        path = self.folder / INDEX
        if not path.is_file():
            raise ValueError(
                f"{path} not found: {self.folder} is not a bag store (write one with write_bag_store)"
            )
        try:
            index = json.loads(path.read_text())
            if index.get("format") != FORMAT or index.get("version") != VERSION:
                raise ValueError(
                    f"{path} is format {index.get('format')!r} version {index.get('version')!r}, not "
                    f"{FORMAT!r} version {VERSION}: rewrite the store with this orlr-ppl"
                )
            self.n_bags, self.n_instances = int(index["n_bags"]), int(index["n_instances"])
            self.n_features, self.n_classes = int(index["n_features"]), int(index["n_classes"])
            self.dtype, self.max_labels = np.dtype(index["dtype"]), int(index["max_labels"])
            shards, first = [], 0
            for s in index["shards"]:
                shards.append(ShardInfo(str(s["file"]), int(s["n_bags"]), int(s["n_instances"]), first))
                first += shards[-1].n_bags
        except (json.JSONDecodeError, KeyError, TypeError, AttributeError) as e:
            raise ValueError(f"{path} is damaged ({type(e).__name__}: {e}): rewrite the store") from e
        self.shards = tuple(shards)
        self._shapes: dict[int, tuple[np.ndarray, np.ndarray]] = {}
        if first != self.n_bags or sum(s.n_instances for s in shards) != self.n_instances:
            raise ValueError(
                f"{path} is damaged: its shards' bag or instance counts do not add up to its totals"
            )
        for shard in self.shards:
            self._check_header(shard)

    def _check_header(self, shard: ShardInfo) -> None:
        path = self.folder / shard.file
        if not path.is_file():
            raise ValueError(
                f"{path} not found, though {self.folder / INDEX} lists it: the store is incomplete"
            )
        try:
            headers = _npy_headers(path)
        except (zipfile.BadZipFile, ValueError, OSError, EOFError) as e:
            raise ValueError(
                f"{path} is not a readable .npz ({e}): the shard is damaged; rewrite the store"
            ) from e
        expected = {
            "features": ((shard.n_instances, self.n_features), self.dtype),
            "sizes": ((shard.n_bags,), np.dtype(np.int64)),
            "labels": ((shard.n_bags, self.n_classes), np.dtype(np.uint8)),
        }
        for name, (shape, dtype) in expected.items():
            if headers.get(name) != (shape, dtype):
                got = headers.get(name, "nothing")
                raise ValueError(
                    f"{path} holds {name} {got}, {self.folder / INDEX} says {(shape, dtype)}: the shard is "
                    "damaged or from another store; rewrite the store"
                )

    def read_shard(self, i: int) -> FlatBags:
        """Shard ``i``'s bags, checked (``dp.validation.check_flat_bags``, naming the file)."""
        shard = self.shards[i]
        path = self.folder / shard.file
        self._check_header(shard)
        try:
            with np.load(path, allow_pickle=False) as z:
                arrays = [z[name] for name in ARRAYS]
        except (zipfile.BadZipFile, ValueError, OSError, EOFError, KeyError) as e:
            raise ValueError(
                f"{path} could not be read ({e}): the shard is damaged; rewrite the store"
            ) from e
        feats, sizes, present = check_flat_bags(
            *arrays, self.n_classes, self.n_classes, shard.first_bag, str(path)
        )
        largest = int(present.sum(axis=1).max(initial=0))
        if largest > self.max_labels:
            raise ValueError(
                f"{path} holds a label set of {largest} labels, {self.folder / INDEX} says at most "
                f"{self.max_labels}: the shard is damaged or from another store; rewrite the store"
            )
        ids = np.arange(shard.first_bag, shard.first_bag + shard.n_bags)
        return FlatBags(feats, sizes, present.astype(np.uint8), ids)

    def shard_shapes(self, i: int) -> tuple[np.ndarray, np.ndarray]:
        """Shard ``i``'s (B_s,) instance counts and label-set sizes, read without its features (cached)."""
        if i not in self._shapes:
            path = self.folder / self.shards[i].file
            try:
                with np.load(path, allow_pickle=False) as z:
                    sizes, labels = z["sizes"], z["labels"]
            except (zipfile.BadZipFile, ValueError, OSError, EOFError, KeyError) as e:
                raise ValueError(
                    f"{path} could not be read ({e}): the shard is damaged; rewrite the store"
                ) from e
            self._shapes[i] = (sizes.astype(np.int64), labels.sum(axis=1, dtype=np.int64))
        return self._shapes[i]

    def process_shards(self, process_index: int = 0, process_count: int = 1) -> tuple[int, ...]:
        """The shards process ``process_index`` of ``process_count`` reads: every ``process_count``-th."""
        if not 0 <= process_index < process_count:
            raise ValueError(f"process_index={process_index} outside [0, process_count={process_count})")
        return tuple(range(process_index, len(self.shards), process_count))

    def n_batches(self, batch_bags: int, process_index: int = 0, process_count: int = 1) -> int:
        """Minibatches one epoch of ``minibatches`` yields (to this process)."""
        mine = self.process_shards(process_index, process_count)
        return sum(-(-self.shards[i].n_bags // int(batch_bags)) for i in mine)

    def minibatches(
        self,
        batch_bags: int,
        seed: int = 0,
        epoch: int = 0,
        shuffle: bool = True,
        process_index: int = 0,
        process_count: int = 1,
        stratify: bool | None = None,
        strata: Sequence[np.ndarray] | None = None,
    ) -> Iterator[FlatBags]:
        """One epoch of minibatches: every bag (of this process's shards) exactly once.

        One shard is in memory at a time. A shard of ``n_s`` bags is split
        into ``ceil(n_s / batch_bags)`` minibatches whose sizes differ by at
        most one. With ``shuffle``, the shard order and the bags within each
        shard are permuted afresh for each ``(seed, epoch)``.

        ``stratify`` (default: as ``shuffle``) deals each label-set size's
        bags evenly over the shard's minibatches (stratified sampling, with
        allocation proportional to the shard's counts), so that every
        minibatch packs into buckets of nearly the same bag counts, hence the
        same canonical shapes: one compiled step serves them all, and the
        estimate's variance drops. ``strata``: per shard, (n_s,) the stratum
        of each bag to deal evenly instead (``inference.streaming.stochastic_map`` passes
        each bag's bucket). Without ``shuffle`` or ``stratify``, bags come in
        store order. Under several processes (``jax.distributed``),
        process ``i`` of ``n`` reads shards ``i, i + n, ...`` (``process_shards``).
        """
        if int(batch_bags) < 1:
            raise ValueError(f"batch_bags={batch_bags}: a minibatch holds at least one bag")
        stratify = shuffle if stratify is None else stratify
        rng = np.random.default_rng([seed, epoch])
        mine = np.array(self.process_shards(process_index, process_count), np.int64)
        for i in rng.permutation(mine) if shuffle else mine:
            shard = self.read_shard(int(i))
            n = len(shard.sizes)
            n_batches = -(-n // int(batch_bags))
            order = rng.permutation(n) if shuffle else np.arange(n)
            if not stratify:
                for idx in np.array_split(order, n_batches):
                    yield take_bags(shard, idx)
                continue
            # Bags sorted by label-set size (random within a size), then dealt round robin.
            key = shard.labels.sum(axis=1) if strata is None else np.asarray(strata[int(i)])
            order = order[np.argsort(key[order], kind="stable")]
            batch = np.arange(n) % n_batches
            for j in rng.permutation(n_batches) if shuffle else range(n_batches):
                yield take_bags(shard, order[batch == j])
