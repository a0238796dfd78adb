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

from typing import Literal, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from ..model.log_density import Params, Scales, potential
from ..model.numpyro_model import ModelArrays, ModelShape

Array = jax.Array
ChainMethod = Literal["auto", "parallel", "sequential", "vectorized"]
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


def to_model(u: Params, white: Whitening | None, spec: Spec) -> Params:
    """Model-space parameters from NUTS's (identity without a whitening)."""
    if white is None:
        return u
    z = {k: v for k, v in u.items() if k != WHITE}
    flat = white.shift + white.chol @ u[WHITE]
    at = 0
    for name, site_shape in spec:
        n = int(np.prod(site_shape, dtype=np.int64))
        z[name] = flat[at : at + n].reshape(site_shape)
        at += n
    return z


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

    Drawn with NumPy on the host: ``jax.random.normal`` compiled a program for
    every parameter shape, about 2.7 s of each NUTS fit on the CPU.
    """
    rng = np.random.default_rng([int(seed), 7919])
    out = {}
    for name, value in sorted(init_values.items()):
        value = np.asarray(value)
        noise = rng.standard_normal((num_chains,) + value.shape)
        out[name] = (value[None] + jitter * noise).astype(value.dtype)
    return out


_potential_hessian = jax.jit(jax.hessian(potential), static_argnums=(3, 4))

UNWHITENED = ("hs_log_tau", "hs_log_lambda", "hs_log_slab", "leak_logit")
"""Sites left to NUTS's adapted diagonal metric: scales whose posterior a Gaussian at the start misses."""


def laplace_whitening(
    start: Params, arrays: ModelArrays, scales: Scales, shape: ModelShape, fit_intercept: bool
) -> tuple[Whitening, Spec]:
    """The Laplace whitening at ``start`` of every site but ``UNWHITENED``'s, and its sites (name, shape).

    ``H``: the potential's Hessian over those sites at ``start``, the others
    held there. The covariance is ``|H|^-1``, with each eigenvalue's absolute
    value floored at a millionth of the largest, so that a start which is not
    a mode still gives a positive-definite one. Cost: a Hessian (P gradients'
    worth) and an eigendecomposition of (P, P).
    """
    names = sorted(k for k in start if k not in UNWHITENED)
    z = {k: jnp.asarray(v) for k, v in start.items()}
    blocks = _potential_hessian(z, arrays, scales, shape, fit_intercept)
    size = {k: int(np.size(start[k])) for k in names}
    hess = np.block(
        [[np.asarray(blocks[a][b], np.float64).reshape(size[a], size[b]) for b in names] for a in names]
    )
    ev, vec = np.linalg.eigh(0.5 * (hess + hess.T))
    ev = np.maximum(np.abs(ev), 1e-6 * np.abs(ev).max())
    chol = np.linalg.cholesky((vec / ev) @ vec.T)
    dtype = np.asarray(start[names[0]]).dtype
    spec = tuple((k, tuple(int(n) for n in np.shape(start[k]))) for k in names)
    return Whitening(_flat(start, spec).astype(dtype), chol.astype(dtype)), spec


def resolve_chain_method(chain_method: ChainMethod, num_chains: int) -> str:
    """``"auto"``: parallel when JAX has a device per chain, else sequential."""
    if chain_method != "auto":
        return chain_method
    return "parallel" if num_chains > 1 and jax.local_device_count() >= num_chains else "sequential"
