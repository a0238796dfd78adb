"""Full posterior of the ORed-logistic model by NUTS.

Chains start from a point estimate (the MAP, by default), each
jittered by ``init_jitter`` standard normal draws times its own scale, rather
than at zero weights: from zero, most of warmup is spent reaching the typical
set. Distinct jitter per chain keeps R-hat meaningful: chains that agree after
starting apart are evidence of convergence, chains started at one point are not.

The sampler is NumPyro's NUTS kernel (``numpyro.infer.hmc``: diagonal or dense
mass-matrix and step-size adaptation, multinomial sampling, the same
trajectories as ``NUTS``), driven by one module-level program per chain,
``_chain``: warmup in a ``fori_loop``, draws in a ``scan`` that also records
each draw's per-bag log-likelihood for the posterior object. Two reasons not to
use ``numpyro.infer.MCMC``:

- compile once: ``MCMC.run`` retraces and recompiles its loop on every call
  (NumPyro 0.22), whereas ``_chain`` takes the data as arguments, so the next
  fit of the same shape family (another fold, another prior scale) reuses it;
- compile less: ``MCMC`` compiles the log-density gradient three times (its
  initial-parameter search, the kernel's initial state, the trajectory loop).
  Here the starting states' potentials and gradients come from
  ``log_density.potential_and_grad_on_host``, the very executable the MAP
  start compiled, so the program holds one copy, in the trajectory loop.

How the chains share the machine (``chain_setup.resolve_chain_method``): in
parallel over devices (``jax.pmap``) when JAX exposes one per chain (on a CPU,
``orlr_ppl.set_host_device_count`` before JAX starts); else, on a CPU, in
threads, each chain's calls of the one-chain program from its own thread (JAX
releases the GIL while XLA runs, so the cores share the chains as pmap over
host devices does, where vectorized chains on a CPU are slower than one after
another, every chain waiting for the longest trajectory: BENCHMARKS.md); on an
accelerator, vectorized (``jax.vmap``). "sequential" runs them one after
another through the same program. Every way takes the same transitions.

The chains move in coordinates whitened by the Laplace approximation at the
start (``chain_setup.laplace_whitening``) when ``NUTS(whiten=True)``, or, by
default (``"auto"``), when the features' correlations make the curvature there
too ill-conditioned for the diagonal metric NUTS adapts
(``chain_setup.complete_data_condition`` above ``WHITEN_CONDITION``); the draws
are reported in the model's space, and ``sample_stats.attrs`` record the decision
(``whiten``) and the condition number it read (``start_condition``).

Sampler statistics are kept under ArviZ's names (``diverging``, ``n_steps``,
``tree_depth``, ``step_size``, ``energy``, ``lp``, ``acceptance_rate``), with
``max_tree_depth`` in the group's attributes, so ``arviz.bfmi`` and the
package's ``diagnostics`` read them.
"""

from __future__ import annotations

import functools
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor, wait
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax
from numpyro.infer.hmc import HMCState, hmc
from numpyro.infer.util import ParamInfo

from ...model.log_density import (
    Params,
    Scales,
    bucket_log_likelihoods,
    potential,
    potential_and_grad_on_host,
    prior_scales,
)
from ...model.numpyro_model import ModelArrays, ModelData, ModelShape, split_model_data
from ..methods import NUTS, TARGET_ACCEPT, PosteriorFit
from ..point.map import sampler_start
from .arviz_compat import Posterior
from .chain_setup import (
    MAX_WHITENED,
    WHITEN_CONDITION,
    ChainMethod,
    Spec,
    Whitening,
    check_whitenable,
    complete_data_condition,
    from_model,
    jittered_inits,
    laplace_whitening,
    resolve_chain_method,
    start_hessian,
    to_model,
    whitened_size,
)
from .inference_data import inference_data, tree_depth, with_derived, zeros_init

Array = jax.Array

PROGRESS_SECONDS = 0.5
"""With a progress bar, about how long each call of the compiled sampler runs between updates."""
INTERRUPT_SECONDS = 0.25
"""While chains run in threads, how often the main thread wakes (Python runs a Ctrl-C's handler there)."""
MIN_KEPT_DRAWS = 4
"""Draws per chain that an interrupted fit must have reached to keep them (split R-hat's least)."""


class NUTSSettings(NamedTuple):
    """Static sampler settings (one compiled program per distinct value).

    Attributes:
        num_warmup: adapting iterations (the adaptation schedule depends on it).
        max_tree_depth, target_accept_prob, dense_mass: NUTS settings.
        fit_intercept: the model samples ``beta_raw``.
        block: iterations per call of the compiled program; any number of
            iterations runs as calls of it, so the draw count is not static.
        whitened: the sites (name, shape) that NUTS samples through a
            ``Whitening`` (sorted by name); empty: none.
    """

    num_warmup: int
    max_tree_depth: int = 10
    target_accept_prob: float = TARGET_ACCEPT
    dense_mass: bool = False
    fit_intercept: bool = True
    block: int = 100
    whitened: Spec = ()


class ChainDraws(NamedTuple):
    """Iterations of one chain (a leading chain axis when several).

    Attributes:
        z: raw parameters, each (S, ...).
        diverging, num_steps, energy, accept_prob, step_size, potential_energy: (S,).
        log_likelihood: per bucket ``k``, (S, B_k) ``log p(Y_b | X_b, theta_s)``.
    """

    z: Params
    diverging: Array
    num_steps: Array
    energy: Array
    accept_prob: Array
    step_size: Array
    potential_energy: Array
    log_likelihood: tuple[Array, ...]


def _potential_fn_gen(
    arrays: ModelArrays,
    scales: Scales,
    white: Whitening | None,
    shape: ModelShape,
    fit_intercept: bool,
    spec: Spec,
):
    return lambda u: potential(to_model(u, white, spec), arrays, scales, shape, fit_intercept)


def _kernel(
    z: Params,
    pe: Array,
    grad: Params,
    key: Array,
    arrays: ModelArrays,
    scales: Scales,
    shape: ModelShape,
    settings: NUTSSettings,
    white: Whitening | None,
):
    """NumPyro's NUTS ``(initial state, sample_kernel)`` at ``z`` with known potential and gradient.

    ``init_kernel`` also fixes ``sample_kernel``'s warmup length and tree
    depth (state of the ``hmc`` closure), so every program that samples calls
    it; given the potential and gradient it evaluates no gradient of its own.
    """
    gen = functools.partial(
        _potential_fn_gen, shape=shape, fit_intercept=settings.fit_intercept, spec=settings.whitened
    )
    init_kernel, sample_kernel = hmc(potential_fn_gen=gen, algo="NUTS")
    state = init_kernel(
        ParamInfo(z, pe, grad),
        settings.num_warmup,
        # NumPyro's structural form, as ``NUTS.init`` passes it (same momenta as ``MCMC``).
        dense_mass=[tuple(sorted(z))] if settings.dense_mass else [],
        target_accept_prob=settings.target_accept_prob,
        max_tree_depth=settings.max_tree_depth,
        model_args=(arrays, scales, white),
        rng_key=key,
    )
    return state, sample_kernel


def _start(
    key: Array,
    z0: Params,
    pe0: Array,
    grad0: Params,
    arrays: ModelArrays,
    scales: Scales,
    shape: ModelShape,
    settings: NUTSSettings,
    white: Whitening | None,
) -> HMCState:
    """A chain's initial NUTS state at ``z0``, whose potential and gradient are ``pe0``, ``grad0``
    (in NUTS's space: ``u`` for whitened sites)."""
    return _kernel(z0, pe0, grad0, key, arrays, scales, shape, settings, white)[0]


def _advance(
    state: HMCState,
    n_iter: Array,
    arrays: ModelArrays,
    scales: Scales,
    shape: ModelShape,
    settings: NUTSSettings,
    white: Whitening | None,
) -> tuple[HMCState, ChainDraws]:
    """``min(n_iter, block)`` NUTS iterations from ``state``; (block, ...) outputs, the first ``n_iter`` real.

    Warmup and draws are the same iterations: the state's counter tells the
    kernel when adaptation stops. One loop body holds the kernel (and its
    gradient) once. The draws are in the model's space.
    """
    _, sample_kernel = _kernel(
        state.z, state.potential_energy, state.z_grad, state.rng_key, arrays, scales, shape, settings, white
    )
    model_args = (arrays, scales, white)

    def log_likelihoods(s: HMCState) -> tuple[Array, ...]:
        z = to_model(s.z, white, settings.whitened)
        return bucket_log_likelihoods(z, arrays, scales, shape, settings.fit_intercept)

    # Iterations past ``n_iter`` skip the likelihoods too, so a short call (a progress bar's) costs
    # only the iterations it runs.
    blank = jax.tree.map(lambda a: jnp.zeros(a.shape, a.dtype), jax.eval_shape(log_likelihoods, state))

    def transition(s: HMCState) -> tuple[HMCState, tuple[Array, ...]]:
        s = sample_kernel(s, model_args)
        return s, log_likelihoods(s)

    def step(s, i: Array):
        s, ll = lax.cond(i < n_iter, transition, lambda t: (t, blank), s)
        stats = (
            s.diverging,
            s.num_steps,
            s.energy,
            s.accept_prob,
            s.adapt_state.step_size,
            s.potential_energy,
        )
        return s, ChainDraws(to_model(s.z, white, settings.whitened), *stats, ll)

    return lax.scan(step, state, jnp.arange(settings.block))


_start_one = jax.jit(_start, static_argnums=(6, 7))
_start_vectorized = jax.jit(
    jax.vmap(_start, in_axes=(0, 0, 0, 0, None, None, None, None, None)), static_argnums=(6, 7)
)
# States for ``_advance_parallel`` come from a pmap too: a first call on states laid out
# otherwise (all on one device) would compile the whole program a second time.
_start_parallel = jax.pmap(
    _start, in_axes=(0, 0, 0, 0, None, None, None, None, None), static_broadcasted_argnums=(6, 7)
)
_advance_one = jax.jit(_advance, static_argnums=(4, 5))
_advance_parallel = jax.pmap(
    _advance, in_axes=(0, None, None, None, None, None, None), static_broadcasted_argnums=(4, 5)
)
_advance_vectorized = jax.jit(
    jax.vmap(_advance, in_axes=(0, None, None, None, None, None, None)), static_argnums=(4, 5)
)


class Chains:
    """NUTS chains advanced in blocks of one compiled program (``_advance``).

    Args:
        keys: (chains, 2) PRNG keys; inits: raw starting parameters, each (chains, ...).
        arrays, scales, shape: the data and priors (``split_model_data``, ``prior_scales``).
        settings: static sampler settings.
        method: "parallel" (one device per chain, ``pmap``), "threads" (one thread per chain),
            "sequential" or "vectorized".
        progress: called with the number of chain iterations just done (e.g. a tqdm ``update``).
        white: the whitening of ``settings.whitened``'s sites, or None.
    """

    def __init__(
        self,
        keys: Array,
        inits: Params,
        arrays: ModelArrays,
        scales: Scales,
        shape: ModelShape,
        settings: NUTSSettings,
        method: str,
        progress=None,
        white: Whitening | None = None,
    ) -> None:
        self.data = (arrays, scales, shape, settings, white)
        self.method, self.progress = method, progress
        self.n_chains = keys.shape[0]
        self.iterations = 0
        self.interrupted = False
        self._seconds_per_iteration: float | None = None
        starts = [jax.tree.map(lambda v, c=c: v[c], inits) for c in range(self.n_chains)]
        # The starting potentials and gradients come from the executable the MAP compiled.
        fit_intercept = settings.fit_intercept
        evaluated = [potential_and_grad_on_host(z, arrays, scales, shape, fit_intercept) for z in starts]
        pe0 = jnp.stack([pe for pe, _ in evaluated])
        grads = [g for _, g in evaluated]
        if white is not None:
            pairs = [from_model(z, g, white, settings.whitened) for z, g in zip(starts, grads)]
            starts, grads = [u for u, _ in pairs], [g for _, g in pairs]
            inits = jax.tree.map(lambda *v: np.stack(v), *starts)
        grad0 = jax.tree.map(lambda *g: jnp.stack(g), *grads)
        if method in ("sequential", "threads"):
            self.states = [
                _start_one(
                    keys[c],
                    starts[c],
                    pe0[c],
                    jax.tree.map(lambda g, c=c: g[c], grad0),
                    arrays,
                    scales,
                    shape,
                    settings,
                    white,
                )
                for c in range(self.n_chains)
            ]
        else:
            start = _start_parallel if method == "parallel" else _start_vectorized
            self.states = start(keys, inits, pe0, grad0, arrays, scales, shape, settings, white)

    def advance(self, n_iter: int) -> ChainDraws | None:
        """Run up to ``n_iter`` more iterations of every chain; NumPy (chains, n, ...) outputs.

        With a ``progress`` callback, each call of the compiled program runs
        about ``PROGRESS_SECONDS`` (fewer iterations than ``settings.block``),
        so that a bar moves smoothly; the transitions are the same. Ctrl-C
        (``KeyboardInterrupt``) stops at the end of the running call: the
        iterations done so far come back (``n < n_iter``; None if none) and
        ``interrupted`` is set. In threads each chain runs its calls without
        waiting for the others (the slowest chain of a call would otherwise
        set every call's time), so an interrupt keeps the draws every chain
        has reached, and interrupted chains are not advanced again.
        """
        if self.method == "threads":
            parts = self._advance_apart(n_iter)
        else:
            parts = self._advance_together(n_iter)
        done = sum(p.num_steps.shape[1] for p in parts)
        self.iterations += done
        if not parts:
            return None
        return jax.tree.map(lambda *a: np.concatenate(a, axis=1), *parts)

    def _advance_together(self, n_iter: int) -> list[ChainDraws]:
        """Every chain's calls in step (one program for all, or one chain after another)."""
        parts = []
        done = 0
        try:
            while done < n_iter:
                n = min(self._chunk(), n_iter - done)
                t0 = time.perf_counter()
                self.states, out = self._call(n)
                # Slice on the host: slicing sharded outputs would compile a gather per block length.
                parts.append(jax.tree.map(lambda a, n=n: np.asarray(a)[:, :n], out))
                self._seconds_per_iteration = (time.perf_counter() - t0) / n
                done += n
                if self.progress is not None:
                    self.progress(n * self.n_chains)
        except KeyboardInterrupt:
            self.interrupted = True
        return parts

    def _advance_apart(self, n_iter: int) -> list[ChainDraws]:
        """Each chain's calls in its own thread, none waiting for another; the draws all reached."""
        stop = threading.Event()
        lock = threading.Lock()  # one progress update at a time
        x64 = bool(jax.config.jax_enable_x64)  # a thread-local setting (``jax.enable_x64``): carried over
        arrays, scales, shape, settings, white = self.data

        def run(c: int) -> tuple[HMCState, list[ChainDraws]]:
            state, parts, done = self.states[c], [], 0
            with jax.enable_x64(x64):
                while done < n_iter and not stop.is_set():
                    n = min(self._chunk(), n_iter - done)
                    t0 = time.perf_counter()
                    # Waiting in the thread keeps each chain's work in its own thread.
                    state, out = jax.block_until_ready(
                        _advance_one(state, n, arrays, scales, shape, settings, white)
                    )
                    parts.append(jax.tree.map(lambda a, n=n: np.asarray(a)[None, :n], out))
                    self._seconds_per_iteration = (time.perf_counter() - t0) / n
                    done += n
                    if self.progress is not None:
                        with lock:
                            self.progress(n)
            return state, parts

        with ThreadPoolExecutor(max_workers=self.n_chains) as pool:
            futures = [pool.submit(run, c) for c in range(self.n_chains)]
            try:
                pending = set(futures)
                while pending:  # waking now and then: a Ctrl-C that lands in a chain's thread is
                    pending = wait(pending, timeout=INTERRUPT_SECONDS).not_done  # raised here
                results = [f.result() for f in futures]
            except KeyboardInterrupt:  # raised in this (the main) thread only
                stop.set()  # every chain ends its running call
                results = [f.result() for f in futures]
                self.interrupted = True
            finally:
                stop.set()  # on an error in one chain too: the others end their running call
        self.states = [state for state, _ in results]
        drawn = [jax.tree.map(lambda *a: np.concatenate(a, axis=1), *parts) for _, parts in results if parts]
        if len(drawn) < self.n_chains:
            return []
        kept = min(d.num_steps.shape[1] for d in drawn)
        return [jax.tree.map(lambda *a: np.concatenate([x[:, :kept] for x in a]), *drawn)] if kept else []

    def _chunk(self) -> int:
        """Iterations for the next call: a whole block without a bar; else about ``PROGRESS_SECONDS``'
        worth, one until a call has been timed (the first call compiles)."""
        block = self.data[3].block
        if self.progress is None:
            return block
        if self._seconds_per_iteration is None:
            return 1
        return int(np.clip(PROGRESS_SECONDS / max(self._seconds_per_iteration, 1e-9), 1, block))

    def _call(self, n: int):
        """``n`` iterations of every chain in step: the new states and (chains, block, ...) outputs."""
        arrays, scales, shape, settings, white = self.data
        if self.method in ("parallel", "vectorized"):
            run = _advance_parallel if self.method == "parallel" else _advance_vectorized
            return run(self.states, n, arrays, scales, shape, settings, white)
        # One after another: each chain's call is done before the next starts (JAX dispatches
        # asynchronously, and two programs on a CPU could otherwise overlap).
        pairs = [
            jax.block_until_ready(_advance_one(state, n, arrays, scales, shape, settings, white))
            for state in self.states
        ]
        return [st for st, _ in pairs], jax.tree.map(lambda *a: jnp.stack(a), *(out for _, out in pairs))


def _progress_bar(show: bool, num_chains: int, total: int):
    """A tqdm bar over ``total`` iterations of ``num_chains`` chains, and its update callback
    (None, None without ``show``). It reads "compiling" until the first update, then "warmup"."""
    if not show:
        return None, None
    from tqdm.auto import tqdm

    chains = f"{num_chains} chain{'' if num_chains == 1 else 's'}"
    bar = tqdm(total=num_chains * total, desc=f"NUTS, {chains}", postfix="compiling…")
    started = []

    def update(n: int) -> None:
        if not started:  # the first iteration is done: the compiling is over
            started.append(True)
            bar.set_postfix_str("warmup", refresh=False)
        bar.update(n)

    return bar, update


INIT_JITTER = 0.1
"""sd of the Normal noise added to each chain's start, per scalar (``jittered_inits``)."""
MAX_TREE_DEPTH = 10
"""NUTS's tree depth at most: up to 2**10 - 1 leapfrog steps a draw (NumPyro's default)."""


def fit_nuts(
    data: ModelData,
    method: NUTS | None = None,
    prior_scale: float | None = 1.0,
    intercept_scale: float | None = 10.0,
    fit_intercept: bool = True,
    seed: int = 0,
    init_values: dict[str, jax.Array] | None = None,
    *,
    chain_method: ChainMethod = "auto",
    init_jitter: float = INIT_JITTER,
    max_tree_depth: int = MAX_TREE_DEPTH,
) -> Posterior:
    """Sample the posterior with NUTS, as ``method`` (a ``NUTS`` settings object) says.

    Args:
        data: from ``make_model_data``.
        method: the sampler's settings (draws, chains, target acceptance, metric, whitening, start,
            progress bar); None: ``NUTS()``'s defaults. Its ``max_num_samples`` lets chains that
            fail the R-hat or ESS check (``diagnostics.mixing_converged``) after ``num_samples``
            draws go on, a quarter of ``num_samples`` at a time; continuing a chain is exact (the
            same transitions, only more of them), and the diagnostics say it was extended.
        prior_scale, intercept_scale, fit_intercept: ``orlr_model``'s priors.
        seed: the sampler's PRNG seed (also the jitter's).
        init_values: raw starting parameters (``W_raw`` (d, C-1), ``beta_raw`` (C-1,)); None:
            ``method.init`` says where, the MAP under the same prior (``point.map.sampler_start``)
            or zero weights (uniform class probabilities, positive likelihood for every bag).
        chain_method: "auto" (``chain_setup.resolve_chain_method``: parallel when there is a
            device per chain, else threads on a CPU, vectorized on an accelerator), "threads", or
            NumPyro's "parallel" / "sequential" / "vectorized": the same transitions each way.
        init_jitter: sd of the Normal noise added to the start, per chain and scalar; 0 starts
            every chain at the same point (then R-hat means less).
        max_tree_depth: NUTS's tree depth at most.
    Returns:
        the posterior object (``xarray.DataTree``, or 0.2x ``InferenceData``; see
        ``inference_data``); ``sample_stats``' attributes record the settings, how the chains
        ran, ``num_samples_planned`` and the draws actually run.

    With a progress bar (``method.progress_bar``) it says "compiling" until the first iteration
    is done, then "warmup" and "sampling", and moves about every ``PROGRESS_SECONDS``. Ctrl-C in
    the sampling phase stops the chains and returns the draws so far
    (``sample_stats.attrs["interrupted"]`` is 1, and ``diagnostics`` reports it), as PyMC does;
    in warmup, or before ``MIN_KEPT_DRAWS`` draws, it raises ``KeyboardInterrupt``.
    """
    from ..checks.diagnostics import mixing_converged

    method = NUTS() if method is None else method
    num_warmup, num_samples, num_chains = method.num_warmup, method.num_samples, method.num_chains
    if method.whiten is True:
        check_whitenable(whitened_size(data, fit_intercept))
    model_kwargs = {
        "prior_scale": prior_scale,
        "intercept_scale": intercept_scale,
        "fit_intercept": fit_intercept,
    }
    given = init_values is not None
    if not given and method.init == "map":
        if method.progress_bar:  # seconds of compiling before NUTS's own bar
            progress_line("NUTS: finding the MAP to start from (compiling)…")
        init_values = sampler_start(data, prior_scale, intercept_scale, fit_intercept)
    arrays, shape = split_model_data(data)
    arrays = jax.device_put(arrays)  # once, not at every block
    dtype = data.buckets[0].features.dtype
    zeros = zeros_init(data, fit_intercept)
    start = zeros if init_values is None else dict(init_values)
    start = {k: np.asarray(start.get(k, zeros[k]), dtype) for k in zeros}
    inits = jittered_inits(start, num_chains, init_jitter, seed)
    key = jax.random.PRNGKey(seed)
    keys = jax.random.split(key, num_chains) if num_chains > 1 else key[None]
    chains_ran = resolve_chain_method(chain_method, num_chains)
    scales = prior_scales(prior_scale, intercept_scale, dtype)
    # "auto": a dense metric adapts the same correlations itself; above MAX_WHITENED, no whitening;
    # under the l2,1 and horseshoe priors the prior's kink or funnel, not the features, shapes the
    # posterior (whitening diverged there on HJA union: REPRODUCTION.md).
    auto = method.whiten == "auto" and not method.dense_mass and data.weight_prior == "normal"
    auto = auto and whitened_size(data, fit_intercept) <= MAX_WHITENED
    condition = (
        complete_data_condition(start, data, prior_scale, intercept_scale, fit_intercept)
        if auto
        else float("nan")
    )
    whiten = method.whiten is True or (auto and condition > WHITEN_CONDITION)
    white, spec = None, ()
    if whiten:
        hessian = start_hessian(start, arrays, scales, shape, fit_intercept)
        white, spec = laplace_whitening(hessian), hessian.spec
    target_accept = method.acceptance(data.weight_prior)
    settings = NUTSSettings(
        num_warmup, int(max_tree_depth), target_accept, method.dense_mass, bool(fit_intercept), whitened=spec
    )
    limit = max(num_samples, method.draw_budget())
    bar, progress = _progress_bar(method.progress_bar, num_chains, num_warmup + num_samples)
    try:
        chains = Chains(keys, inits, arrays, scales, shape, settings, chains_ran, progress, white)
        chains.advance(num_warmup)
        if chains.interrupted:  # warmup's draws are not the posterior's: nothing to keep
            raise KeyboardInterrupt(f"NUTS interrupted in warmup, after {chains.iterations} iterations")
        if bar is not None:
            bar.set_postfix_str("sampling")
        parts = [chains.advance(num_samples)]
        step = max(1, -(-num_samples // 4))
        while not chains.interrupted and sum(p.num_steps.shape[1] for p in parts) < limit:
            drawn = jax.tree.map(lambda *a: np.concatenate(a, axis=1), *parts)
            if mixing_converged(with_derived(drawn.z, data.n_outputs)):
                break
            more = min(step, limit - drawn.num_steps.shape[1])
            if bar is not None:
                bar.total += num_chains * more
            parts.append(chains.advance(more))
    finally:
        if bar is not None:
            bar.close()
    parts = [p for p in parts if p is not None]
    kept = sum(p.num_steps.shape[1] for p in parts)
    if chains.interrupted and kept < MIN_KEPT_DRAWS:
        raise KeyboardInterrupt(
            f"NUTS interrupted after {kept} draws a chain: too few to keep "
            f"(it keeps {MIN_KEPT_DRAWS} or more)"
        )
    out = jax.tree.map(lambda *a: np.concatenate(a, axis=1), *parts)
    n_draws = out.num_steps.shape[1]
    draws = with_derived(out.z, data.n_outputs)
    sites = {data.site_name(k): ll.reshape((-1,) + ll.shape[2:]) for k, ll in enumerate(out.log_likelihood)}
    log_lik = data.merge_sites(sites).reshape(num_chains, n_draws, data.n_bags)
    stats = {
        "diverging": out.diverging,
        "n_steps": out.num_steps,
        "tree_depth": tree_depth(out.num_steps),
        "step_size": out.step_size,
        "energy": out.energy,
        "lp": -out.potential_energy,
        "acceptance_rate": out.accept_prob,
    }
    attrs = {
        "max_tree_depth": int(max_tree_depth),
        "num_warmup": num_warmup,
        "num_samples_planned": num_samples,
        "max_num_samples": int(limit),
        "target_accept_prob": float(target_accept),
        "dense_mass": int(method.dense_mass),
        "whiten": int(whiten),
        "whiten_setting": str(method.whiten),
        "start_condition": condition,
        "chain_method": chains_ran,
        "init": "given" if given else ("zeros" if init_values is None else "map"),
        "init_jitter": float(init_jitter),
        "interrupted": int(chains.interrupted),
    }
    return inference_data(data, draws, model_kwargs, log_lik, stats, seed=seed, sample_stats_attrs=attrs)


def progress_line(line: str) -> None:
    """A progress line on stderr, where the bars are: the seconds of compiling before a bar shows."""
    print(line, file=sys.stderr, flush=True)


def run(
    method: NUTS,
    data: ModelData,
    prior_scale: float | None,
    intercept_scale: float | None,
    fit_intercept: bool,
    seed: int = 0,
) -> PosteriorFit:
    """``NUTS.fit``: ``fit_nuts`` with ``method``'s settings."""
    return PosteriorFit(fit_nuts(data, method, prior_scale, intercept_scale, fit_intercept, seed), None)
