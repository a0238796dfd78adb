"""Posterior draws of ``orlr_model`` as ArviZ ``InferenceData`` (NUTS and SVI share this).

The ``InferenceData`` has a ``posterior`` group (``W_raw``, ``beta_raw`` and
the derived ``W`` (d, C), ``beta`` (C,)) and a ``log_likelihood`` group with
one variable ``Y`` over ``bag`` in input order, ready for ``arviz.loo``; NUTS
adds ``sample_stats``.
"""

from __future__ import annotations

import warnings

import jax
import jax.numpy as jnp
import numpy as np
from numpyro.infer.util import log_likelihood

from .model import ModelData, orlr_model, sum_to_zero_basis

with warnings.catch_warnings():
    warnings.simplefilter("ignore", FutureWarning)  # ArviZ announces its 1.0 refactor on import
    import arviz as az

RAW_SITES = ("W_raw", "beta_raw")


def zeros_init(data: ModelData, fit_intercept: bool) -> dict[str, jax.Array]:
    init = {"W_raw": jnp.zeros((data.n_features, data.n_classes - 1))}
    if fit_intercept:
        init["beta_raw"] = jnp.zeros((data.n_classes - 1,))
    return init


def with_derived(samples: dict[str, np.ndarray], n_classes: int) -> dict[str, np.ndarray]:
    """Add ``W`` and ``beta`` (sum-to-zero, all C classes) to raw draws (..., d, C-1)."""
    basis = sum_to_zero_basis(n_classes)
    out = {k: np.asarray(v) for k, v in samples.items() if k in RAW_SITES}
    out["W"] = out["W_raw"] @ basis.T
    raw_b = out.get("beta_raw", np.zeros(out["W_raw"].shape[:-2] + (n_classes - 1,)))
    out["beta"] = raw_b @ basis.T
    return out


def _bag_log_likelihood(data: ModelData, flat: dict[str, np.ndarray], model_kwargs: dict) -> np.ndarray:
    """(S, B) log p(Y_b | X_b, theta_s) for flat draws, bags in input order."""
    per_site = log_likelihood(orlr_model, {k: flat[k] for k in RAW_SITES if k in flat}, data, **model_kwargs)
    return data.merge_sites({k: np.asarray(v) for k, v in per_site.items()})


def inference_data(
    data: ModelData, chains: dict[str, np.ndarray], model_kwargs: dict, sample_stats=None
) -> az.InferenceData:
    """Build InferenceData from (chain, draw, ...) arrays."""
    n_chains, n_draws = next(iter(chains.values())).shape[:2]
    flat = {k: v.reshape((n_chains * n_draws,) + v.shape[2:]) for k, v in chains.items()}
    ll = _bag_log_likelihood(data, flat, model_kwargs).reshape(n_chains, n_draws, data.n_bags)
    dims = {
        "W_raw": ["feature", "contrast"],
        "beta_raw": ["contrast"],
        "W": ["feature", "class"],
        "beta": ["class"],
        "Y": ["bag"],
    }
    return az.from_dict(
        posterior=chains,
        sample_stats=sample_stats,
        log_likelihood={"Y": ll},
        dims={k: v for k, v in dims.items() if k in chains or k == "Y"},
    )


def summary(idata: az.InferenceData, var_names: tuple[str, ...] = RAW_SITES):
    """ArviZ summary (mean, sd, HDI, R-hat, bulk and tail ESS) of the raw parameters."""
    present = [v for v in var_names if v in idata.posterior]
    return az.summary(idata, var_names=present)
