"""Generalised EM: monotone, and at the same optimum as MAP."""

from __future__ import annotations

from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from orlr_ppl.data.datasets import make_miml_digits
from orlr_ppl.inference.methods import EM, MAP
from orlr_ppl.inference.point import em_driver
from orlr_ppl.inference.point.em import fit_em
from orlr_ppl.inference.point.em_driver import EMSpec, EMState, EStepOut
from orlr_ppl.inference.point.map import fit_map
from orlr_ppl.model.numpyro_model import make_model_data, sum_to_zero_basis


@pytest.fixture(scope="module")
def digits():
    # Bags of at most 4 digits: label sets up to 8 make DP programs that compile 2.6x longer, and
    # large label sets are checked against brute force in test_subset_dp.
    return make_miml_digits(60, seed=3, max_size=4)


def test_em_log_posterior_never_decreases(digits):
    with jax.enable_x64(True):
        data = make_model_data(digits.bags, digits.label_sets, 10, dtype=np.float64)
        for prior in (None, 1.0):
            fit = fit_em(data, prior_scale=prior, max_iter=25, tol=0.0)
            steps = np.diff(fit.history)
            assert fit.n_iter == 25 and len(fit.history) == 26
            assert np.all(steps >= -1e-9 * np.abs(fit.history[1:])), steps.min()
            assert fit.history[-1] > fit.history[0] + 10  # it really climbs


def test_em_and_map_reach_the_same_optimum(digits):
    with jax.enable_x64(True):
        em = fit_em(
            make_model_data(digits.bags, digits.label_sets, 10, dtype=np.float64),
            prior_scale=1.0,
            intercept_scale=10.0,
            max_iter=400,
            tol=1e-10,
        )
        mp = fit_map(
            make_model_data(digits.bags, digits.label_sets, 10, dtype=np.float64),
            prior_scale=1.0,
            intercept_scale=10.0,
        )
    assert em.log_posterior == pytest.approx(mp.log_posterior, rel=1e-3)
    np.testing.assert_allclose(em.W.sum(axis=1), 0.0, atol=1e-8)


def test_e_step_and_q_are_the_model_s(digits):
    """The E-step's log joint is the model's density, its posteriors the DP's, and Q the written-out sum."""
    from numpyro.infer.util import log_density
    from scipy.special import log_softmax

    from orlr_ppl import instance_posteriors
    from orlr_ppl.model import log_density as ld
    from orlr_ppl.model.log_density import e_step as eager_e_step
    from orlr_ppl.model.log_density import flat_rows, prior_scales
    from orlr_ppl.model.numpyro_model import orlr_model, split_model_data

    # Compiled as every fit compiles it: run eagerly, op by op, the DP took most of this test's time.
    e_step = jax.jit(eager_e_step, static_argnums=(3,))
    expected_log_joint = jax.jit(ld.expected_log_joint, static_argnums=(4,))
    expected_log_joint_flat = jax.jit(ld.expected_log_joint_flat, static_argnums=(5,))
    flat_responsibilities = jax.jit(ld.flat_responsibilities)
    rng = np.random.default_rng(0)
    params = {"W_raw": rng.normal(size=(64, 9)) * 0.1, "beta_raw": rng.normal(size=9)}
    with jax.enable_x64(True):
        model = make_model_data(digits.bags, digits.label_sets, 10, dtype=np.float64)
        arrays, shape = split_model_data(model)
        scales = prior_scales(0.5, 3.0, np.float64)
        e = e_step(params, arrays, scales, shape)

        @jax.jit  # the model's density and its prior sites' log-probabilities, compiled likewise
        def model_density(params):
            joint, trace = log_density(
                orlr_model, (model,), {"prior_scale": 0.5, "intercept_scale": 3.0}, params
            )
            priors = {k: jnp.sum(trace[k]["fn"].log_prob(trace[k]["value"])) for k in ("W_raw", "beta_raw")}
            return joint, priors

        theirs, prior = model_density(params)
        assert float(e.log_joint) == pytest.approx(float(theirs), rel=1e-10)

        basis = sum_to_zero_basis(10)
        w, b = params["W_raw"] @ basis.T, params["beta_raw"] @ basis.T
        logits = [x @ w + b for x in digits.bags]
        want = instance_posteriors(logits, digits.label_sets)
        q_lik = 0.0
        for bucket, post in zip(model.buckets, e.posteriors):
            post = np.asarray(post)
            for row, bag in enumerate(bucket.bag_ids):
                n = len(digits.bags[bag])
                np.testing.assert_allclose(post[row, :n], want[bag], atol=1e-10)
                assert np.all(post[row, n:] == 0.0)  # padding takes no label
                q_lik += np.sum(post[row, :n] * log_softmax(logits[bag], axis=1))
        log_prior = sum(float(prior[k]) for k in ("W_raw", "beta_raw"))  # the model's own prior sites
        q = float(expected_log_joint(params, e.posteriors, arrays, scales, shape))
        assert q == pytest.approx(q_lik + log_prior, rel=1e-10)
        # The M-step's Q on the real instances alone, padded buckets or not, is the same sum.
        for canonical in (False, True):
            data = make_model_data(
                digits.bags, digits.label_sets, 10, dtype=np.float64, canonical_shapes=canonical
            )
            arrays, shape = split_model_data(data)
            rows = flat_rows(arrays)
            assert rows.features.shape[0] >= sum(len(b) for b in digits.bags)
            post = e_step(params, arrays, scales, shape).posteriors
            resp = flat_responsibilities(post, rows)
            np.testing.assert_allclose(np.asarray(resp).sum(), sum(len(b) for b in digits.bags), rtol=1e-12)
            flat = float(expected_log_joint_flat(params, resp, rows, arrays, scales, shape))
            assert flat == pytest.approx(q_lik + log_prior, rel=1e-10)


def test_m_step_is_kept_only_when_q_rises(digits):
    """A fit from the optimum stays there: no M-step may lower Q, so none is taken."""
    with jax.enable_x64(True):
        data = make_model_data(digits.bags, digits.label_sets, 10, dtype=np.float64)
        first = fit_em(data, prior_scale=1.0, intercept_scale=10.0, max_iter=200, tol=1e-12)
        basis = sum_to_zero_basis(10)  # orthonormal columns: W @ basis recovers W_raw
        init = {"W_raw": first.W @ basis, "beta_raw": first.beta @ basis}
        again = fit_em(data, prior_scale=1.0, intercept_scale=10.0, max_iter=5, tol=0.0, init=init)
    assert np.all(np.diff(again.history) >= -1e-9 * np.abs(again.history[1:]))
    assert again.history[0] == pytest.approx(first.log_posterior, rel=1e-9)


def test_second_fit_of_the_same_shapes_compiles_nothing(digits):
    from orlr_ppl.inference.point import em

    data = make_model_data(digits.bags, digits.label_sets, 10)
    fit_em(data, prior_scale=1.0, max_iter=3)
    before = em._em._cache_size()
    other = make_miml_digits(60, seed=3, max_size=4)  # same shapes, new values via a rescale
    rescaled = make_model_data([2.0 * x for x in other.bags], other.label_sets, 10)
    fit_em(rescaled, prior_scale=0.5, max_iter=3, tol=1e-3, m_steps=4)
    assert em._em._cache_size() == before
    longer = fit_em(rescaled, prior_scale=0.5, max_iter=40, tol=0.0)  # max_iter is a value, not a shape
    assert em._em._cache_size() == before
    assert longer.n_iter == 40 and len(longer.history) == 41 and np.all(np.isfinite(longer.history))


def test_em_falls_back_to_exact_arithmetic_near_underflow():
    """Starting where a bag's likelihood underflows in probability space, EM continues exactly.

    The loop without the DP's log-space pass stops at the first E-step it cannot resolve, and
    ``fit_em`` goes on from there with the exact program: the result is the exact EM's.
    """
    from orlr_ppl.inference.point import em
    from orlr_ppl.model.log_density import prior_scales
    from orlr_ppl.model.numpyro_model import split_model_data

    rng = np.random.default_rng(0)
    bags = [np.hstack([np.ones((3, 1)), rng.normal(size=(3, 1))]) for _ in range(12)]
    sets = [[0, 1] if b % 2 else [0] for b in range(12)]
    data = make_model_data(bags, sets, 3)
    # Class 1 is e^-120 less likely than class 0 for every instance: p(Y = {0, 1}) ~ 1e-52, under
    # float32's range, so the probability-space DP cannot resolve those bags.
    w = np.array([[60.0, -60.0, 0.0], [0.0, 0.0, 0.0]])  # (d, C): the first feature is always 1
    init = {"W_raw": (w @ sum_to_zero_basis(3)).astype(np.float32)}
    fit = fit_em(data, prior_scale=1.0, max_iter=8, tol=0.0, init=init)
    assert np.all(np.isfinite(fit.history)) and fit.n_iter == 8
    assert fit.history[0] < -100  # it really started in the underflow range
    assert np.all(np.diff(fit.history) >= -1e-4 * np.abs(fit.history[1:]))

    arrays, shape = split_model_data(data)
    params = {"W_raw": jnp.asarray(init["W_raw"]), "beta_raw": jnp.zeros(2, jnp.float32)}
    args = (arrays, prior_scales(1.0, None), jnp.asarray(0.0), jnp.asarray(10), shape, True)
    fast = em._em(em._start(params, 8, jax.random.PRNGKey(0)), *args, fallback=False)
    assert bool(fast.unresolved) and int(fast.n_iter) == 0  # the fast loop stopped at once
    exact = em._em(em._start(params, 8, jax.random.PRNGKey(0)), *args, fallback=True)
    # float32, and the fit's M-step sums Q over real instances only (flat rows): round-off apart.
    np.testing.assert_allclose(fit.history, np.asarray(exact.history)[:9], rtol=1e-5)
    assert np.all(np.isnan(np.asarray(exact.history)[9:]))  # nothing written past max_iter


def _simulated(n_bags: int = 300, seed: int = 0):
    """Bags of 1-7 instances whose labels come from a softmax with large weights (|Y_b| up to 4)."""
    rng = np.random.default_rng(seed)
    w = rng.normal(size=(5, 4)) * 2
    bags, sets = [], []
    for _ in range(n_bags):
        x = rng.normal(size=(int(rng.integers(1, 8)), 5))
        p = np.exp(x @ w)
        p /= p.sum(axis=1, keepdims=True)
        bags.append(x)
        sets.append(sorted({int(rng.choice(4, p=row)) for row in p}))
    return bags, sets


@pytest.fixture(scope="module")
def simulated():
    return make_model_data(*_simulated(), 4, canonical_shapes=True)


@pytest.fixture(scope="module")
def simulated_64():
    return make_model_data(*_simulated(), 4, canonical_shapes=True, dtype=np.float64)


def test_float32_em_with_defaults_gets_near_the_map_and_claims_no_more(simulated):
    """A line search that fails near an M-step's maximum must not stall every later M-step.

    Before that fix, float32 EM kept the collapsed step (~1e-20) and stopped, "converged", at
    -431.9 against the MAP's -355.0 on these bags. In float32 the last rises are below the
    log posterior's round-off: EM stalls close to the optimum, and says it has not reached
    the first-order tolerance rather than claim an optimum (the estimators fit in float64).
    """
    em = fit_em(simulated, prior_scale=1.0, intercept_scale=10.0)
    mp = fit_map(simulated, prior_scale=1.0, intercept_scale=10.0)
    assert em.log_posterior == pytest.approx(mp.log_posterior, rel=1e-4)
    assert em.n_iter < EM.max_iter and not em.converged and em.optimality > EM.tol  # a stall, said


def test_float64_em_and_map_reach_a_first_order_optimum_and_agree(simulated_64):
    """Converged means a vanishing gradient, and EM and MAP from the same start reach the same optimum."""
    with jax.enable_x64(True):
        em = fit_em(simulated_64, prior_scale=1.0, intercept_scale=10.0)
        mp = fit_map(simulated_64, prior_scale=1.0, intercept_scale=10.0)
        loose = fit_em(simulated_64, prior_scale=1.0, intercept_scale=10.0, tol=0.5)
    assert em.converged and mp.converged and em.optimality <= EM.tol and mp.optimality <= MAP.tol
    assert em.log_posterior == pytest.approx(mp.log_posterior, rel=1e-5)
    # The residual is the gradient's: a looser tolerance stops earlier, at a larger gradient.
    assert loose.n_iter < em.n_iter and EM.tol < loose.optimality <= 0.5 and loose.converged


def test_stochastic_em_draws_weight_to_unbiased_sums(simulated):
    from orlr_ppl.inference.point import stochastic_em
    from orlr_ppl.model.numpyro_model import split_model_data

    arrays, _ = split_model_data(simulated)
    sizes = stochastic_em.sample_sizes(arrays, 0.3)
    assert sizes == tuple(int(np.ceil(0.3 * m.shape[0])) for _, m, *_ in arrays)
    assert stochastic_em.sample_sizes(arrays, 1.0) is None
    for seed in range(3):
        drawn, weights = stochastic_em.draw_bags(jax.random.PRNGKey(seed), arrays, sizes)
        for (x, m, *_), (dx, dm, *_), size, w in zip(arrays, drawn, sizes, np.asarray(weights)):
            n_real = int(np.any(m, axis=1).sum())
            real_drawn = np.any(np.asarray(dm), axis=1)
            assert real_drawn.sum() == min(size, n_real)  # real bags first, never twice
            assert w * real_drawn.sum() == pytest.approx(n_real)
            # Each drawn bag is one of the bucket's, once: match rows by their features.
            rows = {np.asarray(x)[i].tobytes() for i in range(m.shape[0]) if np.any(m[i])}
            picked = [np.asarray(dx)[i].tobytes() for i in np.flatnonzero(real_drawn)]
            assert set(picked) <= rows and len(set(picked)) == len(picked)
    # Averaged over many draws, the weighted log-likelihood is the full one.
    from orlr_ppl.model.log_density import e_step, prior_scales

    params = {"W_raw": np.full((5, 3), 0.3, np.float32), "beta_raw": np.zeros(3, np.float32)}
    scales = prior_scales(1.0, 10.0)
    shape = split_model_data(simulated)[1]
    full = float(jax.jit(e_step, static_argnums=3)(params, arrays, scales, shape).log_joint)

    @jax.jit
    def estimate(key):
        drawn, weights = stochastic_em.draw_bags(key, arrays, sizes)
        return stochastic_em.weighted(e_step(params, drawn, scales, shape), weights)[0]

    estimates = np.asarray(jax.vmap(estimate)(jax.random.split(jax.random.PRNGKey(0), 400)))
    assert np.std(estimates) > 0  # the draws really differ
    assert np.mean(estimates) == pytest.approx(full, abs=3 * np.std(estimates) / np.sqrt(400))


def test_stochastic_em_fits_near_full_em(simulated):
    from orlr_ppl.model.log_density import potential, prior_scales
    from orlr_ppl.model.numpyro_model import split_model_data

    full = fit_em(simulated, prior_scale=1.0, intercept_scale=10.0)
    half = fit_em(simulated, prior_scale=1.0, intercept_scale=10.0, bag_fraction=0.5, seed=1, max_iter=50)
    assert half.n_iter == 50 and not half.converged  # a fixed budget: no stopping test
    assert len(half.history) == 51
    # Its log posterior is exact at the weights it returns, not the last estimate.
    basis = sum_to_zero_basis(4)
    params = {"W_raw": half.W @ basis, "beta_raw": half.beta @ basis}
    params = {k: v.astype(np.float32) for k, v in params.items()}
    arrays, shape = split_model_data(simulated)
    exact = -float(jax.jit(potential, static_argnums=3)(params, arrays, prior_scales(1.0, 10.0), shape))
    assert half.log_posterior == pytest.approx(exact, rel=1e-5)
    assert half.log_posterior != pytest.approx(half.history[-1], rel=1e-6)
    # Within 1% of full EM's optimum, well above where the fit starts.
    assert half.log_posterior == pytest.approx(full.log_posterior, rel=1e-2)
    assert half.log_posterior > full.history[0] + 0.9 * (full.log_posterior - full.history[0])
    again = fit_em(simulated, prior_scale=1.0, intercept_scale=10.0, bag_fraction=0.5, seed=1, max_iter=50)
    other = fit_em(simulated, prior_scale=1.0, intercept_scale=10.0, bag_fraction=0.5, seed=2, max_iter=50)
    np.testing.assert_array_equal(again.W, half.W)  # seeded
    assert not np.allclose(other.W, half.W)
    np.testing.assert_array_equal(
        fit_em(simulated, prior_scale=1.0, intercept_scale=10.0, bag_fraction=1.0).W, full.W
    )
    with pytest.raises(ValueError, match="bag_fraction"):
        fit_em(simulated, bag_fraction=0.0)


# -- the EM driver both EM fits run through (``em_driver``), on a toy model ----------------------


class _Toy(NamedTuple):
    target: jax.Array  # () the objective -(p - target)**2 peaks here
    limit: jax.Array  # () without the fallback, E-steps at p >= limit are unresolved


def _toy_e_step(config: None, data: _Toy, params: jax.Array, key: tuple, fallback: bool) -> EStepOut:
    resolved = jnp.asarray(True) if fallback else params < data.limit
    return EStepOut(-((params - data.target) ** 2), resolved, params, key)


def _halfway(config: None, data: _Toy, params: jax.Array, carry: jax.Array, stats: jax.Array):
    """An M-step halfway to the target from the E-step's point; the carry counts M-steps."""
    return stats + 0.5 * (data.target - stats), carry + 1


def _step_up(config: None, data: _Toy, params: jax.Array, carry: jax.Array, stats: jax.Array):
    """An M-step proposing the last kept point plus 1."""
    return stats + 1.0, carry + 1


def _below_limit(config: None, data: _Toy, params: jax.Array) -> jax.Array:
    return jnp.log(data.limit - params)  # NaN from p > limit on


@em_driver.program("spec", "fallback")
def _toy_em(start: EMState, data: _Toy, tol: jax.Array, spec: EMSpec, fallback: bool) -> EMState:
    return em_driver.run(spec, start, data, tol, fallback)


def _toy_start(params: float, stats: object, max_iter: int) -> EMState:
    no = np.asarray(False)
    history = np.full(16, np.nan, np.float32)
    return EMState(
        np.float32(params),
        np.int32(0),
        stats,
        history,
        np.int32(0),
        no,
        no,
        no,
        (),
        np.int32(max_iter),
        np.float32(np.nan),
    )


E_FIRST = EMSpec(_toy_e_step, _halfway)


def _toy_fit(limit: float, tol: float, max_iter: int = 5, spec: EMSpec = E_FIRST, fallback: bool = False):
    start = _toy_start(0.0, () if not spec.m_step_first else np.float32(0.0), max_iter)
    data = _Toy(np.float32(1.0), np.float32(limit))
    return _toy_em(start, data, np.float32(tol), spec, fallback=fallback)


def test_the_driver_runs_e_step_then_m_step_and_none_after_the_last():
    s = _toy_fit(limit=10.0, tol=0.0)  # p = 0, 1/2, 3/4, ...: max_iter M-steps, then a last E-step
    p = 1.0 - 0.5 ** np.arange(6)
    np.testing.assert_allclose(np.asarray(s.history)[:6], -((p - 1.0) ** 2))
    assert np.all(np.isnan(np.asarray(s.history)[6:]))
    assert int(s.n_iter) == 5 and int(s.carry) == 5 and float(s.params) == p[-1]
    assert bool(s.done) and not bool(s.converged) and not bool(s.unresolved)
    # History -1, -1/4, -1/16: the change 3/16 is within 0.3 * max(1/4, 1), so pass 2 converges.
    s = _toy_fit(limit=10.0, tol=0.3)
    assert bool(s.converged) and int(s.n_iter) == 2 and int(s.carry) == 2 and float(s.params) == 0.75


def test_the_driver_stops_at_an_unresolved_e_step_and_fit_goes_on_with_the_fallback():
    s = _toy_fit(limit=0.8, tol=0.0)  # p = 7/8 is unresolved without the fallback
    assert bool(s.unresolved) and bool(s.done) and int(s.n_iter) == 3 and int(s.carry) == 3
    assert float(s.params) == 0.875 and np.isnan(float(s.history[3]))  # no M-step after it
    calls = []
    data = _Toy(np.float32(1.0), np.float32(0.8))

    def em(state: EMState, fallback: bool) -> EMState:
        calls.append(fallback)
        return _toy_em(state, data, np.float32(0.0), E_FIRST, fallback=fallback)

    end = em_driver.fit(em, _toy_start(0.0, (), 5))
    exact = _toy_fit(limit=0.8, tol=0.0, fallback=True)
    assert calls == [False, True] and int(end.n_iter) == 5 and int(end.carry) == 5
    np.testing.assert_array_equal(np.asarray(end.history), np.asarray(exact.history))
    assert not bool(end.unresolved) and float(end.params) == float(exact.params)


def test_the_driver_m_step_first_keeps_the_last_finite_proposal():
    """M-step first (the MIMM's order): a proposal whose log posterior is not finite ends the fit."""
    spec = EMSpec(_toy_e_step, _step_up, _below_limit, m_step_first=True)
    s = _toy_fit(limit=3.5, tol=0.0, max_iter=10, spec=spec, fallback=True)  # proposals 1, 2, 3, 4
    p = np.arange(1.0, 4.0)
    history = np.asarray(s.history)
    np.testing.assert_allclose(history[:3], -((p - 1.0) ** 2) + np.log(3.5 - p), rtol=1e-6)
    assert int(s.n_iter) == 3 and np.isnan(history[3])  # the pass of the proposal 4, not kept
    assert float(s.params) == 3.0 and float(s.stats) == 3.0 and int(s.carry) == 3
    assert bool(s.done) and not bool(s.converged) and not bool(s.unresolved)
    s = _toy_fit(limit=10.0, tol=0.0, max_iter=2, spec=spec, fallback=True)  # max_iter + 1 E-steps
    assert int(s.n_iter) == 2 and float(s.params) == 3.0 and np.all(np.isfinite(np.asarray(s.history)[:3]))
    s = _toy_fit(limit=0.5, tol=0.0, spec=spec, fallback=True)  # the first proposal is not kept
    assert int(s.n_iter) == 0 and np.isnan(float(s.history[0])) and float(s.params) == 0.0


def _toy_e_step_with_residual(config: None, data: _Toy, params: jax.Array, key: tuple, fallback: bool):
    """The toy's E-step, reporting the gradient of -(p - target)**2 as its first-order residual."""
    out = _toy_e_step(config, data, params, key, fallback)
    return out._replace(residual=jnp.abs(2.0 * (params - data.target)))


def _stay(config: None, data: _Toy, params: jax.Array, carry: jax.Array, stats: jax.Array):
    """An M-step that never moves: the stall a float32 line search meets near the optimum."""
    return stats, carry + 1


def test_the_driver_stops_on_the_first_order_residual_not_the_change():
    spec = EMSpec(_toy_e_step_with_residual, _halfway)
    # p = 0, 1/2, 3/4, 7/8: residuals 2, 1, 1/2, 1/4; a tolerance of 0.3 stops at the fourth E-step,
    # although the relative change there (7/64 / (1 / 16)) is large.
    s = _toy_fit(limit=10.0, tol=0.3, max_iter=10, spec=spec)
    assert int(s.n_iter) == 3 and bool(s.converged) and float(s.residual) == pytest.approx(0.25)
    # A pass that changes nothing is a stall: the fit stops there, not converged while the residual is large.
    s = _toy_fit(limit=10.0, tol=1e-3, max_iter=10, spec=EMSpec(_toy_e_step_with_residual, _stay))
    assert int(s.n_iter) == 1 and not bool(s.converged) and float(s.residual) == pytest.approx(2.0)


def test_on_digits_em_and_map_each_reach_an_optimum_their_residual_is_the_gradient_and_agree_in_a_basin(
    digits,
):
    """Digits have several optima, and EM and MAP from zero may stop at different ones: each is a
    first-order optimum whose reported residual is the autodiff gradient's largest component, and EM
    started at MAP's optimum stays there, to 1e-5 of the log posterior and better."""
    from jax.flatten_util import ravel_pytree

    from orlr_ppl.model.log_density import potential_and_grad, prior_scales
    from orlr_ppl.model.numpyro_model import split_model_data

    with jax.enable_x64(True):
        data = make_model_data(digits.bags, digits.label_sets, 10, dtype=np.float64)
        em = fit_em(data, prior_scale=1.0, intercept_scale=10.0, max_iter=2000)  # slow on these bags
        mp = fit_map(data, prior_scale=1.0, intercept_scale=10.0)
        arrays, shape = split_model_data(data)
        basis = sum_to_zero_basis(10)
        for res in (em, mp):
            params = {"W_raw": jnp.asarray(res.W @ basis), "beta_raw": jnp.asarray(res.beta @ basis)}
            _, grad = potential_and_grad(params, arrays, prior_scales(1.0, 10.0, np.float64), shape, True)
            largest = float(np.abs(ravel_pytree(grad)[0]).max())
            assert res.converged and largest == pytest.approx(res.optimality, rel=1e-6, abs=1e-9)
        again = fit_em(data, prior_scale=1.0, intercept_scale=10.0, init=mp.params)
    assert again.converged and again.log_posterior == pytest.approx(mp.log_posterior, rel=1e-5)
