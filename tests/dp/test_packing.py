"""Canonical bucket shapes: padding bags change no result, and similar datasets share a compile."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from conftest import DTYPES, TOL, precision
from hypothesis import given, settings
from hypothesis import strategies as st
from reference import brute_force

from orlr_ppl import EM, MAP
from orlr_ppl.dp.packing import CANONICAL_FLOOR_WORK, canonical_size, pack_bags
from orlr_ppl.dp.ragged import packed_log_likelihood, packed_posteriors
from orlr_ppl.model.log_density import e_step, potential_and_grad, prior_scales
from orlr_ppl.model.numpyro_model import make_model_data, split_model_data


def test_canonical_sizes_are_a_coarse_grid_within_1_5x():
    sizes = [canonical_size(n) for n in range(1, 3000)]
    assert sorted(set(sizes))[:10] == [1, 2, 3, 4, 6, 8, 12, 16, 24, 32]
    assert all(n <= s for n, s in zip(range(1, 3000), sizes))
    assert all(s <= 1.5 * n for n, s in zip(range(5, 3000), sizes[4:]))
    assert np.all(np.diff(sizes) >= 0)
    assert len(set(sizes)) == 23  # two an octave: a compile per family, not per dataset
    fine = [canonical_size(n, steps=8) for n in range(1, 3000)]
    assert all(n <= s <= 1.125 * n for n, s in zip(range(5, 3000), fine[4:])) and np.all(np.diff(fine) >= 0)
    assert len(set(fine)) > 3 * len(set(sizes))


STRUCTURES = (
    ((3,), (2,)),  # one bag: padded to four
    ((1, 2, 5, 4, 3, 7, 2), (1, 1, 2, 3, 2, 3, 1)),  # three label-set sizes, mixed lengths
    ((2, 3) * 7, (2,) * 14),  # 14 bags: 16 rows
)
"""(lengths, label-set sizes) of the bag collections: fixed, so the test compiles a few programs."""
N_CLASSES = 5


@st.composite
def bag_collections(draw):
    """One of ``STRUCTURES`` with drawn label sets and logits."""
    lengths, sizes = draw(st.sampled_from(STRUCTURES))
    sets = [np.sort(np.asarray(draw(st.permutations(range(N_CLASSES)))[:k], np.int32)) for k in sizes]
    values = st.floats(-5.0, 5.0, allow_nan=False, width=32)
    total = sum(lengths) * N_CLASSES
    logits = np.array(draw(st.lists(values, min_size=total, max_size=total))).reshape(-1, N_CLASSES)
    return list(lengths), sets, logits


# One program per shape family: ``jax.grad`` of a fresh lambda would trace and compile every example.
_total_grad = jax.jit(jax.grad(lambda z, packed: packed_log_likelihood(z, packed).sum()))


@pytest.mark.parametrize("dtype", DTYPES)
@settings(max_examples=12, deadline=None)  # each of the three structures about four times
@given(case=bag_collections())
def test_padding_bags_change_no_likelihood_posterior_or_gradient(dtype, case):
    lengths, sets, logits = case
    tight, padded = pack_bags(lengths, sets), pack_bags(lengths, sets, canonical=True)
    assert sum(b.mask.shape[1] for b in padded.buckets) >= len(lengths)
    with precision(dtype):
        z = jnp.asarray(logits, dtype)
        lls, posts, grads = [], [], []
        for packed in (tight, padded):
            lls.append(np.asarray(packed_log_likelihood(z, packed), np.float64))
            posts.append(np.asarray(packed_posteriors(z, packed)[1], np.float64))
            grads.append(np.asarray(_total_grad(z, packed)))
    tol = TOL[dtype]
    np.testing.assert_allclose(lls[1], lls[0], rtol=tol, atol=tol)
    np.testing.assert_allclose(posts[1], posts[0], atol=tol)
    np.testing.assert_allclose(grads[1], grads[0], atol=tol)
    # ... and both are the exact values, bag by bag.
    starts = np.concatenate([[0], np.cumsum(lengths)])
    for b, labels in enumerate(sets):
        ref_ll, ref_post = brute_force(logits[starts[b] : starts[b + 1]], labels)
        assert lls[1][b] == pytest.approx(ref_ll, rel=tol, abs=tol)
        np.testing.assert_allclose(posts[1][starts[b] : starts[b + 1]], ref_post, atol=tol)


def test_padded_buckets_hold_real_bags_first_and_empty_padding():
    rng = np.random.default_rng(0)
    lengths = rng.integers(1, 9, 37)
    sets = [np.sort(rng.choice(6, min(n, int(rng.integers(1, 4))), replace=False)) for n in lengths]
    packed = pack_bags(lengths, sets, canonical=True)
    seen, sizes = [], []
    for b in packed.buckets:
        n_real = len(b.bag_ids)
        width, n_rows = b.mask.shape
        assert n_rows == canonical_size(n_rows) and width == canonical_size(width)
        assert n_rows >= n_real and not b.mask[:, n_real:].any() and not b.label_mask[:, n_real:].any()
        # A real bag fills its first |Y_b| slots with its labels, in order; a bucket of small work
        # holds several label-set sizes (CANONICAL_MERGE_WORK), so it may leave slots empty.
        for col, bag in enumerate(b.bag_ids):
            k = len(sets[bag])
            assert b.label_mask[:, col].tolist() == [True] * k + [False] * (b.labels.shape[0] - k)
            assert b.labels[:k, col].tolist() == sets[bag].tolist()
        sizes.append({len(sets[bag]) for bag in b.bag_ids})
        seen.extend(b.bag_ids.tolist())
    assert sorted(seen) == list(range(37))  # every bag once: nothing dropped, nothing doubled
    assert any(len(s) > 1 for s in sizes)  # these small buckets merged across sizes
    # Without canonical shapes, sizes merge only under SMALL_BUCKET_CELLS: a K = 10 bag keeps its own.
    tight = pack_bags([3, 3, 11], [[0], [1, 2], np.arange(10)])
    assert [b.labels.shape[0] for b in tight.buckets] == [2, 10]
    # The floor of four bags applies only where the padded work stays small.
    big = pack_bags([11], [np.arange(10)], canonical=True).buckets[0]
    assert big.mask.shape == (12, 1) and 4 * 12 * 10 * 2**10 > CANONICAL_FLOOR_WORK


def test_model_data_padding_changes_no_potential_gradient_or_e_step():
    rng = np.random.default_rng(1)
    bags = [rng.normal(size=(int(n), 5)) for n in rng.integers(1, 6, 45)]
    sets = [rng.choice(7, min(len(x), int(rng.integers(1, 3))), replace=False) for x in bags]
    params = {"W_raw": rng.normal(size=(5, 6)), "beta_raw": rng.normal(size=6)}
    with jax.enable_x64(True):
        scales = prior_scales(1.0, 5.0, np.float64)
        out = []
        for canonical in (False, True):
            data = make_model_data(bags, sets, 7, dtype=np.float64, canonical_shapes=canonical)
            arrays, shape = split_model_data(data)
            value, grad = potential_and_grad(params, arrays, scales, shape, True)
            e = jax.jit(e_step, static_argnums=3)(params, arrays, scales, shape)  # as fits compile it
            post = {}
            for bucket, p in zip(data.buckets, e.posteriors):
                for row, bag in enumerate(bucket.bag_ids):
                    post[int(bag)] = np.asarray(p[row, : len(bags[bag])])
                assert np.all(np.asarray(p[len(bucket.bag_ids) :]) == 0.0)  # padding takes nothing
            out.append((float(value), grad, float(e.log_joint), post, data))
    (v0, g0, lj0, p0, tight), (v1, g1, lj1, p1, padded) = out
    assert sum(b.mask.shape[0] for b in padded.buckets) > 45  # it really padded
    assert v1 == pytest.approx(v0, rel=1e-12) and lj1 == pytest.approx(lj0, rel=1e-12)
    for k in g0:
        np.testing.assert_allclose(g1[k], g0[k], rtol=1e-10, atol=1e-12)
    for b in range(45):
        np.testing.assert_allclose(p1[b], p0[b], atol=1e-12)
    for data in (tight, padded):
        # Each row's value is its bag's id (-1 on padding): merging must put every bag in place.
        sites = {}
        for k, bucket in enumerate(data.buckets):
            value = np.full((1, bucket.mask.shape[0]), -1)
            value[0, : len(bucket.bag_ids)] = bucket.bag_ids
            sites[data.site_name(k)] = value
        np.testing.assert_array_equal(data.merge_sites(sites), np.arange(45)[None])


def test_folds_of_similar_size_share_one_compiled_em():
    """Two datasets with other bag counts and lengths, on the same canonical shapes: one compile."""
    from orlr_ppl.inference.point import em

    def dataset(seed: int, n_bags: int):
        rng = np.random.default_rng(seed)
        bags = [rng.normal(size=(int(n), 4)) for n in rng.integers(2, 6, n_bags)]
        sets = [np.sort(rng.choice(5, 2, replace=False)) for _ in bags]
        return make_model_data(bags, sets, 5, canonical_shapes=True)

    first, second = dataset(0, 41), dataset(1, 45)  # 41 and 45 bags both pad to 48
    assert [b.mask.shape for b in first.buckets] == [b.mask.shape for b in second.buckets]
    em.fit_em(first, prior_scale=1.0, max_iter=3)
    before = em._em._cache_size()
    em.fit_em(second, prior_scale=1.0, max_iter=3)
    assert em._em._cache_size() == before
    tight = make_model_data([np.ones((3, 4))] * 45, [[0, 1]] * 45, 5)
    assert tight.buckets[0].mask.shape[0] == 45  # without canonical shapes, no padding


def test_ragged_predictions_of_similar_shapes_share_a_program():
    """``instance_posteriors`` pads to canonical shapes: another fold's bags compile nothing new."""
    from orlr_ppl.dp import ragged

    rng = np.random.default_rng(7)

    def bags(n_bags):  # 2 or 3 instances, 1 or 2 labels: 41 and 45 bags pad alike
        logits = [rng.normal(size=(2 + b % 2, 4)) * 3 for b in range(n_bags)]
        sets = [sorted(rng.choice(4, 1 + b % 2, replace=False).tolist()) for b in range(n_bags)]
        return logits, sets

    first = bags(41)
    ragged.instance_posteriors(*first)
    before = ragged.packed_posteriors._cache_size()
    second = bags(45)
    post = ragged.instance_posteriors(*second)
    assert ragged.packed_posteriors._cache_size() == before
    ll = ragged.bag_log_likelihood(*second)
    assert len(post) == 45 and ll.shape == (45,)  # the padding is cut off
    for logits, sets, p, value in zip(*second, post, ll):  # and the values are each bag's own
        assert p.shape == logits.shape
        want_ll, want_post = brute_force(logits, sets)
        np.testing.assert_allclose(p, want_post, atol=1e-5)
        assert value == pytest.approx(want_ll, abs=1e-4)


def test_a_shared_layout_packs_every_fold_alike_and_changes_no_result():
    """Folds with other label-set sizes (one lacks |Y| = 3) pack into one layout; values unchanged."""
    from orlr_ppl.dp.packing import shared_layout

    rng = np.random.default_rng(3)
    bags = [rng.normal(size=(int(n), 4)) for n in rng.integers(3, 9, 30)]
    sets = [np.sort(rng.choice(6, 1 + b % 2, replace=False)) for b in range(30)]
    sets[7] = np.array([0, 2, 4])  # the one bag with three labels
    folds = [np.arange(30) % 3 != f for f in range(3)]  # fold 1 holds bag 7 out
    shapes = [
        (
            np.array([len(bags[i]) for i in np.flatnonzero(f)]),
            np.array([len(sets[i]) for i in np.flatnonzero(f)]),
        )
        for f in folds
    ]
    layout = shared_layout(shapes)
    params = {"W_raw": rng.normal(size=(4, 5)), "beta_raw": rng.normal(size=5)}
    families = set()
    with jax.enable_x64(True):
        scales = prior_scales(1.0, 5.0, np.float64)
        for f in folds:
            fb, fs = [bags[i] for i in np.flatnonzero(f)], [sets[i] for i in np.flatnonzero(f)]
            out = []
            for kw in ({}, {"layout": layout}):
                data = make_model_data(fb, fs, 6, dtype=np.float64, **kw)
                arrays, shape = split_model_data(data)
                out.append((potential_and_grad(params, arrays, scales, shape, True), data))
            (v0, g0), _ = out[0]
            (v1, g1), shared = out[1]
            assert float(v1) == pytest.approx(float(v0), rel=1e-12)
            np.testing.assert_allclose(g1["W_raw"], g0["W_raw"], rtol=1e-10, atol=1e-12)
            families.add(tuple((b.max_labels, b.mask.shape) for b in shared.buckets))
            assert sorted(np.concatenate([b.bag_ids for b in shared.buckets]).tolist()) == list(
                range(len(fb))
            )
    assert len(families) == 1 and 3 in [k for k, _ in next(iter(families))]
    with pytest.raises(ValueError, match="do not fit the fixed layout"):
        make_model_data([np.ones((20, 4))], [[0, 1]], 6, layout=layout)  # longer than any bucket takes


def test_cross_validation_gives_canonical_models_one_layout(tmp_path):
    """Every fold's EM runs the one compiled program, and a model fitted on the layout saves without it."""
    import warnings

    from orlr_ppl.data.datasets import make_miml_digits
    from orlr_ppl.estimators import ORLR
    from orlr_ppl.evaluation.cross_validation import cross_validate, fold_layout
    from orlr_ppl.inference.point import em

    # Bags of at most 4 digits: a small program per layout; the 4 folds still pack to 4 distinct
    # layouts on their own (tight or canonical), so one program means they shared the CV's layout.
    data = make_miml_digits(60, max_size=4, seed=2)
    jax.clear_caches()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # 3 iterations converge nowhere
        cross_validate(
            data,
            {"EM": lambda: ORLR(inference=EM(max_iter=3))},
            "inductive",
            n_folds=4,
            seed=0,
        )
        assert em._em._cache_size() == 1
        trains = [train for train, _ in data.kfold(4, seed=0)]
        model = ORLR(inference=EM(max_iter=3)).fit(trains[0], layout=fold_layout(trains))
        alone = ORLR(inference=EM(max_iter=3)).fit(trains[0])
    assert model.canonical_shapes_ is True
    np.testing.assert_allclose(model.coef_, alone.coef_, rtol=1e-6, atol=1e-8)  # a layout changes no result
    loaded = ORLR.load(model.save(tmp_path / "m"))  # a layout shapes the fit, not the saved model
    assert "canonical_shapes" not in loaded.get_params() and "layout" not in loaded.get_params()
    for mine, theirs in zip(loaded.predict_proba(data.bags[:3]), model.predict_proba(data.bags[:3])):
        np.testing.assert_allclose(mine, theirs, rtol=1e-6)


@pytest.mark.parametrize("variant", ["plain", "novel_leak_known"])
def test_buckets_merged_across_label_set_sizes_change_no_result(variant, monkeypatch):
    """Small buckets of several label-set sizes share one DP with masked slots: same values exactly.

    The reference packs one bucket group per size (merging switched off); the merged packing puts
    bags of 1, 2 and 3 labels into one bucket of K = 3. Potential, gradient, E-step posteriors and
    the leak's posteriors agree bag by bag, under the relaxed model too (novel class, learnt leak,
    known instance labels), where the novel class takes the slot after each bag's own labels.
    """
    import orlr_ppl.dp.packing as packing

    rng = np.random.default_rng(3)
    bags = [rng.normal(size=(int(n), 4)) for n in rng.integers(3, 7, 30)]
    sets = [np.sort(rng.choice(5, 1 + b % 3, replace=False)) for b in range(30)]
    relaxed = variant != "plain"
    known = [np.where(np.arange(len(x)) == 0, s[0], -1) for x, s in zip(bags, sets)] if relaxed else None
    kwargs = {"novel_class": True, "leak": "learn", "instance_labels": known} if relaxed else {}
    c_out = 6 if relaxed else 5
    params = {"W_raw": rng.normal(size=(4, c_out - 1)), "beta_raw": rng.normal(size=c_out - 1)}
    if relaxed:
        params["leak_logit"] = np.asarray(-2.0)
    out = []
    with jax.enable_x64(True):
        scales = prior_scales(1.0, 5.0, np.float64)
        for merge in (True, False):
            if not merge:
                monkeypatch.setattr(packing, "_merge_small", lambda plan, lengths, canonical: plan)
                monkeypatch.setattr(packing, "_recalled", [])  # else the merged layout is recalled
            data = make_model_data(bags, sets, 5, dtype=np.float64, canonical_shapes=True, **kwargs)
            arrays, shape = split_model_data(data)
            value, grad = potential_and_grad(params, arrays, scales, shape, True)
            e = jax.jit(e_step, static_argnums=3)(params, arrays, scales, shape)
            post, leaked = {}, {}
            for k, bucket in enumerate(data.buckets):
                for row, bag in enumerate(bucket.bag_ids):
                    post[int(bag)] = np.asarray(e.posteriors[k][row, : len(bags[bag])])
                    if relaxed:
                        leaked[int(bag)] = np.asarray(e.leaked[k][row])
            out.append((float(value), grad, post, leaked, shape.max_labels))
    (v1, g1, p1, l1, ks1), (v0, g0, p0, l0, ks0) = out
    assert ks0 == (1, 2, 3) and ks1 == (3,)  # the reference really is one bucket per size
    assert v1 == pytest.approx(v0, rel=1e-12)
    for name in g0:
        np.testing.assert_allclose(g1[name], g0[name], rtol=1e-10, atol=1e-12)
    for b in range(30):
        np.testing.assert_allclose(p1[b], p0[b], atol=1e-12)
        if relaxed:
            np.testing.assert_allclose(l1[b], l0[b], atol=1e-12)


def test_a_fold_recalls_the_layout_an_earlier_fold_packed_into_and_changes_no_result():
    """A fold without the one five-label bag, and with more instances, packs into the first fold's layout.

    Packed alone it would have one bucket fewer, hence programs of its own. The values are its own
    packing's (float64, to round-off); a collection longer than any bucket, or one far smaller than
    the layout (more than ``RECALL_PAD_FACTOR`` its own work), gets a layout of its own.
    """
    from orlr_ppl.dp import packing

    rng = np.random.default_rng(5)
    bags = [rng.normal(size=(int(n), 4)) for n in rng.integers(3, 9, 201)]
    sets = [np.sort(rng.choice(6, 1 + b % 2, replace=False)) for b in range(201)]
    sets[0] = np.arange(5)  # the one bag with five labels, in the first fold alone
    bags[0], bags[200] = rng.normal(size=(5, 4)), rng.normal(size=(8, 4))
    first, second = np.arange(201) < 200, np.arange(201) >= 1
    params = {"W_raw": rng.normal(size=(4, 5)), "beta_raw": rng.normal(size=5)}
    shapes = []
    with jax.enable_x64(True):
        scales = prior_scales(1.0, 5.0, np.float64)
        for fold in (first, second):
            fb, fs = [bags[i] for i in np.flatnonzero(fold)], [sets[i] for i in np.flatnonzero(fold)]
            data = make_model_data(fb, fs, 6, dtype=np.float64, canonical_shapes=True)
            arrays, shape = split_model_data(data)
            shapes.append((shape.max_labels, [b.mask.shape for b in data.buckets], data.max_instances))
            assert sorted(np.concatenate([b.bag_ids for b in data.buckets]).tolist()) == list(range(len(fb)))
            value, grad = potential_and_grad(params, arrays, scales, shape, True)
            alone = make_model_data(fb, fs, 6, dtype=np.float64)  # no padding, no layout
            want_arrays, want_shape = split_model_data(alone)
            want_value, want_grad = potential_and_grad(params, want_arrays, scales, want_shape, True)
            assert float(value) == pytest.approx(float(want_value), rel=1e-12)
            np.testing.assert_allclose(grad["W_raw"], want_grad["W_raw"], rtol=1e-10, atol=1e-12)
    n_first, n_second = (sum(len(bags[i]) for i in np.flatnonzero(f)) for f in (first, second))
    assert n_second > n_first and 5 in shapes[0][0]
    assert shapes[1] == shapes[0]  # one bucket without bags, the same instance arrays: one program
    recalled = list(packing._recalled)
    packing._recalled.clear()
    fb, fs = [bags[i] for i in np.flatnonzero(second)], [sets[i] for i in np.flatnonzero(second)]
    alone = make_model_data(fb, fs, 6, canonical_shapes=True)
    assert 5 not in split_model_data(alone)[1].max_labels  # packed alone, the fold would compile anew
    packing._recalled[:] = recalled
    lengths, sizes = np.array([len(b) for b in fb]), np.array([len(y) for y in fs])
    assert packing.canonical_layout(lengths, sizes) is recalled[0]
    longer = packing.canonical_layout(np.append(lengths, 40), np.append(sizes, 1))  # no bucket takes it
    tiny = packing.canonical_layout(lengths[:2], sizes[:2])  # fits, but at many times its own work
    assert longer is not recalled[0] and tiny is not recalled[0]
    assert packing._recalled[:3] == [tiny, longer, recalled[0]]  # remembered, most recent first


@pytest.mark.parametrize("method", ["em", "map"])
def test_an_estimator_s_later_folds_compile_nothing(method):
    """``ORLR`` with its defaults on two folds, the second without the five-label bag: one program."""
    import warnings

    from orlr_ppl.estimators import ORLR
    from orlr_ppl.inference.point import em
    from orlr_ppl.model import log_density

    rng = np.random.default_rng(6)
    bags = [rng.normal(size=(int(n), 3)) for n in rng.integers(3, 9, 201)]
    sets = [np.sort(rng.choice(6, 1 + b % 2, replace=False)).tolist() for b in range(201)]
    sets[0] = list(range(5))
    program = em._em if method == "em" else log_density._fisher_jit
    sizes = []
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # a few iterations converge nowhere
        for fold in (slice(0, 200), slice(1, 201)):
            ORLR(inference=EM(max_iter=3) if method == "em" else MAP(max_iter=3)).fit(bags[fold], sets[fold])
            sizes.append(program._cache_size())
    assert sizes[1] == sizes[0] >= 1
