"""Priors on the rows of the weights: Normal (l2), group Laplace (l2,1) and the group horseshoe.

Row ``j`` of ``W_raw`` (d, C-1) holds feature ``j``'s weights for every class
(in the sum-to-zero basis, whose columns are orthonormal, so
``||W_raw[j]|| = ||W[j]||``). A prior that shrinks whole rows selects features,
and for kernel features (``features.RBFDictionary``) dictionary elements.

``GroupLaplace(scale)`` on a row ``w`` of size ``k`` has density
``exp(-||w|| / scale) / Z(k, scale)`` with
``Z = 2 pi^(k/2) Gamma(k) scale^k / Gamma(k/2)``: its log is the l2,1
penalty ``-||w|| / scale`` (strength ``lam = 1 / scale``) up to a constant, so
the MAP under it is the l2,1-penalised fit (Pham & Raich), computed by
proximal gradient (``inference.point.prox``) because the penalty is not smooth at 0.
It is proper, so NUTS and SVI sample it too.

The group horseshoe (``"group_horseshoe"``; regularised, Piironen & Vehtari
2017, one local scale per row) is the Bayesian shrinkage prior: most rows
near zero, a few left free. Non-centred, so that NUTS does not meet the
funnel between a row and its scale::

    W_raw[j] = tau * lam~_j * z_j,   z_j ~ N(0, I_k),
    lam~_j^2 = c^2 lam_j^2 / (c^2 + tau^2 lam_j^2),
    tau ~ HalfCauchy(tau0),  lam_j ~ HalfCauchy(1),  c^2 ~ InvGamma(2, 2 scale^2),

with ``tau0 = scale * p0 / (d - p0)``, ``p0 = max(1, d / 10)`` (a prior guess
that a tenth of the rows matter). The slab ``c`` (Student-t, 4 d.o.f., of
scale ``scale``) caps the rows left free, as a Normal(0, scale) would. The
scales are sampled on the log scale (sites ``hs_log_*``, real support, like
the leak's logit), and the posterior also holds ``tau`` and ``lam`` (row,)
themselves.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import numpyro
import numpyro.distributions as dist
from jax.scipy.special import gammaln
from numpyro.distributions import constraints
from numpyro.distributions.util import promote_shapes, validate_sample

Array = jax.Array

WEIGHT_PRIORS = ("normal", "l21", "group_horseshoe")
"""Prior families of ``W_raw``: ``"normal"`` (an l2 penalty), ``"l21"`` (group Laplace per row) and
``"group_horseshoe"`` (for NUTS and SVI: its density is unbounded at zero, so it has no MAP)."""
HORSESHOE_SITES = ("hs_z", "hs_log_tau", "hs_log_lambda", "hs_log_slab")
"""The group horseshoe's latent sites, all of real support; ``W_raw`` is then deterministic."""
SLAB_DF = 4.0


def group_laplace_log_normalizer(k: int, scale: Array | float) -> Array:
    """``log Z(k, scale)``: the log normaliser of ``exp(-||w|| / scale)`` on R^k."""
    scale = jnp.asarray(scale)
    return (
        jnp.log(2.0) + 0.5 * k * jnp.log(jnp.pi) + gammaln(float(k)) + k * jnp.log(scale) - gammaln(0.5 * k)
    )


def normal_log_normalizer(k: int, scale: Array | float) -> Array:
    """``log Z(k, scale)``: the log normaliser of ``exp(-||w||^2 / (2 scale^2))`` on R^k,
    ``(k / 2) log(2 pi scale^2)``."""
    return 0.5 * k * jnp.log(2.0 * jnp.pi * jnp.asarray(scale) ** 2)


def row_log_prior_at_zero(family: str, k: int, scale: float | None) -> float:
    """The log prior density of one row of ``k`` raw weights at zero, ``-log Z(k, scale)`` of the
    Normal or the group Laplace (0 under a flat prior, ``scale=None``): what each all-zero padding row
    adds to a log posterior."""
    if scale is None:
        return 0.0
    normalizer = group_laplace_log_normalizer if family == "l21" else normal_log_normalizer
    with jax.enable_x64(True):  # a host figure: float64 whatever the fit's dtype
        return -float(normalizer(k, np.float64(scale)))


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
    if family == "group_horseshoe":
        raise ValueError("the group horseshoe has latent scales: sample it with group_horseshoe_rows")
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


def horseshoe_global_scale(scale: float | Array, d: int) -> Array:
    """``tau0 = scale * p0 / (d - p0)`` with ``p0 = max(1, d / 10)`` (``d`` rows)."""
    p0 = max(1.0, d / 10.0)
    return jnp.asarray(scale) * p0 / max(d - p0, 1.0)


def _on_log_scale(d: dist.Distribution) -> dist.Distribution:
    """The density of ``log X`` for ``X ~ d`` (positive support): real support for every sampler."""
    return dist.TransformedDistribution(d, dist.transforms.ExpTransform().inv)


def horseshoe_weights(z: Array, log_tau: Array, log_lambda: Array, log_slab: Array) -> Array:
    """(..., d, k) ``W_raw = tau * lam~ * z`` from the non-centred sites (any leading draw axes)."""
    tau, lam, c2 = jnp.exp(log_tau), jnp.exp(log_lambda), jnp.exp(log_slab)
    tau = jnp.asarray(tau)[..., None]
    lam_t = jnp.sqrt(c2[..., None] * lam**2 / (c2[..., None] + tau**2 * lam**2))
    return z * (tau * lam_t)[..., None]


def group_horseshoe_rows(d: int, k: int, scale: Array | float) -> Array:
    """Sample the group horseshoe's sites (``HORSESHOE_SITES``) and return ``W_raw`` (d, k).

    Also records the deterministic ``tau`` and ``lam`` (d,) for summaries.
    """
    z = numpyro.sample("hs_z", dist.Normal(0.0, 1.0).expand((d, k)).to_event(2))
    log_tau = numpyro.sample("hs_log_tau", _on_log_scale(dist.HalfCauchy(horseshoe_global_scale(scale, d))))
    log_lambda = numpyro.sample("hs_log_lambda", _on_log_scale(dist.HalfCauchy(1.0)).expand((d,)).to_event(1))
    slab = dist.InverseGamma(SLAB_DF / 2, SLAB_DF / 2 * jnp.asarray(scale) ** 2)
    log_slab = numpyro.sample("hs_log_slab", _on_log_scale(slab))
    numpyro.deterministic("tau", jnp.exp(log_tau))
    numpyro.deterministic("lam", jnp.exp(log_lambda))
    return numpyro.deterministic("W_raw", horseshoe_weights(z, log_tau, log_lambda, log_slab))


def horseshoe_start(w_raw: np.ndarray, scale: float) -> dict[str, np.ndarray]:
    """Horseshoe sites that reproduce ``W_raw`` (d, k) (a MAP under the Normal prior, say): ``tau`` at
    ``tau0``, ``c`` at ``scale``, and each row's ``lam`` so that ``tau lam~`` is its rms entry (kept
    below the slab), ``z`` the rest. NUTS's start from a point estimate."""
    d, k = w_raw.shape
    tau = float(horseshoe_global_scale(scale, d))
    c2 = float(scale) ** 2
    r = np.clip(np.linalg.norm(w_raw, axis=1) / np.sqrt(k), 1e-3 * tau, 0.9 * float(scale))
    lam = np.sqrt(r**2 * c2 / (tau**2 * (c2 - r**2)))
    return {
        "hs_z": (w_raw / r[:, None]).astype(np.float32),
        "hs_log_tau": np.asarray(np.log(tau), np.float32),
        "hs_log_lambda": np.log(lam).astype(np.float32),
        "hs_log_slab": np.asarray(np.log(c2), np.float32),
    }
