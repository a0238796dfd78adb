"""How NUTS chains are set up: where they start, on which devices, in which coordinates.

``jittered_inits`` spreads the chains' starting points around a point
estimate; ``resolve_chain_method`` lays them out on the devices.
``laplace_whitening`` builds a ``Whitening``: a fixed linear change
of variables, from the Laplace approximation at that start, in which the
sampler (``nuts``) moves the weights and intercepts; ``to_model`` and
``from_model`` carry parameters (and the potential's gradient) between its
space and the model's.
"""

from __future__ import annotations

from functools import partial
from typing import Literal, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from ...model.log_density import Params, Scales, potential
from ...model.numpyro_model import ModelArrays, ModelData, ModelShape, start_params, sum_to_zero_basis

Array = jax.Array
ChainMethod = Literal["auto", "parallel", "threads", "sequential", "vectorized"]
Spec = tuple[tuple[str, tuple[int, ...]], ...]
"""Whitened sites as (name, shape), sorted by name: their order in the flat vector."""


class Whitening(NamedTuple):
    """A fixed linear change of variables for some sites: ``flat = shift + chol @ u``.

    ``flat`` (P,) concatenates the sites ``NUTSSettings.whitened`` names (each
    flattened C-order) and NUTS samples ``u`` (site ``WHITE``) in their place.
    With ``chol`` the Cholesky factor of the Laplace covariance of those sites,
    ``u`` is about standard normal where the likelihood dominates, so the
    diagonal metric NUTS adapts need only handle the other sites (a shrinkage
    prior's scales). The Jacobian is constant, so the potential in ``u`` is the
    model's at ``flat``. Where the posterior is far from that Gaussian (a weakly
    identified class), ``u`` has oblique directions of other widths, which a
    diagonal metric cannot rescale.

    Attributes:
        shift: (P,) the centre, e.g. the MAP.
        chol: (P, P) lower-triangular.
    """

    shift: Array
    chol: Array


WHITE = "_whitened"
"""The site NUTS samples in place of the whitened ones, (P,)."""


def _unflat(flat: Array, spec: Spec) -> Params:
    """``spec``'s sites from their (P,) concatenation (``_flat``'s inverse)."""
    z, at = {}, 0
    for name, site_shape in spec:
        n = int(np.prod(site_shape, dtype=np.int64))
        z[name] = flat[at : at + n].reshape(site_shape)
        at += n
    return z


def to_model(u: Params, white: Whitening | None, spec: Spec) -> Params:
    """Model-space parameters from NUTS's (identity without a whitening)."""
    if white is None:
        return u
    z = {k: v for k, v in u.items() if k != WHITE}
    return z | _unflat(white.shift + white.chol @ u[WHITE], spec)


def _flat(tree: Params, spec: Spec) -> np.ndarray:
    """(P,) float64: ``spec``'s sites of ``tree``, each flattened C-order, in ``spec``'s order."""
    return np.concatenate([np.asarray(tree[name], np.float64).reshape(-1) for name, _ in spec])


def from_model(z: Params, grad: Params, white: Whitening, spec: Spec) -> tuple[Params, Params]:
    """NUTS's parameters and potential gradient from the model's (host arrays)."""
    chol = np.asarray(white.chol, np.float64)
    names = {name for name, _ in spec}
    u = {k: v for k, v in z.items() if k not in names}
    g = {k: v for k, v in grad.items() if k not in names}
    dtype = np.asarray(white.shift).dtype
    u[WHITE] = np.linalg.solve(chol, _flat(z, spec) - np.asarray(white.shift, np.float64)).astype(dtype)
    g[WHITE] = (chol.T @ _flat(grad, spec)).astype(dtype)
    return u, g


def jittered_inits(
    init_values: dict[str, jax.Array], num_chains: int, jitter: float, seed: int
) -> dict[str, np.ndarray]:
    """(num_chains, ...) starting points: ``init + jitter * N(0, 1)`` per chain and scalar.

    Drawn with NumPy on the host: ``jax.random.normal`` would compile a program
    for every parameter shape, seconds of each NUTS fit.
    """
    rng = np.random.default_rng([int(seed), 7919])
    out = {}
    for name, value in sorted(init_values.items()):
        value = np.asarray(value)
        noise = rng.standard_normal((num_chains,) + value.shape)
        out[name] = (value[None] + jitter * noise).astype(value.dtype)
    return out


UNWHITENED = ("hs_log_tau", "hs_log_lambda", "hs_log_slab", "leak_logit")
"""Sites left to NUTS's adapted diagonal metric: scales whose posterior a Gaussian at the start misses."""

MAX_WHITENED = 8192
"""Most parameters ``laplace_whitening`` takes: it keeps (P, P) float64 matrices (0.5 GB each
at this size) and eigendecomposes one, at a cost growing as P^3."""

_HVP_BATCH = 64
"""Hessian-vector products evaluated at once: memory grows with it (each holds a
gradient's intermediates), time hardly does on a CPU."""


def check_whitenable(n_params: int) -> None:
    """ValueError when a whitening of ``n_params`` parameters is larger than ``MAX_WHITENED``."""
    if n_params > MAX_WHITENED:
        gb = 3 * 8 * n_params**2 / 1e9
        raise ValueError(
            f"NUTS(whiten=True): this fit has {n_params:,} weights and intercepts to whiten, and the "
            f"whitening keeps dense {n_params:,} x {n_params:,} matrices (about {gb:,.0f} GB); at most "
            f"{MAX_WHITENED:,} are supported. Use fewer features (a kernel fit: RBF(dictionary_size=...) or "
            "RBF(nystroem=True) with a smaller dictionary), or whiten=False"
        )


def whitened_size(data: ModelData, fit_intercept: bool) -> int:
    """P: how many parameters ``laplace_whitening`` of ``data``'s model whitens."""
    sites = start_params(data, fit_intercept, np.float32)
    return sum(int(np.size(v)) for k, v in sites.items() if k not in UNWHITENED)


@partial(jax.jit, static_argnums=(4, 5, 6))
def _whitened_hessian(
    flat: Array,
    rest: Params,
    arrays: ModelArrays,
    scales: Scales,
    shape: ModelShape,
    fit_intercept: bool,
    spec: Spec,
) -> Array:
    """(P, P): the potential's Hessian over ``spec``'s sites at ``flat`` (P,), ``rest`` held.

    Built row by row from Hessian-vector products, ``_HVP_BATCH`` at a time:
    ``jax.hessian`` of the whole potential evaluates all P at once, and its
    memory grows with P.
    """
    grad = jax.grad(lambda v: potential(rest | _unflat(v, spec), arrays, scales, shape, fit_intercept))
    eye = partial(jax.nn.one_hot, num_classes=flat.shape[0], dtype=flat.dtype)
    return jax.lax.map(
        lambda i: jax.jvp(grad, (flat,), (eye(i),))[1], jnp.arange(flat.shape[0]), batch_size=_HVP_BATCH
    )


WHITEN_CONDITION = 1000.0
"""``NUTS(whiten="auto")`` whitens when ``complete_data_condition`` at the start exceeds this. A
diagonal metric leaves NUTS's trajectories about ``sqrt(condition)`` steps long to cross the
narrowest direction. The digits and Letter Frost sit well below it, where plain NUTS converges and
whitening cost effective draws, and HJA union's tied features far above it (the guide's "The
sampler's metric" gives the values)."""


def complete_data_condition(
    start: Params,
    data: ModelData,
    prior_scale: float | None,
    intercept_scale: float | None,
    fit_intercept: bool,
) -> float:
    """The condition number, scaled to unit diagonal, of the complete-data curvature at ``start``.

    With ``x~_i`` an instance's features (and a 1 with intercepts), ``p_i`` its softmax at
    ``start`` and ``H`` the (C, C - 1) sum-to-zero basis, the negative log posterior's
    Hessian had every instance's label been seen is::

        F = sum_i x~_i x~_i^T kron H^T (diag p_i - p_i p_i^T) H  +  diag(prior precisions),

    the softmax regression's, which does not depend on the labels. The bag labels'
    Hessian is ``F`` less the information they leave missing (``log_density.potential_hessian``),
    so ``F`` holds the correlations the features put between the weights, the part a
    diagonal metric cannot undo: the returned ``cond(D^-1/2 F D^-1/2)``, ``D = diag F``,
    is what is left after NUTS's adapted diagonal metric has rescaled each parameter. It
    costs ``K (K + 1) / 2`` products of the (n, R) instances, R = d (+ 1), K = C - 1, and an
    eigendecomposition of (P, P), P = R K, in NumPy with no compiled program: a fraction of a
    second at a few hundred parameters, so every NUTS fit can afford it.

    ``start``: the Normal prior's sites, ``W_raw`` (d, C - 1) and, with intercepts,
    ``beta_raw`` (C - 1,); ``prior_scale`` and ``intercept_scale`` their sds (None: flat).
    """
    basis = sum_to_zero_basis(data.n_outputs)
    x = np.concatenate([np.asarray(b.features, np.float64)[np.asarray(b.mask)] for b in data.buckets])
    w = np.asarray(start["W_raw"], np.float64) @ basis.T
    logits = x @ w
    if fit_intercept:
        x = np.column_stack([x, np.ones(len(x))])
        logits = logits + np.asarray(start["beta_raw"], np.float64) @ basis.T
    p = np.exp(logits - logits.max(axis=1, keepdims=True))
    p /= p.sum(axis=1, keepdims=True)
    # H^T (diag p - p p^T) H per instance, (n, K, K), K = C - 1.
    ph = p @ basis
    curv = np.einsum("ca,nc,cb->nab", basis, p, basis) - np.einsum("na,nb->nab", ph, ph)
    r, k = x.shape[1], basis.shape[1]
    fisher = np.empty((r, k, r, k))
    for a in range(k):
        for b in range(a, k):
            fisher[:, a, :, b] = fisher[:, b, :, a] = (x * curv[:, a, b, None]).T @ x
    fisher = fisher.reshape(r * k, r * k)
    precision = np.zeros((r, k))
    precision[: data.n_features] = 0.0 if prior_scale is None else prior_scale**-2.0
    if fit_intercept:
        precision[-1] = 0.0 if intercept_scale is None else intercept_scale**-2.0
    fisher[np.diag_indices_from(fisher)] += precision.reshape(-1)
    scale = np.sqrt(np.maximum(np.diag(fisher), np.finfo(np.float64).tiny))
    ev = np.linalg.eigvalsh(fisher / scale[:, None] / scale[None, :])
    return float(ev.max() / max(ev.min(), np.finfo(np.float64).tiny))


class StartHessian(NamedTuple):
    """The potential's Hessian at the chains' start, over the sites a whitening takes.

    Attributes:
        spec: those sites (name, shape), every one but ``UNWHITENED``'s.
        flat: (P,) the start's values of them, in the start's dtype.
        hessian: (P, P) float64, the potential's Hessian over them, the other sites held.
    """

    spec: Spec
    flat: np.ndarray
    hessian: np.ndarray


def start_hessian(
    start: Params, arrays: ModelArrays, scales: Scales, shape: ModelShape, fit_intercept: bool
) -> StartHessian:
    """The exact Hessian at ``start`` of every site but ``UNWHITENED``'s (any prior).

    Cost: P Hessian-vector products (one compiled program: seconds to compile) and
    ``check_whitenable`` bounds P.
    """
    names = sorted(k for k in start if k not in UNWHITENED)
    spec = tuple((k, tuple(int(n) for n in np.shape(start[k]))) for k in names)
    dtype = np.asarray(start[names[0]]).dtype
    flat = _flat(start, spec).astype(dtype)
    check_whitenable(flat.size)
    rest = {k: jnp.asarray(v) for k, v in start.items() if k not in names}
    hess = np.asarray(
        _whitened_hessian(jnp.asarray(flat), rest, arrays, scales, shape, fit_intercept, spec), np.float64
    )
    return StartHessian(spec, flat, hess)


def laplace_whitening(hessian: StartHessian) -> Whitening:
    """The Laplace whitening at the start whose curvature is ``hessian`` (``start_hessian``).

    The covariance is ``|H|^-1``, with each eigenvalue's absolute value floored at a millionth
    of the largest (``laplace_factor``), so that a start which is not a mode still gives a
    positive-definite one; an eigendecomposition of (P, P).
    """
    return Whitening(hessian.flat, laplace_factor(hessian.hessian).astype(hessian.flat.dtype))


def laplace_factor(hess: np.ndarray) -> np.ndarray:
    """(P, P) lower-triangular ``L`` with ``L L^T = |H|^-1`` for a Hessian ``hess`` (P, P), float64;
    each eigenvalue's absolute value floored at a millionth of the largest."""
    ev, vec = np.linalg.eigh(0.5 * (hess + hess.T))
    ev = np.maximum(np.abs(ev), 1e-6 * np.abs(ev).max())
    return np.linalg.cholesky((vec / ev) @ vec.T)


def resolve_chain_method(chain_method: ChainMethod, num_chains: int) -> str:
    """How ``num_chains`` chains run; ``"auto"``: "parallel" when JAX has a device per chain, else
    "threads" on a CPU (whose cores then share the chains without ``set_host_device_count``) and
    "vectorized" on an accelerator (one device, itself parallel); one chain: "sequential"."""
    if chain_method != "auto":
        return chain_method
    if num_chains == 1:
        return "sequential"
    if jax.local_device_count() >= num_chains:
        return "parallel"
    return "threads" if jax.default_backend() == "cpu" else "vectorized"
