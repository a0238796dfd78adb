"""Posterior draws of ``orlr_model`` as ArviZ ``InferenceData`` (0.2x) or ``xarray.DataTree`` (1.x),
built through ``arviz_compat`` (NUTS and SVI share this).

It has a ``posterior`` group of the model's parameters (``W`` (d, C), ``beta``
(C,), and ``leak``, ``tau``, ``lam`` where the model has them), so that
``arviz.summary(idata.posterior)`` lists only those; an ``unconstrained_posterior``
group (ArviZ's name for the sampler's coordinates) of the raw sites the samplers
move in (``RAW_SITES``: ``W_raw`` (d, C-1) and ``beta_raw`` (C-1,) in the
sum-to-zero basis, ``leak_logit``, the horseshoe's ``hs_*``); and a
``log_likelihood`` group with one variable ``Y`` over ``bag`` in input order,
ready for ``arviz.loo``. NUTS adds ``sample_stats``. For posterior predictive
checks (``arviz_compat.plot_ppc``) it also has ``observed_data`` and ``posterior_predictive``, each with ``Y``
(the multi-hot label sets, (bag, class) int) and ``n_labels`` (the label-set
size ``|Y_b|``, (bag,)); the predictive label sets are simulated from the
model (the union of sampled instance labels) at up to ``PPC_MAX_DRAWS``
evenly spaced draws per chain, whose ``draw`` coordinate keeps the posterior's
draw numbers. Posteriors saved before these groups existed load without them.
"""

from __future__ import annotations

from collections.abc import Sequence
from functools import partial

import jax
import jax.numpy as jnp
import numpy as np
import xarray as xr
from numpyro.infer import Predictive

from ...model.log_density import Scales, prior_scales
from ...model.numpyro_model import (
    ModelArrays,
    ModelData,
    ModelShape,
    join_model_data,
    orlr_model,
    split_model_data,
    start_params,
    sum_to_zero_basis,
)
from ...model.priors import HORSESHOE_SITES, horseshoe_weights
from . import arviz_compat as azc

RAW_SITES = ("W_raw", "beta_raw", "leak_logit", *HORSESHOE_SITES)
"""The sampler's coordinates, kept in the ``unconstrained_posterior`` group, not in ``posterior``."""
PPC_MAX_DRAWS = 200
"""Posterior predictive label sets are simulated at most at this many draws per chain."""


def zeros_init(data: ModelData, fit_intercept: bool) -> dict[str, jax.Array]:
    """The samplers' default start: ``model.start_params`` (zero weights, the leak prior's mean)."""
    return {k: jnp.asarray(v) for k, v in start_params(data, fit_intercept, np.float32).items()}


def with_derived(samples: dict[str, np.ndarray], n_classes: int) -> dict[str, np.ndarray]:
    """Add ``W`` and ``beta`` (sum-to-zero, all ``n_classes`` outputs) to raw draws (..., d, C-1),
    and ``leak``, the sigmoid of ``leak_logit``, where the leak was learnt; under the group
    horseshoe, ``W_raw`` itself and the scales ``tau``, ``lam`` from its sites."""
    basis = sum_to_zero_basis(n_classes)
    out = {k: np.asarray(v) for k, v in samples.items() if k in RAW_SITES}
    if "hs_z" in out:
        out["W_raw"] = np.asarray(horseshoe_weights(*(out[k] for k in HORSESHOE_SITES)))
        out["tau"], out["lam"] = np.exp(out["hs_log_tau"]), np.exp(out["hs_log_lambda"])
    out["W"] = out["W_raw"] @ basis.T
    raw_b = out.get("beta_raw", np.zeros(out["W_raw"].shape[:-2] + (n_classes - 1,)))
    out["beta"] = raw_b @ basis.T
    if "leak_logit" in out:
        out["leak"] = 1.0 / (1.0 + np.exp(-out["leak_logit"]))
    return out


def _traced_settings(data: ModelData, model_kwargs: dict) -> tuple[ModelArrays, Scales, ModelShape, bool]:
    """``orlr_model``'s data and prior settings as a module-level jitted function takes them."""
    arrays, shape = split_model_data(data)
    scales = prior_scales(model_kwargs.get("prior_scale", 1.0), model_kwargs.get("intercept_scale", 10.0))
    return arrays, scales, shape, bool(model_kwargs.get("fit_intercept", True))


def observed_label_sets(data: ModelData) -> np.ndarray:
    """(B, C) int8 multi-hot observed label sets in input bag order."""
    if any(bucket.label_sets is None for bucket in data.buckets):
        raise ValueError(
            "these ModelData carry no label sets: build them with make_model_data(bags, label_sets)"
        )
    per_site = {data.site_name(k): bucket.label_sets[None] for k, bucket in enumerate(data.buckets)}
    return data.merge_sites(per_site)[0].astype(np.int8)


def thinned_draws(n_draws: int, max_draws: int = PPC_MAX_DRAWS) -> np.ndarray:
    """Indices of at most ``max_draws`` evenly spaced draws out of ``n_draws`` (all if fewer)."""
    if n_draws <= max_draws:
        return np.arange(n_draws)
    return np.unique(np.linspace(0, n_draws - 1, max_draws).round().astype(np.int64))


def simulate_label_sets(
    data: ModelData, flat: dict[str, np.ndarray], model_kwargs: dict, seed: int = 0
) -> np.ndarray:
    """(S, B, C) int8 label sets drawn from ``orlr_model`` at S flat posterior draws, bags in input order.

    ``Predictive`` runs the model with ``observed=False``, so each bag's label
    set is the union of one categorical draw per instance (``BagLabelSet.sample``);
    its default one-draw-at-a-time loop keeps memory at one draw's logits.
    int8 keeps ``posterior.nc`` small: the 0/1 array is chains x draws x B x C.
    """
    raw = {k: jnp.asarray(flat[k]) for k in RAW_SITES if k in flat}
    sims = _simulate(jax.random.PRNGKey(seed), raw, *_traced_settings(data, model_kwargs))
    return data.merge_sites({k: np.asarray(v) for k, v in sims.items()}).astype(np.int8)


@partial(jax.jit, static_argnums=(4, 5))
def _simulate(
    key: jax.Array, raw: dict, arrays: ModelArrays, scales: Scales, shape: ModelShape, fit_intercept: bool
) -> dict[str, jax.Array]:
    """Per bucket site, (S, B_k, C) label sets simulated at each draw: ``simulate_label_sets``'s
    program, compiled once per shape family (a ``Predictive`` closing over the data would
    compile anew for every fit)."""
    data = join_model_data(arrays, shape)
    sites = [data.site_name(k) for k in range(len(data.buckets))]
    predictive = Predictive(orlr_model, posterior_samples=raw, return_sites=sites)
    kwargs = {"prior_scale": scales.prior_scale, "intercept_scale": scales.intercept_scale}
    return predictive(key, data, **kwargs, fit_intercept=fit_intercept, observed=False)


def _predictive_groups(
    data: ModelData, chains: dict[str, np.ndarray], model_kwargs: dict, seed: int, max_draws: int
) -> dict[str, xr.Dataset]:
    """``observed_data`` and ``posterior_predictive`` datasets (``Y`` and ``n_labels``)."""
    dims = {"Y": ["bag", "class"], "n_labels": ["bag"]}
    coords = {"bag": np.arange(data.n_bags), "class": np.arange(data.n_classes)}
    observed = observed_label_sets(data)
    n_chains, n_draws = next(iter(chains.values())).shape[:2]
    keep = thinned_draws(n_draws, max_draws)
    flat = {k: v[:, keep].reshape((n_chains * len(keep),) + v.shape[2:]) for k, v in chains.items()}
    sims = simulate_label_sets(data, flat, model_kwargs, seed).reshape(n_chains, len(keep), *observed.shape)
    return {
        "observed_data": azc.dict_to_dataset(
            {"Y": observed, "n_labels": observed.sum(axis=-1)},
            coords=coords,
            dims=dims,
            sample_dims=[],
        ),
        "posterior_predictive": azc.dict_to_dataset(
            {"Y": sims, "n_labels": sims.sum(axis=-1)}, coords={**coords, "draw": keep}, dims=dims
        ),
    }


def inference_data(
    data: ModelData,
    chains: dict[str, np.ndarray],
    model_kwargs: dict,
    log_likelihood: np.ndarray,
    sample_stats=None,
    *,
    seed: int = 0,
    max_ppc_draws: int = PPC_MAX_DRAWS,
    sample_stats_attrs: dict | None = None,
) -> azc.Posterior:
    """Build the posterior object (``arviz_compat.Posterior``) from (chain, draw, ...) arrays.

    Args:
        data: the fitted bags (with their label sets).
        chains: ``W_raw``, ``beta_raw``, ``W``, ``beta`` (``with_derived``) as (chain, draw, ...);
            ``RAW_SITES`` go to the ``unconstrained_posterior`` group, the rest to ``posterior``.
        model_kwargs: ``orlr_model``'s prior settings used in the fit.
        log_likelihood: (chain, draw, bag) ``log p(Y_b | X_b, theta)``, bags in input order
            (each sampler computes it in its own compiled programs).
        sample_stats: (chain, draw) sampler statistics, or None.
        seed: seed of the posterior predictive simulation.
        max_ppc_draws: at most this many draws per chain are simulated.
        sample_stats_attrs: attributes of the ``sample_stats`` group (e.g.
            ``max_tree_depth``), kept in ``posterior.nc``.
    """
    dims = {
        "W_raw": ["feature", "contrast"],
        "beta_raw": ["contrast"],
        "W": ["feature", "class"],
        "beta": ["class"],
        "hs_z": ["feature", "contrast"],
        "hs_log_lambda": ["feature"],
        "lam": ["feature"],
        "Y": ["bag"],
    }
    model_vars = {k: v for k, v in chains.items() if k not in RAW_SITES}
    raw = {k: v for k, v in chains.items() if k in RAW_SITES}
    idata = azc.from_dict(
        {"posterior": model_vars, "sample_stats": sample_stats, "log_likelihood": {"Y": log_likelihood}},
        dims={k: v for k, v in dims.items() if k in model_vars or k == "Y"},
        attrs={"sample_stats": sample_stats_attrs} if sample_stats_attrs else None,
    )
    unconstrained = azc.dict_to_dataset(raw, dims={k: v for k, v in dims.items() if k in raw})
    groups = {"unconstrained_posterior": unconstrained}
    groups |= _predictive_groups(data, chains, model_kwargs, seed, max_ppc_draws)
    return azc.add_groups(idata, groups)


def with_names(
    idata: azc.Posterior,
    class_names: Sequence[str] | None = None,
    feature_names: Sequence[str] | None = None,
    bag_names: Sequence[str] | None = None,
) -> azc.Posterior:
    """A copy whose ``class``, ``feature`` and ``bag`` coordinates are the given names, in every group.

    So ``arviz.summary`` rows read ``W[x-box, j]`` instead of ``W[3, 9]``, and PSIS-LOO's
    per-bag values are keyed by the bags' own ids.
    """
    coords = {}
    sizes = {**idata.posterior.sizes}
    if "log_likelihood" in azc.groups(idata):
        sizes = {**idata.log_likelihood.sizes, **sizes}
    for dim, names in (("class", class_names), ("feature", feature_names), ("bag", bag_names)):
        if names is None:
            continue
        size = sizes.get(dim)
        if size is not None and len(names) != size:
            raise ValueError(
                f"got {len(names)} {dim} names but the posterior has {size} entries along {dim!r}: "
                "give one name each"
            )
        coords[dim] = [str(n) for n in names]
    if not coords:
        return idata

    def relabel(ds):
        # A novel class is a last column of W and beta only: the label sets (observed_data,
        # posterior_predictive) have the named classes, the first ones.
        return ds.assign_coords({d: v[: ds.sizes[d]] for d, v in coords.items() if d in ds.dims})

    return azc.map_groups(idata, relabel)


def tree_depth(n_steps: np.ndarray) -> np.ndarray:
    """NUTS tree depth from leapfrog step counts (any shape).

    A trajectory that stopped while building its ``d``-th doubling took between
    ``2**(d-1)`` and ``2**d - 1`` steps, so the depth is the bit length.
    """
    n = np.maximum(np.asarray(n_steps, np.int64), 1)
    return np.floor(np.log2(n)).astype(np.int64) + 1
