"""BagLabelSet as a NumPyro distribution: log_prob, sample, Predictive."""

from __future__ import annotations

import itertools

import jax
import jax.numpy as jnp
import numpy as np
import numpyro
import pytest
from numpyro.infer import Predictive
from numpyro.infer.util import log_density
from scipy.stats import chisquare

import orlr_ppl
from orlr_ppl.model.distribution import BagLabelSet, _inverse_cdf_categorical, categorical_from_uniform


def _all_label_sets(n_classes: int) -> np.ndarray:
    rows = [np.array(bits) for bits in itertools.product([0, 1], repeat=n_classes)]
    return np.array([r for r in rows if r.any()], dtype=np.int32)


def test_log_prob_matches_public_api_and_normalises():
    rng = np.random.default_rng(0)
    logits = rng.normal(scale=1.5, size=(3, 4))
    values = _all_label_sets(4)
    dist = BagLabelSet(jnp.asarray(logits), max_labels=4)
    lp = np.asarray(dist.log_prob(jnp.asarray(values)))
    assert lp.shape == (15,)
    possible = values.sum(axis=1) <= 3
    expected = orlr_ppl.bag_log_likelihood(
        [logits] * int(possible.sum()), [np.flatnonzero(v) for v in values[possible]]
    )
    np.testing.assert_allclose(lp[possible], expected, rtol=1e-5)
    assert np.all(np.isneginf(lp[~possible]))  # 4 labels from 3 instances: impossible
    assert np.exp(lp).sum() == pytest.approx(1.0, abs=1e-5)


def test_padding_mask_and_batch_shape():
    rng = np.random.default_rng(1)
    logits = rng.normal(size=(2, 5, 3))
    mask = np.array([[1, 1, 1, 0, 0], [1, 1, 1, 1, 1]], bool)
    dist = BagLabelSet(jnp.asarray(logits), jnp.asarray(mask))
    assert dist.batch_shape == (2,) and dist.event_shape == (3,)
    value = jnp.array([[1, 0, 1], [1, 1, 1]])
    lp = np.asarray(dist.log_prob(value))
    ref = orlr_ppl.bag_log_likelihood([logits[0, :3], logits[1]], [[0, 2], [0, 1, 2]])
    np.testing.assert_allclose(lp, ref, rtol=1e-5)
    draws = dist.sample(jax.random.PRNGKey(0), (7,))
    assert draws.shape == (7, 2, 3)
    assert set(np.unique(np.asarray(draws)).tolist()) <= {0, 1}


def test_too_many_labels_is_nan_or_error():
    logits = jnp.zeros((4, 5))
    dist = BagLabelSet(logits, max_labels=2, validate_args=False)
    assert np.isnan(dist.log_prob(jnp.array([1, 1, 1, 0, 0])))
    assert np.isnan(jax.jit(dist.log_prob)(jnp.array([1, 1, 1, 0, 0])))
    strict = BagLabelSet(logits, max_labels=2, validate_args=True)
    with pytest.raises(ValueError, match="max_labels=2"):
        strict.log_prob(jnp.array([1, 1, 1, 0, 0]))
    with pytest.raises(ValueError, match="set max_labels"):
        BagLabelSet(jnp.zeros((2, 20)))
    with pytest.raises(ValueError, match="NaN or infinite"):
        BagLabelSet(jnp.array([[[0.0, jnp.nan]]]), validate_args=True)


def test_too_many_labels_under_jit_raises_instead_of_a_nan_in_a_sum():
    """With validation on, a label set above ``max_labels`` is refused when the compiled program runs;
    a scorable one in the same program passes and scores as without the check."""
    logits = jax.random.normal(jax.random.PRNGKey(0), (3, 4, 5))
    total = jax.jit(lambda v: BagLabelSet(logits, max_labels=2).log_prob(v).sum())
    fine = jnp.array([[1, 1, 0, 0, 0], [0, 0, 1, 0, 0], [0, 1, 0, 0, 1]])
    unchecked = BagLabelSet(logits, max_labels=2, validate_args=False).log_prob(fine).sum()
    np.testing.assert_allclose(total(fine), unchecked, rtol=1e-6)
    # JAX wraps the host check's ValueError in its runtime error, message kept.
    with pytest.raises((ValueError, RuntimeError), match=r"batch index \[\(1,\)\].*max_labels=2"):
        total(fine.at[1].set(jnp.array([1, 1, 1, 0, 0]))).block_until_ready()
    batched = jax.jit(jax.vmap(lambda v: BagLabelSet(logits, max_labels=2).log_prob(v)))
    with pytest.raises((ValueError, RuntimeError), match="max_labels=2"):
        batched(jnp.stack([fine, fine.at[2].set(1)])).block_until_ready()


def test_predictive_frequencies_match_exact_likelihood():
    """2 instances, 3 classes: simulated label sets follow exp(log-likelihood)."""
    logits = jnp.array([[1.0, 0.2, -0.5], [-0.3, 0.8, 0.1]])

    def model(obs=None):
        numpyro.sample("Y", BagLabelSet(logits), obs=obs)

    n_draws = 20000
    draws = Predictive(model, num_samples=n_draws)(jax.random.PRNGKey(42))["Y"]
    values = _all_label_sets(3)
    counts = np.array([np.sum(np.all(np.asarray(draws) == v, axis=1)) for v in values])
    assert counts.sum() == n_draws  # every draw is one of the 7 non-empty sets
    probs = np.exp(np.asarray(BagLabelSet(logits).log_prob(jnp.asarray(values))))
    assert probs.sum() == pytest.approx(1.0, abs=1e-5)
    assert probs[values.sum(axis=1) == 3].max() == 0.0  # 3 labels need 3 instances
    seen = probs > 0
    expected = probs[seen].astype(np.float64)
    stat = chisquare(counts[seen], expected / expected.sum() * n_draws)
    assert stat.pvalue > 1e-3, stat
    # The test has power: a wrong distribution (independent classes) is rejected.
    wrong = np.full(seen.sum(), n_draws / seen.sum())
    assert chisquare(counts[seen], wrong).pvalue < 1e-6


def test_obs_gradient_flows_through_logits():
    def model(z, obs):
        numpyro.sample("Y", BagLabelSet(z), obs=obs)

    z = jnp.array([[0.5, -0.2, 0.1], [0.0, 0.3, -0.4]])
    obs = jnp.array([1, 1, 0])

    def log_joint(z):
        return log_density(model, (z, obs), {}, {})[0]

    grad = jax.grad(log_joint)(z)
    post = orlr_ppl.instance_posteriors([np.asarray(z)], [[0, 1]])[0]
    np.testing.assert_allclose(grad, post - jax.nn.softmax(z, axis=1), atol=1e-6)


def test_instance_labels_are_drawn_from_their_probabilities():
    probs = np.array([[0.0, 0.5, 0.0, 0.5], [0.1, 0.2, 0.3, 0.4], [0.0, 0.0, 1.0, 0.0]], np.float32)
    edges = np.array([0.0, np.nextafter(np.float32(1), np.float32(0))], np.float32)
    drawn = np.asarray(categorical_from_uniform(jnp.asarray(edges[:, None]), jnp.asarray(probs)))
    # u = 0 takes the first class of positive probability, and u just below one the last, never
    # a class of probability zero (the first row's class 0 and its trailing class 2 of zero width).
    np.testing.assert_array_equal(drawn, [[1, 0, 2], [3, 3, 2]])
    with np.errstate(divide="ignore"):
        logits = jnp.asarray(np.where(probs > 0, np.log(probs), -1e4))  # exp(-1e4) is zero in float
    draws = np.asarray(BagLabelSet(logits[None]).sample(jax.random.PRNGKey(3), (4,)))
    assert draws.shape == (4, 1, 4)
    # Each instance's classes are drawn at their probabilities, and impossible ones never.
    labels = np.asarray(_inverse_cdf_categorical(jax.random.PRNGKey(0), logits, (20000, 3)))
    for i, p in enumerate(probs):
        counts = np.bincount(labels[:, i], minlength=4)
        assert np.all(counts[p == 0] == 0)
        if np.sum(p > 0) == 1:
            assert counts[p > 0] == 20000
        else:
            assert chisquare(counts[p > 0], 20000 * p[p > 0]).pvalue > 1e-3
