"""The NUTS driver and the log density it shares with MAP: same kernel as NumPyro's MCMC, compiled once."""

from __future__ import annotations

import dataclasses
import os

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from numpyro.infer import MCMC, NUTS, init_to_value
from numpyro.infer.util import log_density, log_likelihood

from orlr_ppl.inference import methods
from orlr_ppl.inference.checks.diagnostics import mixing_converged
from orlr_ppl.inference.point.map import fit_map
from orlr_ppl.inference.posterior import chain_setup, nuts
from orlr_ppl.inference.posterior.nuts import Chains, NUTSSettings, fit_nuts
from orlr_ppl.model.log_density import bucket_log_likelihoods, potential_and_grad, prior_scales
from orlr_ppl.model.numpyro_model import (
    join_model_data,
    make_model_data,
    orlr_model,
    split_model_data,
    sum_to_zero_basis,
)


def _toy(n_bags=24, n_classes=3, d=2, seed=0, dtype=np.float32):
    rng = np.random.default_rng(seed)
    centres = rng.normal(scale=2.0, size=(n_classes, d))
    bags, sets = [], []
    for _ in range(n_bags):
        y = rng.integers(0, n_classes, size=rng.integers(1, 5))
        bags.append(centres[y] + rng.normal(size=(len(y), d)))
        sets.append(np.unique(y))
    return make_model_data(bags, sets, n_classes, dtype=dtype)


def _settings(**kwargs) -> methods.NUTS:
    """The package's ``NUTS`` settings for a test: from zero weights, no bar, no extension unless asked."""
    return methods.NUTS(**{"init": "zeros", "progress_bar": False, "max_num_samples": 0} | kwargs)


def _params(data, seed=1):
    rng = np.random.default_rng(seed)
    return {
        "W_raw": jnp.asarray(rng.normal(size=(data.n_features, data.n_classes - 1)), jnp.float32),
        "beta_raw": jnp.asarray(rng.normal(size=data.n_classes - 1), jnp.float32),
    }


@pytest.mark.parametrize("scales", [(0.7, 3.0), (None, None), (1.0, None)])
def test_potential_and_grad_is_the_models_negative_log_density(scales):
    data = _toy()
    params = _params(data)
    arrays, shape = split_model_data(data)
    kwargs = {"prior_scale": scales[0], "intercept_scale": scales[1]}

    def neg(p):
        return -log_density(orlr_model, (data,), kwargs, p)[0]

    value, grad = potential_and_grad(params, arrays, prior_scales(*scales), shape, True)
    # NumPyro's density and its autodiff gradient, compiled once rather than operation by operation.
    theirs, expected = jax.jit(jax.value_and_grad(neg))(params)
    assert float(value) == pytest.approx(float(theirs), rel=1e-5)
    for name in params:
        np.testing.assert_allclose(grad[name], expected[name], rtol=1e-4, atol=1e-4)
    # join(split(data)) is the same model, bag positions aside.
    again = join_model_data(arrays, shape)
    assert [b.max_labels for b in again.buckets] == [b.max_labels for b in data.buckets]


def test_bucket_log_likelihoods_are_numpyros_per_site_values():
    data = _toy()
    params = _params(data)
    arrays, shape = split_model_data(data)
    ours = bucket_log_likelihoods(params, arrays, prior_scales(1.0, 10.0), shape, True)
    theirs = jax.jit(lambda p: log_likelihood(orlr_model, p, data, batch_ndims=0))(params)  # not op by op
    for k, value in enumerate(ours):
        np.testing.assert_allclose(value, theirs[data.site_name(k)], rtol=1e-5)


def test_driver_draws_are_numpyro_mcmcs():
    """Same start, same key, no warmup: the driver and MCMC take the same NUTS transitions."""
    data = _toy(n_bags=3)  # a posterior close to the prior, where the unadapted step size 1 moves
    start = {k: v * 0.3 for k, v in _params(data).items()}
    key = jax.random.PRNGKey(3)
    mcmc = MCMC(
        NUTS(orlr_model, init_strategy=init_to_value(values=start)),
        num_warmup=0,
        num_samples=8,
        progress_bar=False,
    )
    mcmc.run(key, data, init_params=start, extra_fields=("num_steps",))
    theirs = mcmc.get_samples()

    arrays, shape = split_model_data(data)
    inits = {k: v[None] for k, v in start.items()}
    # HMC.init splits its key and hands the first half to the kernel.
    kernel_key = jax.random.split(key)[0][None]
    out = Chains(
        kernel_key, inits, arrays, prior_scales(1.0, 10.0), shape, NUTSSettings(0), "sequential"
    ).advance(8)
    for name in start:
        np.testing.assert_allclose(out.z[name][0], theirs[name], rtol=1e-4, atol=1e-5)
    np.testing.assert_array_equal(out.num_steps[0], mcmc.get_extra_fields()["num_steps"])
    assert len(np.unique(np.asarray(out.z["W_raw"][0]), axis=0)) >= 3  # the chain does move
    # The log-likelihoods recorded along the way are those of the draws.
    ll = jax.jit(lambda z: log_likelihood(orlr_model, z, data))({k: out.z[k][0] for k in start})
    for k, value in enumerate(out.log_likelihood):
        np.testing.assert_allclose(value[0], ll[data.site_name(k)], rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("whiten", [False, True])
@pytest.mark.parametrize("method", ["parallel", "threads", "vectorized"])
def test_parallel_and_vectorized_chains_agree_with_sequential(method, whiten):
    # In float64: vmap reorders float32 sums, and 30 NUTS iterations amplify that to 1e-2.
    assert jax.local_device_count() >= 2, "importing orlr_ppl exposes one CPU device per core, at least 4"
    settings = _settings(num_warmup=20, num_samples=10, num_chains=2, whiten=whiten)
    with jax.enable_x64(True):
        data = _toy(dtype=np.float64)
        other = fit_nuts(data, settings, seed=5, chain_method=method)
        seq = fit_nuts(data, settings, seed=5, chain_method="sequential")
    assert seq.posterior["W"].dtype == np.float64
    np.testing.assert_allclose(other.posterior["W"].values, seq.posterior["W"].values, rtol=1e-8, atol=1e-10)
    assert other.sample_stats.attrs["chain_method"] == method
    assert seq.sample_stats.attrs["chain_method"] == "sequential"


def test_auto_chains_use_the_cores_in_a_fresh_process_without_device_flags():
    """A user who never heard of ``set_host_device_count``: on a CPU with one JAX device, 4 chains run
    in threads (the cores share them), 1 chain alone; with a device per chain, one each."""
    import subprocess
    import sys

    code = (
        "import jax; from orlr_ppl.inference.posterior.chain_setup import resolve_chain_method as r; "
        "print(jax.local_device_count(), r('auto', 4), r('auto', 1))"
    )
    env = {k: v for k, v in os.environ.items() if k != "XLA_FLAGS"}
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["1", "threads", "sequential"]
    assert jax.local_device_count() == 4  # this process: conftest's four devices
    assert chain_setup.resolve_chain_method("auto", 4) == "parallel"
    assert chain_setup.resolve_chain_method("auto", 5) == "threads"


def test_dense_mass_adapts_a_full_mass_matrix_in_warmup():
    """``dense_mass``: warmup estimates every parameter's covariance, not only the variances."""
    data = _toy(n_bags=8)
    arrays, shape = split_model_data(data)
    inits = {k: v[None] * 0.1 for k, v in _params(data).items()}
    chains = Chains(
        jax.random.PRNGKey(0)[None],
        inits,
        arrays,
        prior_scales(1.0, 10.0),
        shape,
        NUTSSettings(num_warmup=60, dense_mass=True, block=80),
        "sequential",
    )
    (before,) = chains.states[0].adapt_state.inverse_mass_matrix.values()
    out = chains.advance(80)
    (after,) = chains.states[0].adapt_state.inverse_mass_matrix.values()
    n_params = data.n_features * (data.n_classes - 1) + data.n_classes - 1
    assert before.shape == after.shape == (n_params, n_params)  # one block over every parameter
    np.testing.assert_array_equal(before, np.eye(n_params))
    off_diagonal = np.asarray(after)[~np.eye(n_params, dtype=bool)]
    assert np.abs(off_diagonal).max() > 1e-3  # adapted: the covariances, not a diagonal
    np.testing.assert_allclose(after, np.asarray(after).T, atol=1e-6)
    assert np.all(np.linalg.eigvalsh(np.asarray(after, np.float64)) > 0)
    assert np.all(np.isfinite(out.z["W_raw"])) and not out.diverging[:, 60:].any()  # none after warmup


def test_parallel_chains_start_laid_out_as_they_go_on():
    """The first block sees states sharded as every later block does (else pmap compiles twice)."""
    data = _toy()
    arrays, shape = split_model_data(data)
    inits = {k: jnp.stack([v * 0.1, -v * 0.1]) for k, v in _params(data).items()}
    keys = jax.random.split(jax.random.PRNGKey(0), 2)
    chains = Chains(keys, inits, arrays, prior_scales(1.0, 10.0), shape, NUTSSettings(5), "parallel")
    before = [x.sharding for x in jax.tree.leaves(chains.states)]
    chains.advance(3)
    assert [x.sharding for x in jax.tree.leaves(chains.states)] == before


def test_a_second_fit_of_the_same_shapes_compiles_nothing():
    """New data values, prior scale, seed, start and draw count: the same programs, none compiled."""
    first, second = _toy(seed=0), _toy(seed=0)
    second = second._replace(buckets=tuple(b._replace(features=b.features + 0.5) for b in second.buckets))
    fit_map(first, prior_scale=1.0, max_iter=5)
    fit_nuts(first, _settings(num_warmup=5, num_samples=5, num_chains=2), 1.0, chain_method="sequential")
    programs = (nuts._advance_one, nuts._start_one, potential_and_grad)
    sizes = [f._cache_size() for f in programs]
    start = {k: v * 0.1 for k, v in _params(second).items()}
    fit_map(second, prior_scale=2.0, max_iter=5)
    settings = _settings(num_warmup=5, num_samples=250, num_chains=2)
    fit_nuts(second, settings, 2.0, seed=1, init_values=start, chain_method="sequential")
    assert [f._cache_size() for f in programs] == sizes


def test_a_chain_continued_is_the_chain_run_longer():
    data = _toy()
    arrays, shape = split_model_data(data)
    inits = {k: jnp.stack([v * 0.1, -v * 0.1]) for k, v in _params(data).items()}
    keys = jax.random.split(jax.random.PRNGKey(0), 2)
    settings = NUTSSettings(num_warmup=30, block=16)  # blocks that straddle the end of warmup

    def chains():
        return Chains(keys, inits, arrays, prior_scales(1.0, 10.0), shape, settings, "vectorized")

    once = chains().advance(70)
    pieces = chains()
    parts = [pieces.advance(n) for n in (30, 25, 15)]
    assert pieces.iterations == 70
    for name in inits:
        joined = np.concatenate([p.z[name] for p in parts], axis=1)
        np.testing.assert_allclose(joined, once.z[name], rtol=1e-5, atol=1e-6)
    np.testing.assert_array_equal(np.concatenate([p.num_steps for p in parts], axis=1), once.num_steps)


@pytest.mark.arviz
def test_unconverged_chains_go_on_until_max_num_samples(monkeypatch):
    data = _toy(n_bags=8)
    settings = _settings(num_warmup=10, num_samples=8, num_chains=2, max_num_samples=12)
    # 2 x 8 draws are far from 400 effective draws: extended by 2 (a quarter of 8) at a time, up to 12.
    idata = fit_nuts(data, settings, chain_method="sequential")
    assert idata.posterior.sizes["draw"] == 12 and idata.log_likelihood["Y"].shape == (2, 12, 8)
    assert idata.sample_stats.attrs["num_samples_planned"] == 8
    assert idata.sample_stats.attrs["max_num_samples"] == 12
    monkeypatch.setattr("orlr_ppl.inference.checks.diagnostics.mixing_converged", lambda draws: True)
    assert fit_nuts(data, settings, chain_method="sequential").posterior.sizes["draw"] == 8


@pytest.mark.arviz
def test_mixing_converged_checks_rhat_and_both_ess():
    rng = np.random.default_rng(0)
    good = {"W": rng.normal(size=(4, 1000, 2, 3)), "beta": rng.normal(size=(4, 1000, 3))}
    assert mixing_converged(good)
    shifted = {**good, "W": good["W"] + np.arange(4)[:, None, None, None]}  # chains that disagree
    assert not mixing_converged(shifted)
    sticky = {**good, "beta": np.repeat(good["beta"][:, :50], 20, axis=1)}  # 50 distinct draws per chain
    assert not mixing_converged(sticky)
    constant = {**good, "beta": np.zeros((4, 1000, 3))}  # no intercept: exempt
    assert mixing_converged(constant)


@pytest.mark.parametrize("method", ["sequential", "vectorized", "threads"])
def test_progress_bar_counts_every_iteration_of_every_chain(capsys, method):
    data = _toy(n_bags=8)
    settings = _settings(num_warmup=4, num_samples=6, num_chains=2)
    shown = fit_nuts(data, dataclasses.replace(settings, progress_bar=True), chain_method=method)
    err = capsys.readouterr().err
    assert "NUTS, 2 chains" in err and "20/20" in err
    # It says so while the first call compiles, then names the phase.
    assert "compiling…" in err and "sampling" in err
    # The bar's short calls (one iteration, then about PROGRESS_SECONDS' worth) take the same transitions.
    quiet = fit_nuts(data, settings, chain_method=method)
    for name in ("W", "beta"):
        np.testing.assert_array_equal(shown.posterior[name], quiet.posterior[name])


def test_a_short_call_runs_only_its_own_iterations():
    """``_advance`` with ``n_iter`` below the block: the chains move ``n_iter`` times, no more."""
    data = _toy(n_bags=6)
    arrays, shape = split_model_data(data)
    inits = {k: np.asarray(v)[None] * 0.3 for k, v in _params(data).items()}
    key = jax.random.PRNGKey(0)[None]
    args = (arrays, prior_scales(1.0, 10.0), shape, NUTSSettings(0, block=10), "sequential")
    whole = Chains(key, inits, *args).advance(7)
    bits = Chains(key, inits, *args)
    parts = [bits.advance(n) for n in (1, 2, 4)]
    assert bits.iterations == 7
    for name in inits:
        joined = np.concatenate([part.z[name] for part in parts], axis=1)
        np.testing.assert_array_equal(joined, whole.z[name])
    np.testing.assert_array_equal(
        np.concatenate([p.log_likelihood[0] for p in parts], 1), whole.log_likelihood[0]
    )


def _interrupt_after(monkeypatch, iterations: int) -> None:
    """Calls of five iterations; Ctrl-C (``KeyboardInterrupt``) in the call that passes ``iterations``."""
    call, seen = Chains._call, [0]

    def interrupted(self, n):
        seen[0] += n
        if seen[0] > iterations:
            raise KeyboardInterrupt
        return call(self, n)

    monkeypatch.setattr(Chains, "_chunk", lambda self: 5)
    monkeypatch.setattr(Chains, "_call", interrupted)


@pytest.mark.arviz
def test_ctrl_c_while_sampling_keeps_the_draws_done(monkeypatch):
    from orlr_ppl.inference.checks.diagnostics import diagnose, warning_message

    data = _toy(n_bags=8)
    whole = fit_nuts(data, _settings(num_warmup=10, num_samples=30, num_chains=2), chain_method="sequential")
    _interrupt_after(monkeypatch, 10 + 15)  # five-iteration calls: 15 draws done, the 4th call stopped
    part = fit_nuts(data, _settings(num_warmup=10, num_samples=30, num_chains=2), chain_method="sequential")
    assert part.posterior.sizes["draw"] == 15 and part.sample_stats.attrs["interrupted"] == 1
    np.testing.assert_array_equal(part.posterior["W"], whole.posterior["W"][:, :15])
    diag = diagnose(part)
    assert diag.problems[0] == "sampling was interrupted (Ctrl-C) after 15 of the 30 planned draws a chain"
    message = warning_message(diag)
    assert "stopped by Ctrl-C after 15 of 30 draws a chain" in message
    assert "Next: run the fit again and let it finish." in message
    assert whole.sample_stats.attrs["interrupted"] == 0 and not diagnose(whole).sampler["interrupted"]


def test_threaded_chains_do_not_wait_for_each_other(monkeypatch):
    """In threads a chain's calls do not wait for the other chains' (in step, the slowest would set
    every call's time): one chain held in its first call while the other runs all of its."""
    import threading

    # In float64, as the other agreements of threads with one chain after another.
    data = _toy(n_bags=8, dtype=np.float64)
    arrays, shape = split_model_data(data)
    inits = {k: np.stack([v * 0.1, -v * 0.1]).astype(np.float64) for k, v in _params(data).items()}
    keys = jax.random.split(jax.random.PRNGKey(0), 2)
    args = (keys, inits, arrays, prior_scales(1.0, 10.0, np.float64), shape, NUTSSettings(5))
    with jax.enable_x64(True):
        alone = Chains(*args, "sequential").advance(20)
    advance, calls, lock = nuts._advance_one, {}, threading.Lock()
    other_done, held = threading.Event(), []

    def watched(state, n, *rest):
        me = threading.get_ident()
        with lock:
            calls[me] = calls.get(me, 0) + 1
            count, slow = calls[me], next(iter(calls))  # the first chain to call is the one held
        if me == slow and count == 1:  # held until the other has run all four of its calls
            held.append(other_done.wait(timeout=20))
        out = advance(state, n, *rest)
        if me != slow and count == 4:
            other_done.set()
        return out

    monkeypatch.setattr(Chains, "_chunk", lambda self: 5)
    monkeypatch.setattr(nuts, "_advance_one", watched)
    with jax.enable_x64(True):
        apart = Chains(*args, "threads").advance(20)
    assert held == [True]  # in step, the held chain would have timed out waiting
    for name in inits:
        np.testing.assert_allclose(apart.z[name], alone.z[name], rtol=1e-8, atol=1e-10)


def test_ctrl_c_stops_threaded_chains_at_the_draws_every_chain_reached(monkeypatch):
    """Chains in threads run their calls apart; Ctrl-C (raised in the main thread, wherever the
    signal landed) stops each at the end of its running call, and the draws all chains reached stay."""
    import _thread
    import signal
    import threading
    import time

    data = _toy(n_bags=8, dtype=np.float64)
    settings = _settings(num_warmup=10, num_samples=60, num_chains=2)
    with jax.enable_x64(True):
        whole = fit_nuts(data, settings, chain_method="sequential")
    advance, seen, lock = nuts._advance_one, [], threading.Lock()

    def interrupted(state, n, *args):
        with lock:
            seen.append(n)
            now = sum(seen) == 2 * (10 + 15)
        if now:  # once, in a chain's thread, as a signal landing there would
            _thread.interrupt_main()
            time.sleep(1.0)  # this chain's call outlasts the main thread's next wake
        return advance(state, n, *args)

    monkeypatch.setattr(Chains, "_chunk", lambda self: 5)
    monkeypatch.setattr(nuts, "_advance_one", interrupted)
    handler = signal.getsignal(signal.SIGINT)
    signal.signal(signal.SIGINT, signal.default_int_handler)  # pytest-xdist's workers ignore Ctrl-C
    try:
        with jax.enable_x64(True):
            part = fit_nuts(data, settings, chain_method="threads")
    finally:
        signal.signal(signal.SIGINT, handler)
    draws = part.posterior.sizes["draw"]
    attrs = part.sample_stats.attrs
    assert attrs["interrupted"] == 1 and attrs["chain_method"] == "threads"
    assert 5 <= draws < 60 and draws % 5 == 0
    assert part.posterior["W"].dtype == np.float64
    np.testing.assert_allclose(part.posterior["W"], whole.posterior["W"][:, :draws], rtol=1e-8, atol=1e-10)
    assert part.log_likelihood["Y"].shape == (2, draws, 8)


@pytest.mark.parametrize("iterations", [7, 12])
def test_ctrl_c_in_warmup_or_before_four_draws_keeps_nothing(monkeypatch, iterations):
    _interrupt_after(monkeypatch, iterations)  # stopped at 5 warmup iterations, or at 10 + 0 draws
    with pytest.raises(KeyboardInterrupt):
        settings = _settings(num_warmup=10, num_samples=30, num_chains=2)
        fit_nuts(_toy(n_bags=8), settings, chain_method="sequential")


def _correlated_toy(n_bags=30, seed=0, noise=0.05):
    """Bags whose two features are nearly equal (their difference's sd ``noise``): weights correlated
    along their sum and difference."""
    rng = np.random.default_rng(seed)
    bags, sets = [], []
    for _ in range(n_bags):
        y = rng.integers(0, 3, size=rng.integers(1, 4))
        x1 = 1.5 * (y - 1.0) + rng.normal(size=len(y))
        bags.append(np.stack([x1, x1 + noise * rng.normal(size=len(y))], axis=1))
        sets.append(np.unique(y))
    return make_model_data(bags, sets, 3)


def test_laplace_whitening_is_an_exact_change_of_variables():
    """``u -> shift + chol u`` and back: same parameters, the potential's gradient carried by ``chol^T``,
    and ``chol chol^T`` the inverse Hessian at the start (a Normal prior's potential is convex)."""
    data = _correlated_toy()
    arrays, shape = split_model_data(data)
    scales = prior_scales(3.0, 10.0)
    start = {k: np.asarray(v) for k, v in _params(data).items()}
    hessian = chain_setup.start_hessian(start, arrays, scales, shape, True)
    white, spec = chain_setup.laplace_whitening(hessian), hessian.spec
    assert [name for name, _ in spec] == ["W_raw", "beta_raw"]
    hess = jax.hessian(lambda v: potential_and_grad(_unflat(v, spec), arrays, scales, shape, True)[0])
    flat = np.concatenate([start[k].reshape(-1) for k, _ in spec])
    cov = np.asarray(white.chol, np.float64) @ np.asarray(white.chol, np.float64).T
    np.testing.assert_allclose(
        cov @ np.asarray(hess(jnp.asarray(flat)), np.float64), np.eye(len(flat)), atol=2e-3
    )

    z = _params(data, seed=4)
    value, grad = potential_and_grad(z, arrays, scales, shape, True)
    u, g = chain_setup.from_model(z, grad, white, spec)
    assert set(u) == {chain_setup.WHITE}
    back = chain_setup.to_model(jax.tree.map(jnp.asarray, u), white, spec)
    for name in z:
        np.testing.assert_allclose(back[name], z[name], rtol=1e-4, atol=1e-4)
    u_potential = nuts._potential_fn_gen(arrays, scales, white, shape, True, spec)
    u_value, u_grad = jax.value_and_grad(u_potential)(jax.tree.map(jnp.asarray, u))
    assert float(u_value) == pytest.approx(float(value), rel=1e-4)  # constant Jacobian: same density
    np.testing.assert_allclose(u_grad[chain_setup.WHITE], g[chain_setup.WHITE], rtol=2e-3, atol=2e-3)


def test_laplace_whitening_holds_the_horseshoe_scales_and_is_the_hessian_block():
    """Under the group horseshoe the scales stay out of the whitening (``UNWHITENED``) and the whitened
    sites' Hessian, built from Hessian-vector products, is the (hs_z, beta_raw) block of autodiff's
    full Hessian with the scales held; above ``MAX_WHITENED`` parameters it refuses."""
    from orlr_ppl.model.priors import horseshoe_start

    data = _correlated_toy()._replace(weight_prior="group_horseshoe")
    arrays, shape = split_model_data(data)
    scales = prior_scales(3.0, 10.0)
    w = _params(data)
    start = horseshoe_start(np.asarray(w["W_raw"]), 3.0) | {"beta_raw": np.asarray(w["beta_raw"])}
    hessian = chain_setup.start_hessian(start, arrays, scales, shape, True)
    white, spec = chain_setup.laplace_whitening(hessian), hessian.spec
    assert [name for name, _ in spec] == ["beta_raw", "hs_z"]
    held = {k: jnp.asarray(v) for k, v in start.items() if k in chain_setup.UNWHITENED}
    hess = jax.hessian(lambda v: potential_and_grad(held | _unflat(v, spec), arrays, scales, shape, True)[0])
    h = np.asarray(hess(jnp.asarray(white.shift)), np.float64)
    cov = np.asarray(white.chol, np.float64) @ np.asarray(white.chol, np.float64).T
    ev = np.linalg.eigvalsh(0.5 * (h + h.T))
    assert ev.min() > 1e-3 * ev.max()  # no eigenvalue floored, so cov is exactly H^-1
    np.testing.assert_allclose(cov @ h, np.eye(len(h)), atol=5e-3)
    assert chain_setup.whitened_size(data, True) == white.shift.size
    with pytest.raises(ValueError, match="whiten=False"):
        chain_setup.check_whitenable(chain_setup.MAX_WHITENED + 1)


@pytest.mark.parametrize("fit_intercept", [True, False])
def test_complete_data_condition_is_that_of_the_softmax_regressions_hessian(fit_intercept):
    """The condition number "auto" reads is that of autodiff's Hessian of the negative log posterior
    of a softmax regression on every instance (labels seen; its Hessian does not depend on them),
    scaled to unit diagonal."""
    data = _correlated_toy()
    start = {k: np.asarray(v, np.float64) for k, v in _params(data).items()}
    if not fit_intercept:
        del start["beta_raw"]
    x = np.concatenate([b.features[b.mask] for b in data.buckets]).astype(np.float64)
    basis = np.asarray(sum_to_zero_basis(3), np.float64)

    def negative_log_posterior(flat):
        w = flat[:4].reshape(2, 2)
        logits = x @ (w @ basis.T) + (flat[4:] @ basis.T if fit_intercept else 0.0)
        prior = 0.5 * jnp.sum(w**2) / 3.0**2 + 0.5 * jnp.sum(flat[4:] ** 2) / 10.0**2
        return -jnp.sum(jax.nn.log_softmax(logits)[:, 0]) + prior

    flat = np.concatenate([start[k].reshape(-1) for k in ("W_raw", "beta_raw") if k in start])
    with jax.enable_x64(True):
        h = np.asarray(jax.hessian(negative_log_posterior)(jnp.asarray(flat)))
    # Same parameters, another order (W_raw's rows, then beta_raw): the condition number is the same.
    expected = np.linalg.cond(h / np.sqrt(np.outer(np.diag(h), np.diag(h))))
    got = chain_setup.complete_data_condition(start, data, 3.0, 10.0, fit_intercept)
    assert got == pytest.approx(expected, rel=1e-6)


def test_whiten_auto_whitens_where_the_diagonal_metric_cannot_undo_the_correlations():
    """``NUTS(whiten="auto")``, the default: nearly equal features (condition above
    ``WHITEN_CONDITION`` at the MAP) are whitened, well-separated ones are not, and the posterior
    records the decision and the condition number it read; True and False are obeyed as given."""
    runs = {}
    # Under a prior of sd 10 the likelihood alone bounds the features' difference: condition about 5,000.
    for name, data in (("correlated", _correlated_toy(noise=0.01)), ("plain", _toy())):
        settings = _settings(num_warmup=10, num_samples=10, num_chains=1, init="map")
        runs[name] = fit_nuts(data, settings, 10.0).sample_stats.attrs
        forced = fit_nuts(data, dataclasses.replace(settings, whiten=not runs[name]["whiten"]), 10.0)
        assert forced.sample_stats.attrs["whiten"] == 1 - runs[name]["whiten"]
        assert forced.sample_stats.attrs["whiten_setting"] in ("True", "False")
    assert runs["correlated"]["start_condition"] > chain_setup.WHITEN_CONDITION
    assert runs["correlated"]["whiten"] == 1 and runs["correlated"]["whiten_setting"] == "auto"
    assert runs["plain"]["start_condition"] < chain_setup.WHITEN_CONDITION and runs["plain"]["whiten"] == 0
    # Under the horseshoe the prior's funnel shapes the posterior: "auto" leaves the metric alone.
    horseshoe = _correlated_toy(noise=0.01)._replace(weight_prior="group_horseshoe")
    attrs = fit_nuts(horseshoe, settings, 10.0).sample_stats.attrs
    assert attrs["whiten"] == 0 and np.isnan(attrs["start_condition"])


def _unflat(v, spec):
    out, at = {}, 0
    for name, site_shape in spec:
        n = int(np.prod(site_shape))
        out[name] = v[at : at + n].reshape(site_shape)
        at += n
    return out


def test_whitened_nuts_samples_the_same_posterior_in_fewer_leapfrog_steps():
    """On weights correlated by two nearly equal features, ``whiten=True`` gives the diagonal metric's
    posterior (means within Monte Carlo error, draws in the model's space) at fewer steps per draw."""
    data = _correlated_toy()
    point = fit_map(data, 3.0, 10.0)
    basis = sum_to_zero_basis(3)
    start = {"W_raw": np.asarray(point.W) @ basis, "beta_raw": np.asarray(point.beta) @ basis}
    settings = _settings(num_warmup=300, num_samples=500, num_chains=2)
    plain = fit_nuts(data, settings, 3.0, seed=1, init_values=start)
    white = fit_nuts(data, dataclasses.replace(settings, whiten=True), 3.0, seed=2, init_values=start)
    assert white.sample_stats.attrs["whiten"] == 1 and plain.sample_stats.attrs["whiten"] == 0
    assert set(white.posterior.data_vars) == set(plain.posterior.data_vars)
    steps_plain = float(plain.sample_stats["n_steps"].mean())
    steps_white = float(white.sample_stats["n_steps"].mean())
    assert steps_white < 0.5 * steps_plain, (steps_white, steps_plain)
    for name in ("W", "beta"):
        a, b = plain.posterior[name], white.posterior[name]
        sd = np.sqrt(0.5 * (a.var(("chain", "draw")) + b.var(("chain", "draw"))))
        # 1,000 draws each: a difference of means beyond 0.25 sd would be a different posterior.
        np.testing.assert_array_less(np.abs(a.mean(("chain", "draw")) - b.mean(("chain", "draw"))), 0.25 * sd)
    # The recorded log-likelihoods are those of the reported (model-space) draws.
    arrays, shape = split_model_data(data)
    last = {k: jnp.asarray(white.unconstrained_posterior[k].values[0, -1]) for k in ("W_raw", "beta_raw")}
    ll = bucket_log_likelihoods(last, arrays, prior_scales(3.0, 10.0), shape, True)
    merged = data.merge_sites({data.site_name(k): np.asarray(v)[None] for k, v in enumerate(ll)})[0]
    np.testing.assert_allclose(white.log_likelihood["Y"].values[0, -1], merged, rtol=1e-4, atol=1e-4)
