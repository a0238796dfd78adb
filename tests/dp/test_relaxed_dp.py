"""The subset DP's relaxed unions (issue 12): leaky labels, optional (novel) slots and known
instance labels, each alone and combined, against brute-force enumeration."""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from conftest import DTYPES, TOL, precision
from hypothesis import assume, given, settings
from hypothesis import strategies as st
from reference import brute_force_variants, brute_force_variants_jax
from scipy.special import log_softmax

from orlr_ppl.dp import subset_dp
from orlr_ppl.dp.bucket import bucket_log_likelihood, bucket_posteriors
from orlr_ppl.dp.merging import merge, merge_plan, split
from orlr_ppl.dp.subset_dp import BucketInputs, buckets_dp
from orlr_ppl.dp.variants import end_states, log_leak_start

N_CLASSES = 4  # the last is the novel class when a case has one


COMBINATIONS = [
    pytest.param(novel, leak, known, id=f"novel{int(novel)}-leak{int(leak)}-known{int(known)}")
    for novel in (False, True)
    for leak in (False, True)
    for known in (False, True)
]
"""Every combination of the relaxations (novel slot, leak, known instance labels), each a test case:
the strategy draws within one, so that none is left to chance."""


@st.composite
def cases(draw, novel: bool, leak: bool, with_known: bool):
    """A bag (1-4 instances) and a label set of the known classes, under the given relaxations:
    ``with_known`` gives at least one instance a known label (any of the bag's slots), else none."""
    n = draw(st.integers(1, 4))
    known_classes = N_CLASSES - 1 if novel else N_CLASSES
    k = draw(st.integers(1, min(3, known_classes)))
    labels = sorted(draw(st.permutations(range(known_classes)))[:k])
    if not leak and not novel:
        n = max(n, k)  # without a leak, fewer instances than labels has likelihood zero
    scale = draw(st.sampled_from([1.0, 4.0, 30.0]))
    values = st.floats(-1.0, 1.0, allow_nan=False, width=32)
    logits = scale * np.array(draw(st.lists(values, min_size=n * N_CLASSES, max_size=n * N_CLASSES)))
    eps = [draw(st.sampled_from([1e-3, 0.1, 0.5])) for _ in labels] if leak else None
    slots = labels + ([N_CLASSES - 1] if novel else [])
    known = [-1] * n
    if with_known:
        known = [draw(st.sampled_from([-1, -1] + slots)) for _ in range(n)]
        first = draw(st.integers(0, n - 1))
        known[first] = draw(st.sampled_from(slots))  # at least one
    return logits.reshape(n, N_CLASSES), labels, novel, eps, known


@jax.jit
def _bucket_dp(inputs: BucketInputs):
    """``buckets_dp`` on one bucket, compiled as fits run it: one program per shape, not one per operation."""
    return buckets_dp([inputs], with_posteriors=True)[0]


def _inputs(logits, labels, novel, eps, known, dtype) -> tuple[BucketInputs, list[int]]:
    """One bag as a bucket of its own, and the class of each of its slots."""
    slots = labels + ([N_CLASSES - 1] if novel else [])
    lp = log_softmax(np.asarray(logits, np.float64), axis=1)[:, slots]
    for i, k in enumerate(known):  # a known label: the instance's other slots are impossible
        if k >= 0:
            lp[i, [j for j, s in enumerate(slots) if s != k]] = -np.inf
    k_slots = len(slots)
    leak = None
    if eps is not None:
        leak = np.full((k_slots, 1), -np.inf)  # the novel slot never leaks
        leak[: len(eps), 0] = np.log(eps)
    optional = np.array([False] * len(labels) + [True] * novel)[:, None]
    inputs = BucketInputs(
        jnp.asarray(lp[:, :, None], dtype),
        jnp.ones((len(lp), 1), bool),
        jnp.ones((k_slots, 1), bool),
        None if leak is None else jnp.asarray(leak, dtype),
        jnp.asarray(optional) if novel else None,
    )
    return inputs, slots


def _class_posteriors(posteriors, slots) -> np.ndarray:
    """(n, K) slot posteriors of one bag -> (n, C) class posteriors."""
    post = np.zeros((posteriors.shape[0], N_CLASSES))
    post[:, slots] = np.asarray(posteriors, np.float64)
    return post


def _dp(logits, labels, novel, eps, known, dtype):
    """One bag through ``buckets_dp``: (log-likelihood, (n, C) posteriors)."""
    inputs, slots = _inputs(logits, labels, novel, eps, known, dtype)
    res = _bucket_dp(inputs)
    return float(res.log_likelihood[0]), _class_posteriors(res.posteriors[:, :, 0], slots)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize(("novel", "leak", "with_known"), COMBINATIONS)
@settings(max_examples=3, deadline=None)
@given(data=st.data())
def test_relaxed_unions_match_brute_force(dtype, novel, leak, with_known, data):
    logits, labels, novel, eps, known = data.draw(cases(novel, leak, with_known))
    optional = [N_CLASSES - 1] if novel else []
    want_ll, want_post = brute_force_variants(logits, labels, optional, eps, known)
    with precision(dtype):
        ll, post = _dp(logits, labels, novel, eps, known, dtype)
    if not np.isfinite(want_ll):
        assert ll == -np.inf
        return
    assert ll == pytest.approx(want_ll, rel=TOL[dtype], abs=TOL[dtype])
    np.testing.assert_allclose(post, want_post, atol=10 * TOL[dtype])


def test_a_leak_explains_labels_with_no_instance():
    """Two instances, three labels: impossible as a union, possible with a leak, exact either way."""
    logits = np.array([[2.0, 0.0, -1.0, 0.5], [0.0, 1.0, 0.0, -2.0]])
    ll, _ = _dp(logits, [0, 1, 2], False, None, [-1, -1], "float32")
    assert ll == -np.inf
    with precision("float64"):
        ll, post = _dp(logits, [0, 1, 2], False, [0.05, 0.05, 0.05], [-1, -1], "float64")
    want_ll, want_post = brute_force_variants(logits, [0, 1, 2], (), [0.05] * 3)
    assert ll == pytest.approx(want_ll, rel=1e-12)
    np.testing.assert_allclose(post, want_post, atol=1e-12)


@pytest.mark.parametrize("dtype", DTYPES)
def test_variants_survive_extreme_logits(dtype):
    """|z| ~ 1e3 with a novel slot and leaks: the log-space fallback keeps them finite and exact."""
    logits = np.array([[1e3, -1e3, 0.0, 5.0], [0.0, -1e3, 1e3, 0.0], [1e3, 0.0, -1e3, 900.0]])
    with precision(dtype):
        ll, post = _dp(logits, [0, 1], True, [1e-3, 0.2], [-1, -1, -1], dtype)
    want_ll, want_post = brute_force_variants(logits, [0, 1], [3], [1e-3, 0.2])
    assert np.isfinite(ll)
    assert abs(ll - want_ll) <= TOL[dtype] * max(1.0, abs(want_ll))
    np.testing.assert_allclose(post, want_post, atol=1e-3 if dtype == "float32" else 1e-8)


MIXED_BUCKETS = [
    # (logits, labels, novel, eps): one bag a bucket, each of its own shape and variant.
    (np.array([[1e3, -1e3, 0.0, 0.0], [1e3, -1e3, 0.0, 0.0], [0.0, -1e3, 0.0, 900.0]]), [0, 1], False, None),
    (np.array([[0.5, -1.0, 2.0, 0.0], [1.0, 0.0, -0.5, 0.3]]), [0, 2], False, [1e-3, 0.2]),
    (np.array([[0.0, 1e3, 0.0, -1e3], [5.0, -1e3, 0.0, 0.0], [0.0, 0.0, 0.0, 1e3]]), [1], True, None),
    (
        np.array([[1.0, 0.0, 0.0, 2.0], [0.0, 3.0, 0.0, 0.0], [-1.0, 0.0, 1.0, 0.0], [0.0, 0.0, 0.0, 1.0]]),
        [0, 1],
        True,
        [0.1, 0.5],
    ),
    (
        np.array([[0.0, 1.0, -1.0, 0.0], [2.0, 0.0, 0.0, 0.0], [0.0, 0.0, 3.0, 0.0], [0.5, 0.5, 0.0, 0.0]]),
        [0, 1, 2],
        False,
        None,
    ),
]
"""Buckets of different instance and slot counts, with and without a leak or a novel slot; the first
bag's label set is ~e^-1900 likely, so the probability-space pass underflows and the fallback runs."""


@pytest.mark.parametrize("dtype", DTYPES)
def test_the_fallback_merges_buckets_of_every_variant_exactly(dtype):
    with precision(dtype):
        built = [_inputs(z, y, novel, eps, [-1] * len(z), dtype) for z, y, novel, eps in MIXED_BUCKETS]
        inputs = [b[0] for b in built]
        results = jax.jit(functools.partial(buckets_dp, with_posteriors=True))(inputs)
    # The fallback is needed: the first bag's likelihood is below the float's smallest normal number.
    assert brute_force_variants(*MIXED_BUCKETS[0][:2])[0] < np.log(np.finfo(dtype).tiny)
    # The buckets merge: fewer log-space DPs than buckets.
    assert len(merge_plan([b.slot_log_probs.shape for b in inputs])) < len(inputs)
    for (z, y, novel, eps), (_, slots), res in zip(MIXED_BUCKETS, built, results):
        want_ll, want_post = brute_force_variants(z, y, [N_CLASSES - 1] if novel else [], eps)
        ll = float(res.log_likelihood[0])
        assert abs(ll - want_ll) <= TOL[dtype] * max(1.0, abs(want_ll)), (y, ll, want_ll)
        post = _class_posteriors(res.posteriors[:, :, 0], slots)
        np.testing.assert_allclose(post, want_post, atol=1e-3 if dtype == "float32" else 1e-8)
        assert (res.leak_posteriors is None) == (eps is None)


def test_a_merged_log_space_run_is_the_buckets_run_apart():
    """``dp.merging``: padding to one shape and splitting back changes no value, leak posteriors included."""
    with precision("float64"):
        preps = [
            subset_dp._prepare(_inputs(z, y, novel, eps, [-1] * len(z), "float64")[0])
            for z, y, novel, eps in MIXED_BUCKETS
        ]

        @jax.jit
        def merged_and_apart(preps):
            merged = split(subset_dp._run(subset_dp._LOG, [merge(preps)], True)[0], preps)
            return merged, [subset_dp._run(subset_dp._LOG, [p], True)[0] for p in preps]

        for got, want in zip(*merged_and_apart(preps)):
            assert jax.tree.structure(got) == jax.tree.structure(want)
            for g, w in zip(jax.tree.leaves(got), jax.tree.leaves(want)):
                assert g.shape == w.shape
                np.testing.assert_allclose(np.asarray(g), np.asarray(w), rtol=1e-12, atol=1e-12)


def test_start_and_end_states():
    """The leak start is a distribution over subsets of the real slots; ends hold every required slot."""
    with precision("float64"):
        start = np.exp(
            np.asarray(
                log_leak_start(
                    jnp.log(jnp.array([[0.1], [0.3], [0.5]])), jnp.array([[True], [True], [False]])
                )
            )
        )
        ends = np.asarray(
            end_states(jnp.array([[True], [True], [True]]), jnp.array([[False], [False], [True]]))
        )
    np.testing.assert_allclose(
        start[:, 0], [0.9 * 0.7, 0.1 * 0.7, 0.9 * 0.3, 0.1 * 0.3, 0, 0, 0, 0], atol=1e-15
    )
    assert ends[:, 0].tolist() == [False, False, False, True, False, False, False, True]


def _bucket_args(labels, novel, eps, known, dtype):
    """One bag's ``bucket_log_likelihood`` arguments besides the logits, and (|Y|,) log eps or None."""
    slots = labels + ([N_CLASSES - 1] if novel else [])
    k = len(slots)
    log_leak = None if eps is None else jnp.asarray(np.log(eps), dtype)
    known_slot = [slots.index(c) if c >= 0 else -1 for c in known]
    args = dict(
        labels=jnp.asarray([slots], jnp.int32),
        label_mask=jnp.ones((1, k), bool),
        optional=jnp.asarray([[False] * len(labels) + [True] * novel]) if novel else None,
        known=jnp.asarray([known_slot], jnp.int32),
    )
    return args, log_leak


def _full_leak(log_leak, novel):
    """(1, K) per-slot log eps: the novel slot never leaks."""
    tail = jnp.full((1,), -jnp.inf, log_leak.dtype) if novel else jnp.zeros((0,), log_leak.dtype)
    return jnp.concatenate([log_leak, tail])[None]


@functools.partial(jax.jit, static_argnames="novel")
def _dp_gradients(z, log_leak, args, novel):
    """d log p / d (logits, log eps) of one bag through ``bucket_log_likelihood``'s custom VJP."""
    mask = jnp.ones((1, z.shape[0]), bool)

    def ours(z, ll):
        full = None if ll is None else _full_leak(ll, novel)
        return bucket_log_likelihood(
            z[None], mask, args["labels"], args["label_mask"], full, args["optional"], args["known"]
        )[0]

    return jax.grad(ours, argnums=(0, 1))(z, log_leak)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize(("novel", "leak", "with_known"), COMBINATIONS)
@settings(max_examples=2, deadline=None)
@given(data=st.data())
def test_relaxed_gradients_match_brute_force(dtype, novel, leak, with_known, data):
    """d log p / d logits and d log p / d log eps through the DP's custom VJP, against autodiff of
    the enumeration, for every combination of novel slot, leak and known labels (each compiled:
    one program per case, not one per operation)."""
    logits, labels, novel, eps, known = data.draw(cases(novel, leak, with_known))
    optional = [N_CLASSES - 1] if novel else []
    # A case with no labelling (known labels that cannot cover the set) has no gradient: draw another.
    assume(np.isfinite(brute_force_variants(logits, labels, optional, eps, known)[0]))
    with precision(dtype):
        args, log_leak = _bucket_args(labels, novel, eps, known, dtype)

        def ref(z, ll):
            return brute_force_variants_jax(z, labels, optional, ll, known)

        z = jnp.asarray(logits, dtype)
        got = _dp_gradients(z, log_leak, args, novel)
        want = jax.jit(jax.grad(ref, argnums=(0, 1)))(z, log_leak)
    tol = 1e-3 if dtype == "float32" else 1e-9
    np.testing.assert_allclose(np.asarray(got[0]), np.asarray(want[0]), atol=tol)
    if eps is not None:
        np.testing.assert_allclose(np.asarray(got[1]), np.asarray(want[1]), atol=tol)


def test_leak_posteriors_are_the_chance_each_label_leaked():
    """``leak_posteriors`` against enumeration: p(leak on slot j | Y) by summing leak patterns."""
    logits = np.array([[1.0, -0.5, 0.3, 0.0], [0.2, 0.1, -1.0, 0.4]])
    labels, eps = [0, 1, 2], [0.1, 0.3, 0.05]
    with precision("float64"):
        args, log_leak = _bucket_args(labels, False, eps, [-1, -1], "float64")
        res = bucket_posteriors(
            jnp.asarray(logits[None]),
            jnp.ones((1, 2), bool),
            args["labels"],
            args["label_mask"],
            log_leak[None],
        )
        got = np.asarray(res.leak_posteriors[0])
    total = brute_force_variants(logits, labels, (), eps)[0]
    want = []
    for j in range(3):  # p(Y, leak j) = eps_j * p(Y | leak j forced on)
        forced = [1.0 if i == j else e for i, e in enumerate(eps)]
        want.append(eps[j] * np.exp(brute_force_variants(logits, labels, (), forced)[0] - total))
    np.testing.assert_allclose(got, want, rtol=1e-10)
