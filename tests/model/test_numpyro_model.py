"""The NumPyro model: parameterisation, priors, plates, Predictive, MAP."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from numpyro import handlers
from numpyro.infer import Predictive
from numpyro.infer.util import log_density
from scipy.special import softmax
from scipy.stats import norm

import orlr_ppl
from orlr_ppl.data.datasets import make_miml_digits
from orlr_ppl.inference.point.map import fit_map
from orlr_ppl.model.numpyro_model import make_model_data, orlr_model, sum_to_zero_basis


def _toy(n_bags=30, n_classes=4, d=3, seed=0):
    rng = np.random.default_rng(seed)
    bags = [rng.normal(size=(int(rng.integers(1, 7)), d)) for _ in range(n_bags)]
    sets = [rng.choice(n_classes, int(rng.integers(1, min(len(b), 3) + 1)), replace=False) for b in bags]
    return bags, sets


@pytest.mark.parametrize("c", [2, 3, 5, 10])
def test_sum_to_zero_basis_is_orthonormal_and_orthogonal_to_ones(c):
    h = sum_to_zero_basis(c)
    np.testing.assert_allclose(h.T @ h, np.eye(c - 1), atol=1e-12)
    np.testing.assert_allclose(np.ones(c) @ h, 0.0, atol=1e-12)


def test_log_density_is_likelihood_plus_prior():
    bags, sets = _toy()
    data = make_model_data(bags, sets, n_classes=4)
    rng = np.random.default_rng(1)
    params = {
        "W_raw": jnp.asarray(rng.normal(size=(3, 3)), jnp.float32),
        "beta_raw": jnp.asarray(rng.normal(size=3), jnp.float32),
    }

    @jax.jit  # compiled as fits run it: eagerly, the DP's every operation compiled on its own
    def density(params):
        got, trace = log_density(orlr_model, (data,), {"prior_scale": 0.7, "intercept_scale": 2.0}, params)
        return got, trace["W"]["value"], trace["beta"]["value"]

    got, w, beta = density(params)
    np.testing.assert_allclose(np.sum(w, axis=1), 0.0, atol=1e-5)  # sum-to-zero over classes
    logits = [x @ np.asarray(w, np.float64) + np.asarray(beta, np.float64) for x in bags]
    ll = orlr_ppl.bag_log_likelihood(logits, sets)
    prior = norm.logpdf(np.asarray(params["W_raw"]), scale=0.7).sum()
    prior += norm.logpdf(np.asarray(params["beta_raw"]), scale=2.0).sum()
    assert float(got) == pytest.approx(ll.sum() + prior, rel=1e-5)


def test_subsampled_plates_are_unbiased_and_full_size_is_exact():
    bags, sets = _toy(n_bags=40)
    data = make_model_data(bags, sets, n_classes=4)
    params = {"W_raw": jnp.full((3, 3), 0.3), "beta_raw": jnp.zeros(3)}
    # Each density compiled once (as fits run it), not operation by operation.
    full = jax.jit(lambda p: log_density(orlr_model, (data,), {}, p)[0])(params)
    same = jax.jit(lambda p: log_density(orlr_model, (data,), {"subsample_size": 40}, p)[0])(params)
    assert float(same) == pytest.approx(float(full), rel=1e-6)

    def one(key):
        seeded = handlers.seed(orlr_model, key)
        return log_density(seeded, (data,), {"subsample_size": 12}, params)[0]

    draws = np.asarray(jax.jit(jax.vmap(one))(jax.random.split(jax.random.PRNGKey(0), 3000)))
    assert np.std(draws) > 0  # minibatches really differ
    assert np.mean(draws) == pytest.approx(float(full), abs=4 * np.std(draws) / np.sqrt(3000))


def test_predictive_simulates_label_sets_in_bag_order():
    bags, sets = _toy()
    data = make_model_data(bags, None, n_classes=4)
    out = Predictive(orlr_model, num_samples=5)(jax.random.PRNGKey(0), data, observed=False)
    y = data.merge_sites(out)
    assert y.shape == (5, 30, 4)
    sizes = y.sum(axis=2)
    assert np.all(sizes >= 1) and np.all(sizes <= np.array([len(b) for b in bags]))
    # With a posterior sample of W fixed, Predictive conditions on it.
    fixed = {"W_raw": jnp.zeros((1, 3, 3)), "beta_raw": jnp.array([[20.0, 0.0, 0.0]])}
    out = Predictive(orlr_model, posterior_samples=fixed)(jax.random.PRNGKey(1), data, observed=False)
    top = int(np.argmax(sum_to_zero_basis(4) @ np.array([20.0, 0.0, 0.0])))
    assert np.all(data.merge_sites(out)[0] == np.eye(4, dtype=int)[top])


def test_map_on_miml_digits_annotates_instances():
    train = make_miml_digits(120, seed=0, split="train", max_size=4)
    test = make_miml_digits(40, seed=1, split="test", max_size=4)
    with jax.enable_x64(True):  # a first-order optimum takes float64 (float32 L-BFGS stalls short)
        fit = fit_map(make_model_data(train.bags, train.label_sets, 10, dtype=np.float64), prior_scale=1.0)
    assert fit.converged and fit.optimality <= 1e-3
    np.testing.assert_allclose(fit.W.sum(axis=1), 0.0, atol=1e-5)

    def acc(p, y):
        return np.mean(np.concatenate([a.argmax(1) == b for a, b in zip(p, y)]))

    def logits(bags):
        return [x @ fit.W + fit.beta for x in bags]

    inductive = acc([softmax(z, axis=1) for z in logits(test.bags)], test.instance_labels)
    transductive = acc(
        orlr_ppl.instance_posteriors(logits(train.bags), train.label_sets), train.instance_labels
    )
    # Chance is 0.1; bag labels alone must be enough to learn the digits.
    assert inductive > 0.85 and transductive > 0.95


@pytest.mark.parametrize(
    "variant",
    [
        {},
        {"novel_class": True},
        {"leak": 0.05},
        {"known": True},
        {"leak": "learn"},
        {"weight_prior": "group_horseshoe"},
        {"underflow": True},
    ],
    ids=["plain", "novel", "fixed-leak", "known-labels", "learnt-leak", "horseshoe", "underflow"],
)
def test_host_potential_and_gradient_are_the_model_s(variant):
    """MAP's and the NUTS start's potential and gradient (E-step's DP, Fisher's identity) equal the
    model's density and its autodiff gradient."""
    from orlr_ppl.model.log_density import (
        _fisher_jit,
        potential_and_grad,
        potential_and_grad_on_host,
        prior_scales,
    )
    from orlr_ppl.model.numpyro_model import split_model_data, start_params

    bags, sets = _toy(n_bags=12)
    kwargs = {k: v for k, v in variant.items() if k in ("novel_class", "leak", "weight_prior")}
    if variant.get("known"):
        kwargs["instance_labels"] = [np.where(np.arange(len(b)) == 0, s[0], -1) for b, s in zip(bags, sets)]
    if variant.get("underflow"):  # identical instances with logits ~1e3 apart cannot reach 3 labels but
        bags[2] = np.full_like(bags[2], 1000.0)  # at a chance ~e^-1e3: the fast DP underflows
    with jax.enable_x64(True):
        data = make_model_data(bags, sets, n_classes=4, dtype=np.float64, **kwargs)
        arrays, shape = split_model_data(data)
        rng = np.random.default_rng(2)
        params = {k: jnp.asarray(rng.normal(size=np.shape(v))) for k, v in start_params(data).items()}
        scales = prior_scales(0.8, 3.0, np.float64)
        want = potential_and_grad(params, arrays, scales, shape, True)
        got = potential_and_grad_on_host(params, arrays, scales, shape, True)
        if variant.get("underflow"):  # the case the fallback is for really arises
            assert not bool(_fisher_jit(params, arrays, scales, shape, True)[2])
    assert np.isfinite(float(want[0]))
    assert float(got[0]) == pytest.approx(float(want[0]), rel=1e-10)
    for name in want[1]:
        np.testing.assert_allclose(got[1][name], want[1][name], rtol=1e-8, atol=1e-10, err_msg=name)


def test_draw_posteriors_on_host_redo_only_the_draws_near_underflow():
    from orlr_ppl.dp.packing import pack_bags
    from orlr_ppl.dp.ragged import _linear_posteriors_unchecked, draw_posteriors_on_host, linear_posteriors

    bags, sets = _toy(n_bags=10)
    flat = jnp.asarray(np.concatenate(bags), jnp.float32)
    packed = pack_bags([len(b) for b in bags], [np.asarray(s) for s in sets])
    rng = np.random.default_rng(4)
    weights = [jnp.asarray(rng.normal(size=(3, 4)), jnp.float32) for _ in range(5)]
    weights[3] = weights[3] * 3e3  # logits ~1e4: some bag's label set underflows in probability space
    intercepts = [jnp.zeros(4, jnp.float32)] * 5
    fast = [_linear_posteriors_unchecked(flat, w, b, packed) for w, b in zip(weights, intercepts)]
    resolved = [bool(ok) for _, ok in fast]
    assert resolved == [True, True, True, False, True]  # the fallback is needed for draw 3 alone
    got = list(draw_posteriors_on_host(flat, weights, intercepts, packed, block=2))
    assert len(got) == 5
    for post, w, b in zip(got, weights, intercepts):
        want = linear_posteriors(flat, w, b, packed)
        assert np.all(np.isfinite(np.asarray(post)))
        np.testing.assert_allclose(post, want, atol=1e-5)


@pytest.mark.parametrize("family", ["normal", "l21"])
@pytest.mark.parametrize("k", [1, 2, 5])
def test_a_zero_row_adds_the_priors_own_log_density_at_zero(family, k):
    """``row_log_prior_at_zero`` (what a padding row adds to a log posterior) is the model's prior
    distribution of one row evaluated at zero; flat: nothing."""
    from orlr_ppl.model.priors import row_log_prior_at_zero, weight_prior

    with jax.enable_x64(True):
        prior = weight_prior(family, (1, k), 0.7)
        at_zero = float(jnp.sum(prior.log_prob(jnp.zeros((1, k)))))
    assert row_log_prior_at_zero(family, k, 0.7) == pytest.approx(at_zero, rel=1e-10)
    assert row_log_prior_at_zero(family, k, None) == 0.0
