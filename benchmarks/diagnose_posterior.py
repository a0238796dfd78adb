"""Why does NUTS mix slowly on Letter Frost? The variants of BENCHMARKS.md's diagnosis (issue 8).

Each variant samples the same posterior (all 144 bags, standardised features,
``prior_scale`` 1) in a different way, or, for ``hier``, under a hierarchical
prior on the weight scale, and prints leapfrog steps, tree depths,
divergences, max R-hat and min bulk/tail ESS over ``W`` and ``beta``, and the
worst parameters:

- ``default``: zero start, diagonal mass matrix (the package's sampler before issue 8);
- ``laplace``: MAP start, a fixed dense mass matrix equal to the Laplace
  covariance at the MAP (the inverse Hessian of the negative log posterior), step
  size adapted only;
- ``rotate``: features rotated to their principal axes, an orthogonal map under
  which the isotropic Normal prior is unchanged, so the posterior is the same up to
  the rotation (draws are rotated back), diagonal mass matrix;
- ``hier``: ``W_raw = tau * z``, ``z ~ Normal(0, 1)``, ``tau ~ HalfNormal(1)`` (non-centred);
- ``hier-centred``: ``W_raw ~ Normal(0, tau)``, ``tau ~ HalfNormal(1)`` (centred: ``tau``
  is informed by all the weights, where non-centring only helps weakly informed groups),
  chains from the MAP (``tau`` at the MAP weights' root mean square), in parallel when JAX has a
  device per chain.

    python benchmarks/diagnose_posterior.py default laplace rotate hier --num-warmup 500 --num-samples 500
    python benchmarks/diagnose_posterior.py hier-centred --num-chains 4 --num-warmup 300 --num-samples 1000
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import numpyro
import numpyro.distributions as dist
from jax.flatten_util import ravel_pytree
from numpyro.infer import MCMC, NUTS, init_to_value

from orlr_ppl.data.datasets import load_letter_frost
from orlr_ppl.inference.inference_data import az
from orlr_ppl.inference.map import fit_map
from orlr_ppl.inference.nuts import jittered_inits, resolve_chain_method
from orlr_ppl.model.distribution import BagLabelSet
from orlr_ppl.model.log_density import potential, prior_scales
from orlr_ppl.model.numpyro_model import (
    ModelData,
    make_model_data,
    orlr_model,
    split_model_data,
    sum_to_zero_basis,
)

SHARED = Path(__file__).resolve().parents[2] / "shared" / "data"


def _observe(data: ModelData, w: jax.Array, beta: jax.Array) -> None:
    """The observed label-set sites of ``orlr_model`` for weights ``w`` (d, C), ``beta`` (C,)."""
    for k, bucket in enumerate(data.buckets):
        with numpyro.plate(f"bags_{k}", bucket.mask.shape[0]):
            numpyro.sample(
                f"Y_{k}",
                BagLabelSet(bucket.features @ w + beta, bucket.mask, max_labels=bucket.max_labels),
                obs=bucket.label_sets,
            )


def hierarchical_model(data: ModelData, prior_scale: float = 1.0, intercept_scale: float = 10.0) -> None:
    """``orlr_model`` with a half-normal hyperprior on the weights' common scale (non-centred)."""
    basis = jnp.asarray(sum_to_zero_basis(data.n_classes), jnp.float32)
    tau = numpyro.sample("tau", dist.HalfNormal(prior_scale))
    z = numpyro.sample("z", dist.Normal(0, 1).expand((data.n_features, data.n_classes - 1)).to_event(2))
    b_raw = numpyro.sample(
        "beta_raw", dist.Normal(0, intercept_scale).expand((data.n_classes - 1,)).to_event(1)
    )
    w, beta = (tau * z) @ basis.T, b_raw @ basis.T
    numpyro.deterministic("W", w)
    numpyro.deterministic("beta", beta)
    _observe(data, w, beta)


def centred_hierarchical_model(
    data: ModelData, prior_scale: float = 1.0, intercept_scale: float = 10.0
) -> None:
    """``orlr_model`` with ``W_raw ~ Normal(0, tau)``, ``tau ~ HalfNormal(prior_scale)`` (centred)."""
    basis = jnp.asarray(sum_to_zero_basis(data.n_classes), jnp.float32)
    tau = numpyro.sample("tau", dist.HalfNormal(prior_scale))
    w_raw = numpyro.sample(
        "W_raw", dist.Normal(0, tau).expand((data.n_features, data.n_classes - 1)).to_event(2)
    )
    b_raw = numpyro.sample(
        "beta_raw", dist.Normal(0, intercept_scale).expand((data.n_classes - 1,)).to_event(1)
    )
    w, beta = w_raw @ basis.T, b_raw @ basis.T
    _observe(data, w, beta)


def _map_start(
    bags: list, sets: list, n_classes: int, hessian: bool = True
) -> tuple[dict, np.ndarray | None]:
    """MAP raw parameters and the Laplace covariance (inverse Hessian) at them (None without ``hessian``)."""
    data = make_model_data(bags, sets, n_classes)
    fit = fit_map(data, 1.0, 10.0)
    basis = sum_to_zero_basis(n_classes)
    start = {
        "W_raw": jnp.asarray(fit.W @ basis, jnp.float32),
        "beta_raw": jnp.asarray(fit.beta @ basis, jnp.float32),
    }
    if not hessian:
        return start, None
    x0, unravel = ravel_pytree(start)  # same order as NumPyro's flattening (sorted site names)
    arrays, shape = split_model_data(data)
    scales = prior_scales(1.0, 10.0)
    hess = np.asarray(jax.hessian(lambda v: potential(unravel(v), arrays, scales, shape))(x0), np.float64)
    return start, np.linalg.inv(0.5 * (hess + hess.T))


def run(variant: str, bags: list, sets: list, n_classes: int, args: argparse.Namespace) -> dict:
    d = bags[0].shape[1]
    rotation = np.eye(d)
    if variant == "rotate":
        x = np.concatenate(bags)
        _, rotation = np.linalg.eigh(x.T @ x)
        bags = [b @ rotation for b in bags]
    data = make_model_data(bags, sets, n_classes)
    zeros = {"W_raw": jnp.zeros((d, n_classes - 1)), "beta_raw": jnp.zeros(n_classes - 1)}
    t0 = time.perf_counter()
    init_params = None
    if variant == "laplace":
        start, cov = _map_start(bags, sets, n_classes)
        kernel = NUTS(
            orlr_model,
            init_strategy=init_to_value(values=start),
            dense_mass=True,
            inverse_mass_matrix=jnp.asarray(cov, jnp.float32),
            adapt_mass_matrix=False,
        )
    elif variant == "hier":
        start = {"tau": jnp.asarray(1.0), "z": zeros["W_raw"], "beta_raw": zeros["beta_raw"]}
        kernel = NUTS(hierarchical_model, init_strategy=init_to_value(values=start))
    elif variant == "hier-centred":
        start, _ = _map_start(bags, sets, n_classes, hessian=False)
        start["tau"] = jnp.sqrt(jnp.mean(start["W_raw"] ** 2))
        kernel = NUTS(centred_hierarchical_model, init_strategy=init_to_value(values=start))
        init_params = jittered_inits(start, args.num_chains, 0.1, 0)
        init_params["tau"] = jnp.abs(init_params["tau"])
        if args.num_chains == 1:  # NumPyro takes one chain's start without a chain axis
            init_params = {k: v[0] for k, v in init_params.items()}
    else:
        kernel = NUTS(orlr_model, init_strategy=init_to_value(values=zeros))
    method = "sequential" if variant != "hier-centred" else resolve_chain_method("auto", args.num_chains)
    mcmc = MCMC(kernel, num_warmup=args.num_warmup, num_samples=args.num_samples, num_chains=args.num_chains,
                chain_method=method, progress_bar=False)  # fmt: skip
    mcmc.run(jax.random.PRNGKey(0), data, extra_fields=("diverging", "num_steps"), init_params=init_params)
    wall = time.perf_counter() - t0
    draws = mcmc.get_samples(group_by_chain=True)
    basis = sum_to_zero_basis(n_classes)
    w = np.asarray(draws["W"]) if "W" in draws else np.asarray(draws["W_raw"]) @ basis.T
    beta = np.asarray(draws["beta"]) if "beta" in draws else np.asarray(draws["beta_raw"]) @ basis.T
    posterior = {"W": np.einsum("ij,cnjk->cnik", rotation, w), "beta": beta}
    table = az.summary(az.from_dict(posterior=posterior), var_names=["W", "beta"])
    steps = np.asarray(mcmc.get_extra_fields(group_by_chain=True)["num_steps"])
    depth = np.floor(np.log2(np.maximum(steps, 1))).astype(int) + 1
    out = {
        "variant": variant,
        "wall_s": round(wall, 1),
        "mean_n_steps": float(steps.mean()),
        "tree_depth_counts": {int(k): int(v) for k, v in zip(*np.unique(depth, return_counts=True))},
        "divergences": int(np.asarray(mcmc.get_extra_fields()["diverging"]).sum()),
        "max_rhat": float(table.r_hat.max()),
        "min_ess_bulk": float(table.ess_bulk.min()),
        "median_ess_bulk": float(table.ess_bulk.median()),
        "min_ess_tail": float(table.ess_tail.min()),
        "worst": table.sort_values("ess_bulk")
        .head(5)[["mean", "sd", "r_hat", "ess_bulk", "ess_tail"]]
        .reset_index()
        .to_dict(orient="records"),
    }
    if "tau" in draws:
        out["tau_mean_sd"] = [float(np.mean(draws["tau"])), float(np.std(draws["tau"]))]
    return out


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.ArgumentDefaultsHelpFormatter
    )
    variants = ["default", "laplace", "rotate", "hier", "hier-centred"]
    parser.add_argument("variants", nargs="+", choices=variants)
    parser.add_argument("--uci-path", default=str(SHARED / "letter-recognition.data"))
    parser.add_argument("--num-warmup", type=int, default=500)
    parser.add_argument("--num-samples", type=int, default=500)
    parser.add_argument("--num-chains", type=int, default=2)
    args = parser.parse_args()
    data = load_letter_frost(args.uci_path, seed=0)
    data = data.fit_standardizer().transform(data)
    for variant in args.variants:
        print(json.dumps(run(variant, data.bags, data.label_sets, data.n_classes, args)), flush=True)


if __name__ == "__main__":
    main()
