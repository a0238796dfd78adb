"""Priors on the rows of the weights: Normal (l2) and group Laplace (l2,1).

Row ``j`` of ``W_raw`` (d, C-1) holds feature ``j``'s weights for every class
(in the sum-to-zero basis, whose columns are orthonormal, so
``||W_raw[j]|| = ||W[j]||``). A prior that shrinks whole rows selects features,
and for kernel features (``data.kernel``) dictionary elements.

``GroupLaplace(scale)`` on a row ``w`` of size ``k`` has density
``exp(-||w|| / scale) / Z(k, scale)`` with
``Z = 2 pi^(k/2) Gamma(k) scale^k / Gamma(k/2)``: its log is the l2,1
penalty ``-||w|| / scale`` (strength ``lam = 1 / scale``) up to a constant, so
the MAP under it is the l2,1-penalised fit (Pham & Raich), computed by
proximal gradient (``inference.prox``) because the penalty is not smooth at 0.
It is proper, so NUTS and SVI sample it too.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import numpyro.distributions as dist
from jax.scipy.special import gammaln
from numpyro.distributions import constraints
from numpyro.distributions.util import promote_shapes, validate_sample

Array = jax.Array

WEIGHT_PRIORS = ("normal", "l21")
"""Prior families of ``W_raw``: ``"normal"`` (an l2 penalty) and ``"l21"`` (group Laplace per row)."""


def group_laplace_log_normalizer(k: int, scale: Array | float) -> Array:
    """``log Z(k, scale)``: the log normaliser of ``exp(-||w|| / scale)`` on R^k."""
    scale = jnp.asarray(scale)
    return (
        jnp.log(2.0) + 0.5 * k * jnp.log(jnp.pi) + gammaln(float(k)) + k * jnp.log(scale) - gammaln(0.5 * k)
    )


def row_norms(w: Array) -> Array:
    """(..., d) the l2 norm of each row of ``w`` (..., d, k), with a zero gradient at a zero row.

    ``jnp.linalg.norm`` has a NaN gradient at 0, where the l2,1 fit puts
    most rows; the double-``where`` keeps the gradient finite there (its
    subgradient set holds 0).
    """
    sq = jnp.sum(w * w, axis=-1)
    safe = jnp.where(sq > 0, sq, 1.0)
    return jnp.where(sq > 0, jnp.sqrt(safe), 0.0)


def l21_norm(w: Array) -> Array:
    """``sum_j ||w[j]||`` over the rows of ``w`` (d, k) (scalar)."""
    return jnp.sum(row_norms(w))


class GroupLaplace(dist.Distribution):
    """A row ``w`` in R^k with density ``exp(-||w|| / scale) / Z(k, scale)``.

    Args:
        scale: (batch) positive scale; ``1 / scale`` is the l2,1 strength.
        k: the row's size (the event shape is ``(k,)``).

    ``sample``: the radius ``||w||`` is Gamma(k, scale) (its density is
    ``r^(k-1) exp(-r / scale)``) and the direction uniform on the sphere.
    """

    arg_constraints = {"scale": constraints.positive}
    support = constraints.real_vector
    reparametrized_params = ["scale"]

    def __init__(self, scale: Array | float, k: int, *, validate_args: bool | None = None) -> None:
        if int(k) < 1:
            raise ValueError(f"GroupLaplace needs a row size k >= 1, got {k}")
        (self.scale,) = promote_shapes(scale)
        self.k = int(k)
        super().__init__(jnp.shape(self.scale), (self.k,), validate_args=validate_args)

    def sample(self, key: Array, sample_shape: tuple[int, ...] = ()) -> Array:
        k_r, k_u = jax.random.split(key)
        shape = sample_shape + self.batch_shape
        radius = jax.random.gamma(k_r, float(self.k), shape) * self.scale
        u = jax.random.normal(k_u, shape + (self.k,))
        return radius[..., None] * u / row_norms(u)[..., None]

    @validate_sample
    def log_prob(self, value: Array) -> Array:
        return -row_norms(value) / self.scale - group_laplace_log_normalizer(self.k, self.scale)

    @property
    def mean(self) -> Array:
        return jnp.zeros(self.batch_shape + self.event_shape)

    @property
    def variance(self) -> Array:
        # E||w||^2 = k (k + 1) scale^2, shared equally by the k coordinates.
        return jnp.broadcast_to(
            jnp.asarray((self.k + 1) * self.scale**2)[..., None], self.batch_shape + self.event_shape
        )


def weight_prior(family: str, shape: tuple[int, int], scale: Array | float | None) -> dist.Distribution:
    """The prior of ``W_raw`` (d, k) in ``family`` (``WEIGHT_PRIORS``); None scale: flat (improper).

    ``"normal"``: iid Normal(0, scale); ``"l21"``: an independent
    ``GroupLaplace(scale)`` per row.
    """
    if scale is None:
        return dist.ImproperUniform(dist.constraints.real, (), shape)
    if family == "normal":
        return dist.Normal(0.0, scale).expand(shape).to_event(2)
    if family == "l21":
        return GroupLaplace(scale, shape[1]).expand((shape[0],)).to_event(1)
    raise ValueError(f"weight prior {family!r}: choose one of {WEIGHT_PRIORS}")


def group_laplace_log_prob(w_raw: Array, scale: Array | float) -> Array:
    """``log p(W_raw)`` (scalar) for iid ``GroupLaplace(scale)`` rows of ``w_raw`` (d, k)."""
    d, k = w_raw.shape
    return -jnp.sum(row_norms(w_raw)) / scale - d * group_laplace_log_normalizer(k, scale)


def l21_log_prior(w_raw: Array | np.ndarray, scale: float) -> float:
    """``log p(W_raw)`` under iid ``GroupLaplace(scale)`` rows (host float), for reporting point fits."""
    d, k = np.shape(w_raw)
    norms = np.sqrt(np.sum(np.square(np.asarray(w_raw, np.float64)), axis=-1))
    return float(-norms.sum() / scale - d * float(group_laplace_log_normalizer(k, scale)))
