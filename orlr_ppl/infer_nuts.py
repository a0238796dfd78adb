"""Full posterior of the ORed-logistic model by NUTS (``numpyro.infer.MCMC``).

Chains start from a point estimate (the MAP, computed by the caller), each
jittered by ``init_jitter`` standard normal draws times its own scale, rather
than at zero weights: from zero, most of warmup is spent reaching the typical
set. Distinct jitter per chain keeps R-hat meaningful: chains that agree after
starting apart are evidence of convergence, chains started at one point are not.

Chains run in parallel when JAX exposes at least as many devices as chains
(on a CPU, ``XLA_FLAGS=--xla_force_host_platform_device_count=N`` set before
JAX starts; the ``orlr-ppl`` command line does this), else one after another.

Sampler statistics are kept under ArviZ's names (``diverging``, ``n_steps``,
``tree_depth``, ``step_size``, ``energy``, ``lp``, ``acceptance_rate``), with
``max_tree_depth`` in the group's attributes, so ``arviz.bfmi`` and the
package's ``diagnostics`` read them.
"""

from __future__ import annotations

from typing import Literal

import jax
import jax.numpy as jnp
import numpy as np
from numpyro.infer import MCMC, NUTS, init_to_value

from .inference_data import az, inference_data, with_derived, zeros_init
from .model import ModelData, orlr_model

ChainMethod = Literal["auto", "parallel", "sequential", "vectorized"]

_EXTRA_FIELDS = (
    "diverging",
    "num_steps",
    "energy",
    "accept_prob",
    "adapt_state.step_size",
    "potential_energy",
)


def resolve_chain_method(chain_method: ChainMethod, num_chains: int) -> str:
    """``"auto"``: parallel when JAX has a device per chain, else sequential."""
    if chain_method != "auto":
        return chain_method
    return "parallel" if num_chains > 1 and jax.local_device_count() >= num_chains else "sequential"


def tree_depth(n_steps: np.ndarray) -> np.ndarray:
    """NUTS tree depth from leapfrog step counts (any shape).

    A trajectory that stopped while building its ``d``-th doubling took between
    ``2**(d-1)`` and ``2**d - 1`` steps, so the depth is the bit length.
    """
    n = np.maximum(np.asarray(n_steps, np.int64), 1)
    return np.floor(np.log2(n)).astype(np.int64) + 1


def jittered_inits(
    init_values: dict[str, jax.Array], num_chains: int, jitter: float, seed: int
) -> dict[str, jax.Array]:
    """(num_chains, ...) starting points: ``init + jitter * N(0, 1)`` per chain and scalar."""
    keys = jax.random.split(jax.random.PRNGKey(seed + 7919), len(init_values))
    out = {}
    for key, (name, value) in zip(keys, sorted(init_values.items())):
        value = jnp.asarray(value)
        noise = jax.random.normal(key, (num_chains,) + value.shape, value.dtype)
        out[name] = value[None] + jitter * noise
    return out


def fit_nuts(
    data: ModelData,
    prior_scale: float | None = 1.0,
    intercept_scale: float | None = 10.0,
    fit_intercept: bool = True,
    num_warmup: int = 500,
    num_samples: int = 500,
    num_chains: int = 2,
    seed: int = 0,
    progress_bar: bool = False,
    init_values: dict[str, jax.Array] | None = None,
    init_jitter: float = 0.1,
    max_tree_depth: int = 10,
    target_accept_prob: float = 0.8,
    dense_mass: bool = False,
    chain_method: ChainMethod = "auto",
) -> az.InferenceData:
    """Sample the posterior with NUTS.

    Args:
        data: from ``make_model_data``.
        prior_scale, intercept_scale, fit_intercept: ``orlr_model``'s priors.
        num_warmup, num_samples, num_chains: per chain.
        seed: the sampler's PRNG seed (also the jitter's).
        progress_bar: NumPyro's progress bar.
        init_values: raw starting parameters (``W_raw`` (d, C-1), ``beta_raw``
            (C-1,)), e.g. the MAP; None starts at zero weights (uniform class
            probabilities, a point of positive likelihood for every bag).
        init_jitter: sd of the Normal noise added to the start, per chain and
            scalar; 0 starts every chain at ``init_values``.
        max_tree_depth, target_accept_prob, dense_mass: NUTS settings.
        chain_method: "auto" (parallel when there is a device per chain),
            or NumPyro's "parallel" / "sequential" / "vectorized".
    Returns:
        ``arviz.InferenceData`` (see ``inference_data``).
    """
    model_kwargs = {
        "prior_scale": prior_scale,
        "intercept_scale": intercept_scale,
        "fit_intercept": fit_intercept,
    }
    start = zeros_init(data, fit_intercept) if init_values is None else dict(init_values)
    start = {k: jnp.asarray(v, jnp.float32) for k, v in start.items() if k in zeros_init(data, fit_intercept)}
    kernel = NUTS(
        orlr_model,
        init_strategy=init_to_value(values=start),
        max_tree_depth=max_tree_depth,
        target_accept_prob=target_accept_prob,
        dense_mass=dense_mass,
    )
    method = resolve_chain_method(chain_method, num_chains)
    mcmc = MCMC(
        kernel,
        num_warmup=num_warmup,
        num_samples=num_samples,
        num_chains=num_chains,
        chain_method=method,
        progress_bar=progress_bar,
    )
    init_params = None
    if init_jitter > 0:
        init_params = jittered_inits(start, num_chains, init_jitter, seed)
        if num_chains == 1:
            init_params = {k: v[0] for k, v in init_params.items()}
    mcmc.run(
        jax.random.PRNGKey(seed), data, **model_kwargs, init_params=init_params, extra_fields=_EXTRA_FIELDS
    )
    raw = mcmc.get_samples(group_by_chain=True)
    chains = with_derived(raw, data.n_classes)
    extra = {k: np.asarray(v) for k, v in mcmc.get_extra_fields(group_by_chain=True).items()}
    stats = {
        "diverging": extra["diverging"],
        "n_steps": extra["num_steps"],
        "tree_depth": tree_depth(extra["num_steps"]),
        "step_size": extra["adapt_state.step_size"],
        "energy": extra["energy"],
        "lp": -extra["potential_energy"],
        "acceptance_rate": extra["accept_prob"],
    }
    attrs = {
        "max_tree_depth": int(max_tree_depth),
        "num_warmup": int(num_warmup),
        "target_accept_prob": float(target_accept_prob),
        "dense_mass": int(dense_mass),
        "chain_method": method,
        "init": "zeros" if init_values is None else "given",
        "init_jitter": float(init_jitter),
    }
    return inference_data(data, chains, model_kwargs, stats, seed=seed, sample_stats_attrs=attrs)
