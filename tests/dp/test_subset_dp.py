"""The subset DP against brute-force enumeration and other independent references."""

from __future__ import annotations

import itertools

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from conftest import DTYPES, TOL, precision
from hypothesis import given, settings
from hypothesis import strategies as st
from reference import brute_force, inclusion_exclusion_mp
from scipy.special import log_softmax

import orlr_ppl
from orlr_ppl.dp import subset_dp
from orlr_ppl.dp.bucket import bucket_dp
from orlr_ppl.dp.subset_dp import BucketInputs

N_MAX, K_MAX, C_MAX = 7, 4, 6
_bucket_dp = jax.jit(bucket_dp)


@st.composite
def small_bags(draw, scale: float = 4.0):
    """A bag (n <= 7 instances, C <= 6 classes) and a label set of size <= min(n, 4)."""
    n = draw(st.integers(1, N_MAX))
    c = draw(st.integers(1, C_MAX))
    k = draw(st.integers(1, min(n, K_MAX, c)))
    labels = draw(st.permutations(range(c)))[:k]
    values = st.floats(-scale, scale, allow_nan=False, width=64)
    logits = np.array(draw(st.lists(values, min_size=n * c, max_size=n * c))).reshape(n, c)
    return logits, list(labels)


def _padded_bucket(logits: np.ndarray, labels: list[int], dtype: str):
    """The bag padded to the test's fixed (N_MAX, K_MAX) shape: one compile for all examples."""
    n = logits.shape[0]
    lp = log_softmax(logits, axis=1)[:, labels]
    slot = np.full((1, N_MAX, K_MAX), -3.0)  # junk on padding: it must not matter
    slot[0, :n, : len(labels)] = lp
    mask = np.arange(N_MAX)[None] < n
    label_mask = np.arange(K_MAX)[None] < len(labels)
    return jnp.asarray(slot, dtype=dtype), jnp.asarray(mask), jnp.asarray(label_mask)


@pytest.mark.parametrize("dtype", DTYPES)
@settings(max_examples=120)
@given(bag=small_bags())
def test_dp_matches_brute_force(dtype, bag):
    logits, labels = bag
    ref_ll, ref_post = brute_force(logits, labels)
    with precision(dtype):
        res = _bucket_dp(*_padded_bucket(logits, labels, dtype))
        ll = float(res.log_likelihood[0])
        post = np.asarray(res.posteriors[0], dtype=np.float64)
    tol = TOL[dtype]
    assert abs(ll - ref_ll) <= tol * max(1.0, abs(ref_ll))
    n = logits.shape[0]
    np.testing.assert_allclose(post[:n, : len(labels)], ref_post[:, labels], atol=tol, rtol=0)
    assert np.all(post[n:] == 0) and np.all(post[:, len(labels) :] == 0)


@pytest.mark.parametrize("dtype", DTYPES)
def test_public_api_matches_brute_force(dtype):
    rng = np.random.default_rng(7)
    bags, sets = [], []
    for _ in range(25):
        n = int(rng.integers(1, 6))
        c = 5
        k = int(rng.integers(1, min(n, 4) + 1))
        bags.append(rng.normal(scale=2.0, size=(n, c)))
        sets.append(rng.choice(c, k, replace=False))
    with precision(dtype):
        ll = orlr_ppl.bag_log_likelihood(bags, sets)
        post = orlr_ppl.instance_posteriors(bags, sets)
    assert ll.dtype == np.dtype(dtype)
    tol = TOL[dtype]
    for b in range(len(bags)):
        ref_ll, ref_post = brute_force(bags[b], sets[b])
        assert abs(ll[b] - ref_ll) <= tol * max(1.0, abs(ref_ll)), b
        np.testing.assert_allclose(post[b], ref_post, atol=tol, rtol=0)
        np.testing.assert_allclose(post[b].sum(axis=1), 1.0, atol=tol)
        outside = np.setdiff1d(np.arange(5), sets[b])
        assert np.all(post[b][:, outside] == 0)


@pytest.mark.parametrize("dtype", DTYPES)
def test_instance_and_label_order_invariance(dtype):
    rng = np.random.default_rng(3)
    with precision(dtype):
        for _ in range(5):
            z = rng.normal(scale=3.0, size=(6, 6))
            labels = rng.choice(6, 3, replace=False)
            perm = rng.permutation(6)
            ll = orlr_ppl.bag_log_likelihood([z, z[perm]], [labels, labels[::-1]])
            post = orlr_ppl.instance_posteriors([z, z[perm]], [labels, labels[::-1]])
            assert ll[0] == pytest.approx(ll[1], rel=TOL[dtype])
            np.testing.assert_allclose(post[0][perm], post[1], atol=TOL[dtype])


@pytest.mark.parametrize("dtype", DTYPES)
def test_bucketing_and_padding_invariance(dtype):
    """A bag's values are the same alone and inside a batch of mixed shapes."""
    rng = np.random.default_rng(11)
    bags, sets = [], []
    for _ in range(40):
        n = int(rng.integers(1, 30))
        k = int(rng.integers(1, min(n, 6) + 1))
        bags.append(rng.normal(scale=2.0, size=(n, 8)))
        sets.append(rng.choice(8, k, replace=False))
    with precision(dtype):
        batch_ll = orlr_ppl.bag_log_likelihood(bags, sets)
        batch_post = orlr_ppl.instance_posteriors(bags, sets)
        for b in [0, 7, 19, 33]:
            alone_ll = orlr_ppl.bag_log_likelihood([bags[b]], [sets[b]])[0]
            alone_post = orlr_ppl.instance_posteriors([bags[b]], [sets[b]])[0]
            assert batch_ll[b] == pytest.approx(alone_ll, rel=TOL[dtype], abs=TOL[dtype])
            np.testing.assert_allclose(batch_post[b], alone_post, atol=TOL[dtype])


@pytest.mark.parametrize("dtype", DTYPES)
def test_extreme_logits_are_finite_and_exact(dtype):
    """|z| up to 1e4, including labels the model finds astronomically unlikely."""
    rng = np.random.default_rng(5)
    bags, sets = [], []
    for _ in range(12):
        n = int(rng.integers(2, 6))
        bags.append(rng.choice([-1e4, 0.0, 1e4], size=(n, 4)) + rng.normal(scale=50.0, size=(n, 4)))
        sets.append(rng.choice(4, int(rng.integers(1, min(n, 3) + 1)), replace=False))
    # A label that is ~e^-2e4 likely everywhere: the probability-space pass underflows.
    bags.append(np.array([[1e4, -1e4, 0.0, 0.0], [1e4, -1e4, 0.0, 0.0], [0.0, -1e4, 0.0, 9e3]]))
    sets.append([0, 1])
    with precision(dtype):
        ll = orlr_ppl.bag_log_likelihood(bags, sets)
        post = orlr_ppl.instance_posteriors(bags, sets)
        # The last bag really needs the log-space path: in probability space it underflows.
        lp = log_softmax(bags[-1], axis=1)[:, sets[-1]]
        inputs = BucketInputs(
            jnp.asarray(lp[:, :, None], dtype=dtype), jnp.ones((3, 1), bool), jnp.ones((2, 1), bool)
        )
        fast = subset_dp._run(subset_dp._PROB, [subset_dp._prepare(inputs)], True)[0]
        assert not np.isfinite(float(fast.log_likelihood[0]))
    for b in range(len(bags)):
        ref_ll, ref_post = brute_force(bags[b], sets[b])
        assert np.isfinite(ll[b]), b
        # float32 logits near 1e4 carry an absolute error ~1e-3 themselves.
        assert abs(ll[b] - ref_ll) <= TOL[dtype] * max(1.0, abs(ref_ll)), (b, ll[b], ref_ll)
        assert np.all(np.isfinite(post[b]))
        np.testing.assert_allclose(post[b], ref_post, atol=1e-3 if dtype == "float32" else 1e-8)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("n_labels", [5, 6])
@pytest.mark.parametrize("extreme", [False, True])
def test_large_label_sets_match_brute_force(dtype, n_labels, extreme):
    """|Y| = 5, 6: the 32 and 64 subsets are summed in halves (``_reduce``), in both passes.

    With ``extreme``, one label is ~e^-400 (float32) or ~e^-800 (float64)
    likely, so the probability pass underflows and the log-space rerun answers.
    """
    rng = np.random.default_rng(n_labels)
    n, c = n_labels, n_labels + 1
    logits = rng.normal(scale=2.0, size=(n, c))
    labels = sorted(rng.choice(c, n_labels, replace=False).tolist())
    if extreme:
        logits[:, labels[-1]] -= 400.0 if dtype == "float32" else 800.0
    ref_ll, ref_post = brute_force(logits, labels)
    with precision(dtype):
        ll = orlr_ppl.bag_log_likelihood([logits], [labels])[0]
        post = orlr_ppl.instance_posteriors([logits], [labels])[0]
    assert abs(ll - ref_ll) <= TOL[dtype] * max(1.0, abs(ref_ll)), (ll, ref_ll)
    np.testing.assert_allclose(post, ref_post, atol=TOL[dtype] * 10, rtol=0)


@pytest.mark.parametrize("dtype", DTYPES)
def test_long_bag_matches_independent_float64(dtype):
    """5,000 instances, |Y| = 5: finite, exact, linear-time."""
    rng = np.random.default_rng(0)
    z = rng.normal(scale=1.5, size=(5000, 8))
    labels = [0, 2, 3, 5, 7]
    ref = inclusion_exclusion_mp(z, labels)
    with precision(dtype):
        ll = orlr_ppl.bag_log_likelihood([z], [labels])[0]
        post = orlr_ppl.instance_posteriors([z], [labels])[0]
    assert np.isfinite(ll)
    assert abs(ll - ref) <= TOL[dtype] * abs(ref) * (10 if dtype == "float32" else 1)
    np.testing.assert_allclose(post.sum(axis=1), 1.0, atol=1e-4 if dtype == "float32" else 1e-10)
    # Posteriors from the DP are p(y_i | Y) ~ softmax restricted to Y for a long bag,
    # where every label of Y is all but certain to appear elsewhere.
    restricted = np.exp(log_softmax(z[:, labels], axis=1))
    np.testing.assert_allclose(post[:, labels], restricted, atol=1e-4)


def test_gradient_is_posterior_minus_softmax_and_matches_finite_differences():
    rng = np.random.default_rng(2)
    bags = [rng.normal(size=(n, 4)) for n in (3, 5, 2, 4)]
    sets = [[0, 1], [1, 2, 3], [3], [0, 2]]
    with precision("float64"):
        flat, packed, _ = orlr_ppl.dp.ragged._prepare_ragged(bags, sets, 16)
        weights = jnp.asarray(rng.normal(size=4))

        def objective(z):
            return jnp.dot(orlr_ppl.packed_log_likelihood(z, packed), weights)

        grad = np.asarray(jax.grad(objective)(flat))
        eps = 1e-6
        for t, c in itertools.product(range(flat.shape[0]), range(4)):
            e = jnp.zeros_like(flat).at[t, c].set(eps)
            fd = (objective(flat + e) - objective(flat - e)) / (2 * eps)
            assert grad[t, c] == pytest.approx(float(fd), abs=1e-7)
        _, post = orlr_ppl.packed_posteriors(flat, packed)
        bag_of = np.repeat(np.arange(4), [3, 5, 2, 4])
        expected = np.asarray(weights)[bag_of, None] * (np.asarray(post) - jax.nn.softmax(flat, axis=1))
        np.testing.assert_allclose(grad, expected, atol=1e-12)


def test_jit_does_not_recompile_for_new_values():
    rng = np.random.default_rng(4)
    bags = [rng.normal(size=(n, 3)) for n in (2, 3, 4)]
    sets = [[0, 1], [2], [0, 1, 2]]
    flat, packed, _ = orlr_ppl.dp.ragged._prepare_ragged(bags, sets, 16)
    orlr_ppl.packed_log_likelihood(flat, packed)
    before = orlr_ppl.packed_log_likelihood._cache_size()
    orlr_ppl.packed_log_likelihood(flat * 2.0, packed)
    assert orlr_ppl.packed_log_likelihood._cache_size() == before
