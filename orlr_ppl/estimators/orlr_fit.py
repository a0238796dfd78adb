"""ORLR's fitting back ends: the inference layer's EM, MAP, NUTS and SVI, one call each.

Kept apart from the estimator (``orlr.py``) so that holds the scikit-learn
surface only. The inference modules are imported inside the functions: NUTS,
SVI and the posterior file bring NumPyro's samplers and ArviZ, which a model
that only predicts never needs.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from ..dp.packing import Layout, PackedBags, dp_work
from ..dp.ragged import pack_canonical
from ..model.numpyro_model import ModelData

if TYPE_CHECKING:  # ArviZ is heavy: imported only for a fit or a posterior file that needs it
    import arviz as az

METHODS = ("em", "map", "nuts", "svi")
HORSESHOE_TARGET_ACCEPT = 0.98
"""NUTS's target acceptance under ``prior="group_horseshoe"`` (0.8 otherwise)."""
DEFAULT_MAX_ITER = {"em": 200, "map": 500}
"""``ORLR(max_iter=None)``. EM stops at ``tol`` well before 200 on most data (EM converges
linearly: 57 iterations on 100 MIML digits bags); the published budget of 50, which the
comparison (``orlr-ppl evaluate``) sets, often stops short of ``tol``. L-BFGS takes more,
cheaper steps."""


class PointFit(NamedTuple):
    """An EM or MAP point estimate.

    Attributes:
        coef: (d, C) weights. intercept: (C,) intercepts.
        log_posterior: the final log posterior. n_iter: iterations run.
        converged: the stopping rule met ``tol``.
        history: EM: (n_iter + 1,) log posterior per iteration; MAP: None.
        leak: the learnt leak probability (``leak="learn"``), else None.
    """

    coef: np.ndarray
    intercept: np.ndarray
    log_posterior: float
    n_iter: int
    converged: bool
    history: np.ndarray | None
    leak: float | None = None


def fit_point(
    data: ModelData,
    method: str,
    prior_scale: float | None,
    intercept_scale: float | None,
    fit_intercept: bool,
    max_iter: int,
    tol: float,
    m_steps: int,
    bag_fraction: float = 1.0,
    seed: int = 0,
) -> PointFit:
    """EM (``method="em"``, ``m_steps`` gradient steps per M-step; stochastic below
    ``bag_fraction=1``, drawn from ``seed``) or MAP by L-BFGS."""
    from ..inference.em import fit_em
    from ..inference.map import fit_map

    scales = {"prior_scale": prior_scale, "intercept_scale": intercept_scale}
    if method == "em":
        res = fit_em(
            data,
            **scales,
            max_iter=max_iter,
            m_steps=m_steps,
            tol=tol,
            fit_intercept=fit_intercept,
            bag_fraction=bag_fraction,
            seed=seed,
        )
        history = res.history
    else:
        res = fit_map(data, **scales, max_iter=max_iter, tol=tol, fit_intercept=fit_intercept)
        history = None
    coef, intercept = np.asarray(res.W), np.asarray(res.beta)
    return PointFit(coef, intercept, res.log_posterior, res.n_iter, res.converged, history, res.leak)


class SamplerSettings(NamedTuple):
    """ORLR's NUTS and SVI settings: its constructor arguments of the same names."""

    prior_scale: float | None
    intercept_scale: float | None
    fit_intercept: bool
    num_warmup: int
    num_samples: int
    num_chains: int
    max_num_samples: int | None
    dense_mass: bool
    whiten: bool
    target_accept: float | None
    init: str
    guide: str
    svi_steps: int
    learning_rate: float
    subsample_size: int | None
    progress_bar: bool
    random_state: int | None


class PosteriorFit(NamedTuple):
    """A NUTS or SVI posterior.

    Attributes:
        posterior: the draws, as ``arviz.InferenceData``.
        losses: SVI: (svi_steps,) the loss (negative ELBO) per step; NUTS: None.
    """

    posterior: az.InferenceData
    losses: np.ndarray | None


def fit_posterior(data: ModelData, method: str, s: SamplerSettings) -> PosteriorFit:
    """Sample the posterior with NUTS (``method="nuts"``) or fit an SVI guide and draw from it."""
    from ..inference.chain_setup import check_whitenable, whitened_size
    from ..inference.nuts import fit_nuts
    from ..inference.svi import fit_svi

    common = {
        "prior_scale": s.prior_scale,
        "intercept_scale": s.intercept_scale,
        "fit_intercept": s.fit_intercept,
        "seed": 0 if s.random_state is None else int(s.random_state),
        "progress_bar": s.progress_bar,
    }
    if method == "nuts":
        accept = target_accept(data.weight_prior, s.target_accept)  # checked before the MAP start
        if s.whiten:
            check_whitenable(whitened_size(data, s.fit_intercept))
        if s.progress_bar and s.init == "map":  # seconds of compiling before NUTS's own bar appears
            _say("NUTS: finding the MAP to start from (compiling)…")
        idata = fit_nuts(
            data,
            num_warmup=s.num_warmup,
            num_samples=s.num_samples,
            num_chains=s.num_chains,
            max_num_samples=2 * s.num_samples if s.max_num_samples is None else s.max_num_samples,
            init_values=nuts_start(data, s),
            dense_mass=s.dense_mass,
            whiten=s.whiten,
            target_accept_prob=accept,
            **common,
        )
        return PosteriorFit(idata, None)
    if s.progress_bar:  # NumPyro's bar appears only once the first step has compiled
        _say("SVI: compiling the ELBO and its gradient…")
    res = fit_svi(
        data,
        guide=s.guide,
        num_steps=s.svi_steps,
        learning_rate=s.learning_rate,
        subsample_size=s.subsample_size,
        num_draws=s.num_samples,
        **common,
    )
    return PosteriorFit(res.posterior, res.losses)


def _say(line: str) -> None:
    """A progress line on stderr, where the bars are."""
    print(line, file=sys.stderr, flush=True)


def target_accept(weight_prior: str, requested: float | None) -> float:
    """NUTS's target acceptance: ``requested``, or the default for the prior family."""
    if requested is None:
        # The horseshoe's narrow neck near zero needs smaller steps than NUTS's default 0.8
        # gives (divergences on a 7-row test problem); Piironen & Vehtari sample it at 0.95-0.99.
        return HORSESHOE_TARGET_ACCEPT if weight_prior == "group_horseshoe" else 0.8
    if not 0.0 < float(requested) < 1.0:
        raise ValueError(f"target_accept={requested!r}: give a probability strictly between 0 and 1, or None")
    return float(requested)


def nuts_start(data: ModelData, s: SamplerSettings) -> dict[str, np.ndarray] | None:
    """Raw starting parameters for NUTS: the MAP (``init="map"``) or None (zeros).

    Returns ``W_raw`` (d, C - 1) and, with intercepts, ``beta_raw`` (C - 1,):
    the MAP in the model's sum-to-zero basis.
    """
    if s.init not in ("map", "zeros"):
        raise ValueError(f"init={s.init!r}: choose 'map' or 'zeros'")
    if s.init == "zeros":
        return None
    from ..inference.map import fit_map
    from ..model.numpyro_model import sum_to_zero_basis
    from ..model.priors import horseshoe_start

    # A few hundred L-BFGS steps cost less than the warmup iterations they save. The group
    # horseshoe has no MAP: its start is the Normal prior's MAP of the same scale, in its sites.
    horseshoe = data.weight_prior == "group_horseshoe"
    point_data = data._replace(weight_prior="normal") if horseshoe else data
    fit = fit_map(point_data, s.prior_scale, s.intercept_scale, fit_intercept=s.fit_intercept)
    basis = sum_to_zero_basis(data.n_outputs)
    start = horseshoe_start(fit.W @ basis, s.prior_scale) if horseshoe else {"W_raw": fit.W @ basis}
    if s.fit_intercept:
        start["beta_raw"] = fit.beta @ basis
    if fit.leak is not None and data.leak == "learn":
        start["leak_logit"] = np.log(fit.leak) - np.log1p(-fit.leak)
    return start


class Draws(NamedTuple):
    """Posterior means and the draws kept for prediction.

    Attributes:
        coef: (d, C) and intercept: (C,) the posterior means (over all draws).
        coef_draws: (S, d, C) and intercept_draws: (S, C), S at most the
            requested number, evenly thinned over all chains' draws.
        leak: the posterior mean of a learnt leak, and leak_draws (S,) its
            draws; None without one.
    """

    coef: np.ndarray
    intercept: np.ndarray
    coef_draws: np.ndarray
    intercept_draws: np.ndarray
    leak: float | None = None
    leak_draws: np.ndarray | None = None


def thin_draws(idata: az.InferenceData, max_draws: int) -> Draws:
    """Posterior means of ``W``, ``beta`` (and ``leak``), and at most ``max_draws`` draws, evenly spaced."""
    w = np.asarray(idata.posterior["W"]).reshape((-1,) + idata.posterior["W"].shape[2:])
    b = np.asarray(idata.posterior["beta"]).reshape(w.shape[0], -1)
    keep = np.unique(np.linspace(0, w.shape[0] - 1, min(max_draws, w.shape[0])).astype(int))
    if "leak" not in idata.posterior:
        return Draws(w.mean(axis=0), b.mean(axis=0), w[keep], b[keep])
    leak = np.asarray(idata.posterior["leak"]).reshape(-1)
    return Draws(w.mean(axis=0), b.mean(axis=0), w[keep], b[keep], float(leak.mean()), leak[keep])


def read_posterior(nc: Path) -> az.InferenceData:
    """Read a saved ``posterior.nc`` into memory (ValueError naming the file if it cannot be read)."""
    from ..inference.inference_data import az

    try:
        # Eager: read into memory and close the file, so the model can be saved over its own folder.
        with az.rc_context({"data.load": "eager"}):
            idata = az.from_netcdf(str(nc))
    except (OSError, ValueError, KeyError, RuntimeError, EOFError) as err:  # netCDF4, h5py and xarray differ
        raise ValueError(f"{nc} is unreadable (truncated or not netCDF?): {err}; re-save the model") from err
    posterior = getattr(idata, "posterior", None)
    if posterior is None or not {"W", "beta"} <= set(posterior.data_vars):
        raise ValueError(f"{nc} holds no posterior draws of W and beta: re-save the model")
    return idata


def pruned(
    feats: list[np.ndarray], label_sets: list[Any], fraction: float
) -> tuple[list[np.ndarray], list[Any], list[int]]:
    """The bags left after pruning (Pham, Raich & Fern, 6.6.2), and the input indices left out.

    The ``floor(fraction * B)`` bags with the most DP work (``dp.packing.dp_work``,
    ties to the earlier bag) are left out: a few bags with many labels can
    cost more than all the others together.
    """
    if not 0.0 <= float(fraction) < 1.0:
        raise ValueError(f"prune={fraction}: give the fraction of bags to leave out, in [0, 1)")
    n_out = int(np.floor(float(fraction) * len(feats)))
    if n_out == 0:
        return feats, label_sets, []
    work = dp_work([len(x) for x in feats], [len(set(s)) for s in label_sets])
    out = np.sort(np.argsort(-work, kind="stable")[:n_out])
    keep = np.setdiff1d(np.arange(len(feats)), out)
    return [feats[i] for i in keep], [label_sets[i] for i in keep], out.tolist()


def layout_of(canonical_shapes: bool | Layout | None) -> Layout | None:
    """``ORLR(canonical_shapes=...)``'s packing layout, if it is one."""
    return canonical_shapes if isinstance(canonical_shapes, Layout) else None


def pack_draw_inputs(
    feats: list[np.ndarray], sets: list[np.ndarray], canonical_shapes: bool | Layout | None
) -> tuple[jax.Array, PackedBags]:
    """Flat features (rows, d) and packing for ``dp.ragged.linear_posteriors``, on canonical shapes.

    The fit's layout where it covers these bags (a cross-validation's training
    folds), so that every fold's transductive predictions share one program.
    """
    n_inst = [len(x) for x in feats]
    try:
        flat, packed = pack_canonical(np.concatenate(feats), n_inst, sets, layout_of(canonical_shapes))
    except ValueError:  # bags the layout does not cover
        flat, packed = pack_canonical(np.concatenate(feats), n_inst, sets)
    return jnp.asarray(flat), packed  # float32 unless jax_enable_x64
