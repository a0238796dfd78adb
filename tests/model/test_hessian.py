"""The potential's exact Hessian (Louis' identity over the DP's pairwise posteriors) and the pairwise
posteriors it rests on, against enumeration, autodiff and finite differences."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from conftest import DTYPES, precision
from hypothesis import given
from hypothesis import strategies as st
from jax.flatten_util import ravel_pytree
from reference import brute_force_pairs
from scipy.special import softmax

from orlr_ppl.dp.bucket import buckets_pair_posteriors
from orlr_ppl.model import log_density as ld
from orlr_ppl.model.numpyro_model import make_model_data, split_model_data, sum_to_zero_basis


def _bags(seed: int, n_bags: int = 12, d: int = 2, c: int = 4, max_n: int = 4):
    rng = np.random.default_rng(seed)
    bags = [rng.normal(size=(int(rng.integers(1, max_n + 1)), d)) for _ in range(n_bags)]
    sets = [
        sorted(rng.choice(c, int(rng.integers(1, min(len(b), 3) + 1)), replace=False).tolist()) for b in bags
    ]
    return bags, sets


def _params(d: int, c: int, seed: int, dtype) -> dict:
    rng = np.random.default_rng(seed + 100)
    return {
        "W_raw": jnp.asarray(rng.normal(size=(d, c - 1)), dtype),
        "beta_raw": jnp.asarray(0.5 * rng.normal(size=c - 1), dtype),
    }


def _louis(data, params, scales, fit_intercept=True):
    arrays, shape = split_model_data(data)
    padded, n_chunks = ld.hessian_chunks(arrays, shape, fit_intercept)
    hess, resolved = ld.potential_hessian(params, padded, scales, shape, fit_intercept, True, n_chunks)
    assert bool(resolved)
    return np.asarray(hess, np.float64)


def _autodiff(data, params, scales, fit_intercept=True):
    arrays, shape = split_model_data(data)
    flat, unravel = ravel_pytree(params)
    return np.asarray(
        jax.jit(jax.hessian(lambda x: ld.potential(unravel(x), arrays, scales, shape, fit_intercept)))(flat)
    )


@given(seed=st.integers(0, 10_000), n=st.integers(1, 4), k=st.integers(1, 3))
def test_pair_posteriors_match_enumeration(seed, n, k):
    """p(y_i = j | Y) and p(y_m = l | y_i = j, Y) at every position, against enumeration.

    One bag of 4 classes in a bucket of 4 instances and 3 slots, padded by the masks, so every
    example runs one compiled program.
    """
    k = min(k, n)
    rng = np.random.default_rng(seed)
    logits = 2.0 * rng.normal(size=(n, 4))
    labels = np.sort(rng.choice(4, k, replace=False))
    want = brute_force_pairs(logits, labels)  # (n, C, n, C)
    with jax.enable_x64(True):
        args = (
            jnp.asarray(np.pad(logits, ((0, 4 - n), (0, 0)))[None]),
            jnp.asarray(np.arange(4) < n)[None],
            jnp.asarray(np.pad(labels, (0, 3 - k))[None], jnp.int32),
            jnp.asarray(np.arange(3) < k)[None],
        )
        for i in range(5):  # a position past the bag's instances has no weight
            [pairs], resolved = _pairs([args], jnp.asarray(i))
            assert bool(resolved)
            weights, cond = np.asarray(pairs.weights)[0], np.asarray(pairs.conditional)[0]
            if i >= n:
                assert np.all(weights == 0) and np.all(cond == 0)
                continue
            joint = weights[:k, None, None] * cond[:k, :n, :k]
            np.testing.assert_allclose(joint, want[i][labels][:, :, labels], atol=1e-10)
            marginals = np.einsum("iaia->ia", want)[:, labels]
            np.testing.assert_allclose(np.asarray(pairs.marginals)[0, :n, :k], marginals, atol=1e-10)


_pairs = jax.jit(buckets_pair_posteriors)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize(
    "variant",
    [{}, {"novel_class": True}, {"leak": 0.1}, {"novel_class": True, "leak": 0.05}, {"known": True}],
)
def test_hessian_equals_autodiff(dtype, variant):
    """Louis' identity gives the Hessian that autodiff takes through the DP, for every relaxation."""
    bags, sets = _bags(seed=3)
    c, d = 4, 2
    kw = {k: v for k, v in variant.items() if k != "known"}
    known = None
    if variant.get("known"):
        known = [np.where(np.arange(len(b)) == 0, s[0], -1) for b, s in zip(bags, sets)]
    with precision(dtype):
        np_dtype = np.float64 if dtype == "float64" else np.float32
        data = make_model_data(bags, sets, c, dtype=np_dtype, instance_labels=known, **kw)
        params = _params(d, c + int(kw.get("novel_class", False)), 0, np_dtype)
        scales = ld.prior_scales(0.8, 3.0, np_dtype)
        got, want = _louis(data, params, scales), _autodiff(data, params, scales)
    tol = 1e-9 if dtype == "float64" else 2e-3
    np.testing.assert_allclose(got, want, atol=tol * np.abs(want).max())


def test_hessian_equals_finite_differences_of_the_gradient():
    """Each column of Louis' Hessian is the central difference of the potential's gradient (float64,
    step 1e-5: truncation and rounding both near 1e-10 of the entries)."""
    bags, sets = _bags(seed=11)
    c, d = 4, 2
    with jax.enable_x64(True):
        data = make_model_data(bags, sets, c, dtype=np.float64)
        params = _params(d, c, 2, np.float64)
        scales = ld.prior_scales(0.8, 3.0, np.float64)
        got = _louis(data, params, scales)
        arrays, shape = split_model_data(data)
        flat, unravel = ravel_pytree(params)
        grad = jax.jit(jax.grad(lambda x: ld.potential(unravel(x), arrays, scales, shape, True)))
        step = 1e-5
        columns = [np.asarray(grad(flat + step * e) - grad(flat - step * e)) for e in np.eye(flat.size)]
        want = np.stack(columns, axis=1) / (2 * step)
    np.testing.assert_allclose(got, want, atol=1e-7 * np.abs(want).max())


def test_hessian_by_louis_identity_in_numpy():
    """Against the formula written out with enumerated pair posteriors, and without intercepts."""
    bags, sets = _bags(seed=7, n_bags=6)
    c, d = 4, 2
    with jax.enable_x64(True):
        data = make_model_data(bags, sets, c, dtype=np.float64)
        params = {k: v for k, v in _params(d, c, 1, np.float64).items() if k == "W_raw"}
        got = _louis(data, params, ld.prior_scales(1.5, None, np.float64), fit_intercept=False)
    basis = sum_to_zero_basis(c)
    w = np.asarray(params["W_raw"]) @ basis.T
    lik = np.zeros((d, c, d, c))
    for x, s in zip(bags, sets):
        z = x @ w
        p = softmax(z, axis=1)
        pairs = brute_force_pairs(z, s)
        post = np.einsum("iaia->ia", pairs)
        cov = pairs - np.einsum("ia,mb->iamb", post, post)
        lik += np.einsum("ix,iamb,my->xayb", x, cov, x)
        soft = np.einsum("ia,ab->iab", p, np.eye(c)) - np.einsum("ia,ib->iab", p, p)
        lik -= np.einsum("ix,iab,iy->xayb", x, soft, x)
    want = -np.einsum("xayb,ak,bl->xkyl", lik, basis, basis).reshape(d * (c - 1), d * (c - 1))
    want += np.eye(d * (c - 1)) / 1.5**2
    np.testing.assert_allclose(got, want, atol=1e-10)


def test_chunks_and_padding_change_nothing(monkeypatch):
    """Bags taken in several chunks, and canonical padding (empty bags, padded instances), give the same."""
    bags, sets = _bags(seed=11, n_bags=20)
    c, d = 4, 2
    with jax.enable_x64(True):
        params = _params(d, c, 2, np.float64)
        scales = ld.prior_scales(1.0, 10.0, np.float64)
        tight = _louis(make_model_data(bags, sets, c, dtype=np.float64), params, scales)
        canonical = _louis(
            make_model_data(bags, sets, c, dtype=np.float64, canonical_shapes=True), params, scales
        )
        monkeypatch.setattr(ld, "HESSIAN_CHUNK_ENTRIES", 40)
        data = make_model_data(bags, sets, c, dtype=np.float64)
        arrays, shape = split_model_data(data)
        padded, n_chunks = ld.hessian_chunks(arrays, shape, True)
        assert n_chunks > 3
        chunked = np.asarray(ld.potential_hessian(params, padded, scales, shape, True, True, n_chunks)[0])
    np.testing.assert_allclose(canonical, tight, atol=1e-10)
    np.testing.assert_allclose(chunked, tight, atol=1e-10)


def test_the_hessian_refuses_sites_it_would_leave_out():
    bags, sets = _bags(seed=1, n_bags=4)
    for kw in ({"leak": "learn"}, {"weight_prior": "l21"}):
        data = make_model_data(bags, sets, 4, **kw)
        arrays, shape = split_model_data(data)
        params = {"W_raw": np.zeros((2, 3), np.float32), "beta_raw": np.zeros(3, np.float32)}
        with pytest.raises(ValueError, match="leave out"):
            ld.potential_hessian(params, arrays, ld.prior_scales(1.0, 10.0), shape, True, True, 1)
