"""Scale: bags sharded over devices give one device's results, a sharded store reads back exactly,
the streamed epoch is the full-data gradient, and the stochastic fits reach the MAP."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import jax
import numpy as np
import pytest

from orlr_ppl.data.store import BagStore, BagStoreWriter, write_bag_store
from orlr_ppl.dp.packing import pack_bags, pack_label_matrix, stream_layout
from orlr_ppl.inference.streaming.stochastic_map import (
    PackedStream,
    fit_streaming,
    likelihood_weight,
    log_likelihood_and_grad_epoch,
    model_minibatches,
    stream_plan,
    write_packed_stream,
)
from orlr_ppl.inference.streaming.svi import fit_streaming_svi
from orlr_ppl.model import make_model_data, make_model_data_flat
from orlr_ppl.model.log_density import potential_and_grad, prior_scales
from orlr_ppl.model.numpyro_model import split_model_data, sum_to_zero_basis


def _bags(seed: int, n_bags: int, n_features: int = 4, n_classes: int = 5, spread: float = 1.0):
    """Ragged bags (1-6 instances), their label sets (the union of 1-3 drawn classes) and instance labels."""
    rng = np.random.default_rng(seed)
    means = rng.normal(scale=spread, size=(n_classes, n_features))
    bags, sets, labels = [], [], []
    for n in rng.integers(1, 7, n_bags):
        drawn = rng.choice(n_classes, int(rng.integers(1, 4)), replace=False)
        y = rng.choice(drawn, n)
        bags.append((means[y] + rng.normal(size=(n, n_features))).astype(np.float32))
        sets.append(np.unique(y))
        labels.append(y)
    return bags, sets, labels


def _matrix(sets, n_classes: int) -> np.ndarray:
    out = np.zeros((len(sets), n_classes), np.uint8)
    for b, s in enumerate(sets):
        out[b, s] = 1
    return out


# (a) Sharding over devices ------------------------------------------------------------------

SHARDED = textwrap.dedent(
    """
    import json, sys
    import jax, numpy as np
    sys.path.insert(0, {tests!r})
    from test_sharding_and_streaming import _bags
    from orlr_ppl.data.store import write_bag_store
    from orlr_ppl.inference.point.em import fit_em
    from orlr_ppl.inference.streaming import stochastic_map as streaming
    from orlr_ppl.inference.streaming.stochastic_map import fit_streaming
    from orlr_ppl.model import bag_mesh, make_model_data, shard_model_data
    from orlr_ppl.model.log_density import potential_and_grad, prior_scales
    from orlr_ppl.model.numpyro_model import split_model_data

    assert len(jax.devices()) == 2, jax.devices()
    bags, sets, _ = _bags(0, 61)
    data = make_model_data(bags, sets, 5)
    sharded = shard_model_data(data)
    out = {{"rows": [], "device_sets": [], "put_keeps": True}}
    for b in sharded.buckets:
        out["rows"].append([int(b.features.shape[0]), len(b.bag_ids)])
        out["device_sets"] += [len(x.sharding.device_set) for x in (b.features, b.mask, b.label_sets)]
    arrays, shape = split_model_data(data)
    s_arrays, s_shape = split_model_data(sharded)
    put = jax.device_put(s_arrays)  # what fit_em and fit_map do with the arrays
    out["put_keeps"] = all(p is a for p, a in zip(jax.tree.leaves(put), jax.tree.leaves(s_arrays)))
    rng = np.random.default_rng(1)
    params = {{"W_raw": rng.normal(size=(4, 4)).astype(np.float32), "beta_raw": np.zeros(4, np.float32)}}
    scales = prior_scales(1.0, 10.0)
    for name, a, s in (("one", arrays, shape), ("two", s_arrays, s_shape)):
        value, grad = potential_and_grad(params, a, scales, s, True)
        fit = fit_em(data if name == "one" else sharded, prior_scale=1.0, max_iter=5)
        out[name] = {{"value": float(value), "grad": np.asarray(grad["W_raw"]).tolist(),
                      "em_W": fit.W.tolist(), "em_lp": fit.log_posterior}}
    hlo = potential_and_grad.lower(params, s_arrays, scales, s_shape, True).compile().as_text()
    out["all_gathers"] = hlo.count(" all-gather(") + hlo.count(" all-gather-start(")
    # A streamed fit with every minibatch sharded (and padded) over the mesh: the same steps.
    store = write_bag_store({store!r}, bags, sets, 5, bags_per_shard=61)
    for name, mesh in (("one", None), ("two", bag_mesh())):
        before = streaming._map_step._cache_size()
        fit = fit_streaming(store, epochs=1, batch_bags=31, learning_rate=0.05, mesh=mesh)
        out[name].update(stream_W=fit.W.tolist(), stream_losses=fit.losses.tolist(),
                         stream_programs=streaming._map_step._cache_size() - before)
    print(json.dumps(out))
    """
)


def test_bags_sharded_over_two_devices_give_one_device_s_results(tmp_path):
    """Potential, gradient, an EM fit and a streamed fit: as on 1 device."""
    env = dict(os.environ, XLA_FLAGS="--xla_force_host_platform_device_count=2", JAX_PLATFORMS="cpu")
    script = SHARDED.format(tests=str(Path(__file__).parent), store=str(tmp_path / "store"))
    proc = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, env=env, timeout=300
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    assert all(n == 2 for n in out["device_sets"])  # every array really split over both devices
    assert all(rows % 2 == 0 and rows >= real for rows, real in out["rows"])
    assert any(rows > real for rows, real in out["rows"])  # 61 bags: some bucket got padding bags
    assert out["put_keeps"]  # fit_em's and fit_map's jax.device_put keeps the sharding
    assert out["all_gathers"] == 0  # data parallel: no device gathers another's bags
    one, two = out["one"], out["two"]
    assert two["value"] == pytest.approx(one["value"], rel=1e-5)
    np.testing.assert_allclose(two["grad"], one["grad"], rtol=1e-4, atol=1e-4)
    assert two["em_lp"] == pytest.approx(one["em_lp"], rel=1e-5)
    np.testing.assert_allclose(two["em_W"], one["em_W"], atol=2e-3)
    np.testing.assert_allclose(two["stream_losses"], one["stream_losses"], rtol=1e-4)
    np.testing.assert_allclose(two["stream_W"], one["stream_W"], atol=1e-4)
    assert len(two["stream_losses"]) == 2 and two["stream_programs"] == 1  # both steps: one program


# (b) The store -------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def collection():
    return _bags(2, 45)


@pytest.fixture()
def store(tmp_path, collection) -> BagStore:
    bags, sets, _ = collection
    return write_bag_store(tmp_path / "store", bags, sets, 5, bags_per_shard=10)


def _all(store: BagStore, batch_bags: int, **kwargs) -> list:
    return list(store.minibatches(batch_bags, **kwargs))


def test_store_reads_back_exactly_in_order(store, collection):
    bags, sets, _ = collection
    assert (store.n_bags, store.n_features, store.n_classes, store.max_labels) == (45, 4, 5, 3)
    assert [s.n_bags for s in store.shards] == [10, 10, 10, 10, 5]
    batches = _all(store, 4, shuffle=False)
    assert [len(b.sizes) for b in batches] == [4, 3, 3] * 4 + [3, 2]  # shards split into equal parts
    np.testing.assert_array_equal(np.concatenate([b.bag_ids for b in batches]), np.arange(45))
    np.testing.assert_array_equal(np.concatenate([b.features for b in batches]), np.concatenate(bags))
    np.testing.assert_array_equal(np.concatenate([b.sizes for b in batches]), [len(x) for x in bags])
    np.testing.assert_array_equal(np.concatenate([b.labels for b in batches]), _matrix(sets, 5))


def test_a_writer_fed_chunks_writes_the_same_store(tmp_path, store, collection):
    bags, sets, _ = collection
    flat, sizes, matrix = np.concatenate(bags), np.array([len(x) for x in bags]), _matrix(sets, 5)
    starts = np.concatenate([[0], np.cumsum(sizes)])
    with BagStoreWriter(tmp_path / "chunked", 4, 5, bags_per_shard=10) as writer:
        for lo, hi in ((0, 3), (3, 27), (27, 28), (28, 45)):  # chunks that straddle shards
            writer.append(flat[starts[lo] : starts[hi]], sizes[lo:hi], matrix[lo:hi])
    chunked = BagStore(tmp_path / "chunked")
    assert chunked.shards == store.shards
    for i in range(len(store.shards)):
        for a, b in zip(chunked.read_shard(i), store.read_shard(i)):
            np.testing.assert_array_equal(a, b)


def test_shuffled_minibatches_cover_every_bag_once_an_epoch(store, collection):
    bags, sets, _ = collection
    orders = []
    for epoch in range(2):
        batches = _all(store, 4, seed=3, epoch=epoch)
        ids = np.concatenate([b.bag_ids for b in batches])
        assert sorted(ids.tolist()) == list(range(45)) and max(len(b.sizes) for b in batches) <= 4
        orders.append(ids)
        for b in batches:  # each bag's own instances and label set travel with it
            starts = np.concatenate([[0], np.cumsum(b.sizes)])
            for j, bag in enumerate(b.bag_ids):
                np.testing.assert_array_equal(b.features[starts[j] : starts[j + 1]], bags[bag])
                assert np.flatnonzero(b.labels[j]).tolist() == sets[bag].tolist()
    assert not np.array_equal(orders[0], orders[1])  # a fresh order each epoch
    mine = [
        np.concatenate([b.bag_ids for b in _all(store, 4, process_index=p, process_count=2)]) for p in (0, 1)
    ]
    assert sorted(np.concatenate(mine).tolist()) == list(range(45)) and not set(mine[0]) & set(mine[1])
    assert store.n_batches(4) == len(_all(store, 4))


def test_damaged_or_mismatched_stores_raise_naming_the_file(tmp_path, store):
    folder = store.folder
    shard = folder / "shard-00001.npz"
    good = shard.read_bytes()
    shard.write_bytes(good[: len(good) // 2])  # truncated
    with pytest.raises(ValueError, match="shard-00001.npz"):
        BagStore(folder)
    (folder / "shard-00004.npz").replace(shard)  # a shard with 5 bags where the index says 10
    with pytest.raises(ValueError, match="shard-00001.npz holds features"):
        BagStore(folder)
    shard.write_bytes(good)
    with pytest.raises(ValueError, match="shard-00004.npz not found"):
        BagStore(folder)
    with np.load(shard) as z:
        arrays = {k: z[k] for k in z.files}
    np.savez(folder / "shard-00004.npz", **arrays)  # right headers, wrong counts for shard 4 ...
    index = json.loads((folder / "index.json").read_text())
    index["shards"][4].update(n_bags=10, n_instances=int(arrays["sizes"].sum()))
    index["n_bags"], index["n_instances"] = 50, sum(s["n_instances"] for s in index["shards"])
    (folder / "index.json").write_text(json.dumps(index))
    arrays["labels"][2, :] = 0  # ... and one bag's label set emptied: caught on reading
    np.savez(folder / "shard-00004.npz", **arrays)
    with pytest.raises(ValueError, match=r"bag\(s\) \[42\] in .*shard-00004.npz have an empty label set"):
        BagStore(folder).read_shard(4)
    (folder / "index.json").write_text("{not json")
    with pytest.raises(ValueError, match="index.json is damaged"):
        BagStore(folder)
    with pytest.raises(ValueError, match="index.json not found"):
        BagStore(tmp_path)


def test_the_writer_names_bad_bags_by_their_place_in_the_store(tmp_path):
    with BagStoreWriter(tmp_path / "s", 2, 3) as writer:
        writer.append(np.zeros((3, 2)), [1, 2], [[1, 0, 0], [0, 1, 1]])
        with pytest.raises(ValueError, match=r"bag\(s\) \[3\].*more labels than instances"):
            writer.append(np.zeros((2, 2)), [1, 1], [[1, 0, 0], [1, 1, 0]])
        with pytest.raises(ValueError, match=r"bag\(s\) \[2\].*NaN"):
            writer.append(np.array([[0.0, np.nan]]), [1], [[1, 0, 0]])
    with pytest.raises(ValueError, match="exists: pass overwrite=True"):
        BagStoreWriter(tmp_path / "s", 2, 3)


@pytest.mark.parametrize("canonical", [False, True])
def test_flat_packing_is_make_model_data_s(collection, canonical):
    bags, sets, _ = collection
    flat, sizes, matrix = np.concatenate(bags), [len(x) for x in bags], _matrix(sets, 5)
    for a, b in zip(pack_label_matrix(sizes, matrix, canonical), pack_bags(sizes, sets, canonical)):
        for x, y in zip(jax.tree.leaves(a), jax.tree.leaves(b)):
            np.testing.assert_array_equal(x, y)
    ragged = make_model_data(bags, sets, 5, canonical_shapes=canonical)
    packed = make_model_data_flat(flat, sizes, matrix, 5, canonical_shapes=canonical)
    assert len(packed.buckets) == len(ragged.buckets) and packed.n_bags == ragged.n_bags
    for a, b in zip(packed.buckets, ragged.buckets):
        for x, y in zip(a, b):
            np.testing.assert_array_equal(x, y)


def test_a_fixed_layout_refuses_bags_it_has_no_room_for(collection):
    _, sets, _ = collection
    sizes, matrix = np.full(len(sets), 6), _matrix(sets, 5)
    layout = stream_layout([(sizes, matrix.sum(axis=1))], batch_bags=len(sets))[0]
    packed = pack_label_matrix(sizes, matrix, layout=layout)  # it fits the bags it was planned on
    placed = np.concatenate([b.bag_ids for b in packed.buckets])
    assert sorted(placed.tolist()) == list(range(len(sets)))  # every bag once
    for b in packed.buckets:  # each in a bucket with room for its labels
        assert np.all(matrix[b.bag_ids].sum(axis=1) <= b.labels.shape[0])
    with pytest.raises(ValueError, match="do not fit the fixed layout"):
        pack_label_matrix(sizes + 1, matrix, layout=layout)  # longer bags than any bucket takes
    with pytest.raises(ValueError, match="do not fit the fixed layout"):
        pack_label_matrix(np.concatenate([sizes, sizes]), np.concatenate([matrix, matrix]), layout=layout)


# (c), (d) Streaming ----------------------------------------------------------------------------


def test_minibatch_weight_counts_real_bags_not_padding(store):
    batch = next(store.minibatches(7, shuffle=False))
    real = len(batch.sizes)
    data = make_model_data_flat(batch.features, batch.sizes, batch.labels, 5, canonical_shapes=True)
    arrays, _ = split_model_data(data)
    assert sum(m.shape[0] for _, m, *_ in arrays) > real  # padded to canonical shapes
    assert float(likelihood_weight(arrays, np.float32(45))) == pytest.approx(45 / real)


@pytest.fixture(scope="module")
def easy(tmp_path_factory):
    """400 bags of 4 well separated classes in one shard: minibatches of 100 pack to one shape."""
    bags, sets, labels = _bags(7, 400, n_features=4, n_classes=4, spread=2.0)
    store = write_bag_store(tmp_path_factory.mktemp("easy"), bags, sets, 4, bags_per_shard=400)
    return store, bags, sets, labels


def test_a_stream_packs_into_one_layout(easy, store):
    def shapes(minibatches) -> set:
        return {tuple(b.mask.shape for b in data.buckets) for data in minibatches}

    for st, batch_bags in ((easy[0], 100), (store, 4)):
        assert len(shapes(d for e in range(4) for d in model_minibatches(st, batch_bags, epoch=e))) == 1
    # What the fixed layout saves: each minibatch packed on its own, even to canonical shapes.
    alone = (
        make_model_data_flat(b.features, b.sizes, b.labels, 5, canonical_shapes=True)
        for b in store.minibatches(4, stratify=False)
    )
    assert len(shapes(alone)) > 1


def test_streamed_epoch_is_the_full_data_potential_and_gradient(easy):
    store, bags, sets, _ = easy
    rng = np.random.default_rng(5)
    params = {
        "W_raw": rng.normal(size=(4, 3)).astype(np.float32),
        "beta_raw": rng.normal(size=3).astype(np.float32),
    }
    arrays, shape = split_model_data(make_model_data(bags, sets, 4))
    value, grad = potential_and_grad(params, arrays, prior_scales(1.0, 10.0), shape, True)
    epoch = log_likelihood_and_grad_epoch(store, params, 1.0, 10.0, batch_bags=100)
    assert epoch.n_batches == 4
    assert epoch.potential == pytest.approx(float(value), rel=1e-5)
    for k in grad:
        np.testing.assert_allclose(epoch.grad[k], np.asarray(grad[k]), rtol=1e-4, atol=1e-3)


def test_stochastic_fits_reach_the_map(easy):
    from orlr_ppl.inference.point.map import fit_map

    store, bags, sets, labels = easy
    mp = fit_map(make_model_data(bags, sets, 4), prior_scale=1.0, intercept_scale=10.0)
    x, y = np.concatenate(bags), np.concatenate(labels)

    def accuracy(w, b) -> float:
        return float(np.mean(np.argmax(x @ w + b, axis=1) == y))

    sgd = fit_streaming(store, 1.0, 10.0, epochs=30, batch_bags=100, learning_rate=0.1, seed=1)
    assert sgd.n_steps == 30 * 4 and sgd.losses.shape == (120,)
    # From zero weights (the first estimate) down to near the MAP's potential: it really descends.
    assert np.mean(sgd.losses[-16:]) < 0.6 * sgd.losses[0]
    reached = log_likelihood_and_grad_epoch(store, sgd.params, 1.0, 10.0, batch_bags=100).potential
    assert reached == pytest.approx(-mp.log_posterior, rel=0.02)
    assert accuracy(sgd.W, sgd.beta) >= accuracy(mp.W, mp.beta) - 0.02
    np.testing.assert_allclose(sgd.W.sum(axis=1), 0.0, atol=1e-5)

    svi = fit_streaming_svi(store, 1.0, 10.0, epochs=30, batch_bags=100, learning_rate=0.1, seed=1)
    assert np.mean(svi.losses[-16:]) < 0.6 * svi.losses[0]
    assert accuracy(svi.W, svi.beta) >= accuracy(mp.W, mp.beta) - 0.02
    assert np.corrcoef(svi.W.ravel(), mp.W.ravel())[0, 1] > 0.98
    assert np.all(svi.W_sd > 0) and np.all(svi.W_sd < 0.5)  # 400 bags: a narrow posterior
    np.testing.assert_allclose(svi.W, svi.loc["W_raw"] @ sum_to_zero_basis(4).T, atol=1e-6)


# A stream packed once, read ahead ---------------------------------------------------------------


def test_a_packed_stream_is_the_store_s_epoch_and_its_minibatches_read_back_exactly(tmp_path, easy):
    store, bags, sets, _ = easy
    packed = write_packed_stream(store, tmp_path / "packed", batch_bags=100, seed=3)
    assert (packed.n_bags, packed.n_batches, packed.batch_bags) == (400, 4, 100)
    # Minibatch j is the store's j-th minibatch of the shuffled epoch it was packed from, bit for bit.
    plan = stream_plan(store, 100)
    for j, data in enumerate(model_minibatches(store, 100, seed=3, epoch=0, plan=plan)):
        arrays, shape = split_model_data(data)
        assert shape == packed.shape
        for (x, m, y, _), (px, pm, py, known) in zip(arrays, packed.minibatch(j)):
            np.testing.assert_array_equal(px, x)
            np.testing.assert_array_equal(pm, m)
            np.testing.assert_array_equal(py, y)
            assert known is None

    # An epoch reads every minibatch once, in a fresh order each epoch: told apart by their features.
    def signature(arrays) -> float:
        return float(sum(np.asarray(x, np.float64).sum() for x, *_ in arrays))

    stored = sorted(signature(packed.minibatch(j)) for j in range(4))
    orders = [[signature(a) for a in packed.batches(0, epoch)] for epoch in range(3)]
    assert all(sorted(order) == stored for order in orders) and len({tuple(o) for o in orders}) > 1
    # The exact epoch sum is the store's.
    rng = np.random.default_rng(5)
    params = {
        "W_raw": rng.normal(size=(4, 3)).astype(np.float32),
        "beta_raw": rng.normal(size=3).astype(np.float32),
    }
    ours = log_likelihood_and_grad_epoch(packed, params, 1.0, 10.0)
    theirs = log_likelihood_and_grad_epoch(store, params, 1.0, 10.0, batch_bags=100)
    assert ours.n_batches == 4 and ours.potential == pytest.approx(theirs.potential, rel=1e-6)
    for k in params:
        np.testing.assert_allclose(ours.grad[k], theirs.grad[k], rtol=1e-5, atol=1e-4)
    # A stochastic fit reads it as it reads the store, and descends.
    sgd = fit_streaming(packed, 1.0, 10.0, epochs=10, learning_rate=0.1, seed=1)
    assert sgd.n_steps == 40 and np.mean(sgd.losses[-8:]) < 0.6 * sgd.losses[0]
    assert fit_streaming_svi(packed, 1.0, 10.0, epochs=2, learning_rate=0.1).n_steps == 8


def test_a_packed_stream_refuses_what_it_cannot_be(tmp_path, easy):
    store = easy[0]
    packed = write_packed_stream(store, tmp_path / "p", batch_bags=100)
    with pytest.raises(ValueError, match="is not empty: give a new folder, or overwrite=True"):
        write_packed_stream(store, tmp_path / "p", batch_bags=100)
    (tmp_path / "mine").mkdir()
    (tmp_path / "mine" / "notes.txt").write_text("not a stream")
    with pytest.raises(ValueError, match="is not empty"):  # overwrite replaces packed streams only
        write_packed_stream(store, tmp_path / "mine", overwrite=True)
    assert (tmp_path / "mine" / "notes.txt").is_file()
    assert write_packed_stream(store, tmp_path / "p", batch_bags=100, overwrite=True).n_batches == 4
    with pytest.raises(ValueError, match="packed in minibatches of 100 bags; leave batch_bags out"):
        fit_streaming(packed, batch_bags=50)
    with pytest.raises(ValueError, match="not a packed stream"):
        PackedStream(tmp_path)
    features = tmp_path / "p" / "bucket0_features.npy"
    np.save(features, np.zeros((2, 3)))
    with pytest.raises(ValueError, match=r"bucket0_features.npy holds shape \(2, 3\)"):
        PackedStream(tmp_path / "p")
    features.unlink()
    with pytest.raises(ValueError, match="bucket0_features.npy could not be read"):
        PackedStream(tmp_path / "p")


def test_a_reader_stopped_early_or_failing_ends_cleanly(tmp_path, easy, monkeypatch):
    import threading

    packed = write_packed_stream(easy[0], tmp_path / "p", batch_bags=100)
    before = threading.active_count()
    for _ in packed.batches(prefetch=1):
        break  # the consumer stops: the reader thread must not hang on a full queue
    assert threading.active_count() == before

    def broken(j):
        raise ValueError(f"minibatch {j} is damaged")

    monkeypatch.setattr(packed, "minibatch", broken)
    with pytest.raises(ValueError, match="minibatch . is damaged"):
        list(packed.batches())


# Several processes (jax.distributed), on this host's CPU -----------------------------------------

PROCESS = textwrap.dedent(
    """
    import json, sys
    import jax, numpy as np
    jax.config.update("jax_cpu_collectives_implementation", "gloo")
    jax.distributed.initialize({address!r}, num_processes=2, process_id=int(sys.argv[1]))
    from orlr_ppl.data.store import BagStore
    from orlr_ppl.inference.streaming.stochastic_map import log_likelihood_and_grad_epoch
    from orlr_ppl.model import bag_mesh

    assert jax.process_count() == 2 and len(jax.devices()) == 2 and len(jax.local_devices()) == 1
    params = {{k: np.asarray(v, np.float32) for k, v in json.loads(sys.argv[2]).items()}}
    epoch = log_likelihood_and_grad_epoch(
        BagStore({store!r}), params, 1.0, 10.0, batch_bags=60, mesh=bag_mesh(),
        process_index=jax.process_index(), process_count=jax.process_count(),
    )
    grad = {{k: v.tolist() for k, v in epoch.grad.items()}}
    print(json.dumps({{"potential": epoch.potential, "grad": grad}}))
    """
)


def test_two_processes_each_reading_its_own_shards_give_the_full_data_epoch(tmp_path, easy):
    """``jax.distributed`` over 2 local processes, one CPU device each: the global sum is the whole data's."""
    import socket

    _, bags, sets, _ = easy
    write_bag_store(tmp_path / "store", bags, sets, 4, bags_per_shard=100)  # 2 shards a process
    with socket.socket() as s:
        s.bind(("localhost", 0))
        port = s.getsockname()[1]
    script = PROCESS.format(address=f"localhost:{port}", store=str(tmp_path / "store"))
    rng = np.random.default_rng(5)
    params = {
        "W_raw": rng.normal(size=(4, 3)).astype(np.float32),
        "beta_raw": rng.normal(size=3).astype(np.float32),
    }
    env = dict(os.environ, XLA_FLAGS="--xla_force_host_platform_device_count=1", JAX_PLATFORMS="cpu")
    arg = json.dumps({k: v.tolist() for k, v in params.items()})
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", script, str(i), arg],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=env,
        )
        for i in range(2)
    ]
    outs = [p.communicate(timeout=300) for p in procs]
    if any(p.returncode for p in procs) and any("gloo" in err and "not" in err.lower() for _, err in outs):
        pytest.skip("this jaxlib has no gloo CPU collectives")
    for p, (_, err) in zip(procs, outs):
        assert p.returncode == 0, err[-3000:]
    results = [json.loads(out.strip().splitlines()[-1]) for out, _ in outs]
    arrays, shape = split_model_data(make_model_data(bags, sets, 4))
    value, grad = potential_and_grad(params, arrays, prior_scales(1.0, 10.0), shape, True)
    for res in results:  # every process holds the global result
        assert res["potential"] == pytest.approx(float(value), rel=1e-5)
        for k in grad:
            np.testing.assert_allclose(res["grad"][k], np.asarray(grad[k]), rtol=1e-4, atol=1e-3)
