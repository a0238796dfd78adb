"""The multi-instance mixture model's pieces: densities, prior, exact E-step and closed-form MAP M-step.

Model. Instance ``i`` has a hidden class ``y_i ~ Categorical(pi)`` and
features ``x_i | y_i = c ~ N(mu_c, Sigma_c)``, ``Sigma_c`` diagonal ("diag")
or full ("full"); a bag's label set is the union of its instances' classes.
Then::

    p(X_b, Y_b) = prod_i p(x_i) * p(Y_b | X_b),    p(x_i) = sum_c pi_c N(x_i | mu_c, Sigma_c),

and ``p(Y_b | X_b)`` is the ORed-logistic bag likelihood of the instance
logits ``l_ic = log pi_c + log N(x_i | mu_c, Sigma_c)``, whose softmax is the
class posterior ``p(y_i = c | x_i)``. The model's ``BagLabelSet`` (the exact
subset DP, bags bucketed by label-set size as ``make_model_data`` packs them,
so the cost is ``sum_b n_b |Y_b| 2**|Y_b|``) gives both ``p(Y_b | X_b)`` and
the E-step's responsibilities ``r_ic = p(y_i = c | X_b, Y_b)``.

Prior (``MixturePrior``; MAP, so that no class degenerates)::

    pi ~ Dirichlet(alpha, ..., alpha)
    full: Sigma_c ~ InvWishart(Psi0, nu0),           mu_c | Sigma_c ~ N(m0, Sigma_c / kappa0)
    diag: s_cj ~ InvGamma(nu0 / 2, psi0_j / 2),      mu_cj | s_cj ~ N(m0_j, s_cj / kappa0)

M-step: the complete-data log-likelihood is ``sum_ic r_ic (log pi_c + log
N(x_i | mu_c, Sigma_c))`` (the union's indicator has no parameter), so with
``N_c = sum_i r_ic`` the exact maximiser of it plus the log prior is::

    pi_c    = (N_c + alpha - 1) / (N + C (alpha - 1))
    mu_c    = (sum_i r_ic x_i + kappa0 m0) / (N_c + kappa0)
    Sigma_c = (Psi0 + sum_i r_ic (x_i - mu_c)(x_i - mu_c)^T + kappa0 (mu_c - m0)(mu_c - m0)^T)
              / (N_c + nu0 + d + 2)

(diag: the diagonal of the numerator with ``psi0``, over ``N_c + nu0 + 3``).
``mu_c`` maximises for every ``Sigma_c``, and ``Sigma_c`` then maximises, so
this is the joint maximiser and EM never lowers the log posterior ``sum_b
log p(X_b, Y_b | theta) + log p(theta)``. A class with no responsibility
(named by no label set) gets ``pi_c = (alpha - 1) / (N + C (alpha - 1))``,
``mu_c = m0`` and the prior's covariance mode.
"""

from __future__ import annotations

from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from jax.scipy.linalg import solve_triangular
from jax.scipy.special import gammaln, logsumexp, multigammaln, xlogy

from ...dp.packing import canonical_size
from ...model.distribution import BagLabelSet
from ...model.model_data import ModelData

Array = jax.Array
COVARIANCES = ("diag", "full")
LOG_2PI = float(np.log(2.0 * np.pi))
COVARIANCE_FLOOR = 1e-3
"""The prior's covariance is the data's plus this fraction of each feature's variance on its diagonal
(the mean variance for a constant feature). Features that are linear combinations of others (HJA
has two) leave the data's covariance singular; the floor bounds the condition number of its
correlation matrix by about ``d / 1e-3``, within reach of a float32 Cholesky."""


class MixtureParams(NamedTuple):
    """The mixture's parameters: ``weights`` (C,), ``means`` (C, d), ``covariances`` (C, d) or (C, d, d)."""

    weights: Array
    means: Array
    covariances: Array


class MixturePrior(NamedTuple):
    """The conjugate prior (see the module docstring); arrays, so that its values select no program.

    Attributes:
        concentration: () Dirichlet ``alpha`` (at least 1).
        mean: (d,) ``m0``.
        mean_precision: () ``kappa0 > 0``.
        dof: () ``nu0`` (full: above ``d - 1``; diag: above 0).
        scale: ``Psi0`` (d, d) for "full", ``psi0`` (d,) for "diag".
    """

    concentration: Array
    mean: Array
    mean_precision: Array
    dof: Array
    scale: Array


class MixtureShape(NamedTuple):
    """What a compiled program depends on besides array shapes (hashable, static).

    Attributes:
        max_labels: per bucket, its DP's label-slot count K.
        covariance: "diag" or "full".
    """

    max_labels: tuple[int, ...]
    covariance: str


class MixtureData(NamedTuple):
    """Bags for the MIMM (``mixture_data``): the real instances as rows, the DP's buckets as indices.

    Densities and the M-step run over the rows, the subset DP over the
    buckets, whose cells are half padding or more on HJA (as ``em``'s
    ``FlatRows`` does for ORLR's M-step).

    Attributes:
        features: (M, d) every real instance, bucket after bucket, then zero rows
            (M: a ``canonical_size``, 8 steps an octave, so folds share programs).
        cells: (M,) int32 each row's cell among the buckets' (B_k * N_k) cells laid
            end to end; rows past the real ones point one past the last cell.
        rows: per bucket (B_k, N_k) int32, the row each cell reads (any row on padding).
        masks: per bucket (B_k, N_k) bool, real instances.
        label_sets: per bucket (B_k, C) int32 multi-hot label sets.
    """

    features: Array
    cells: Array
    rows: tuple[Array, ...]
    masks: tuple[Array, ...]
    label_sets: tuple[Array, ...]


def mixture_data(data: ModelData) -> tuple[MixtureData, tuple[int, ...]]:
    """``MixtureData`` of bags packed by ``make_model_data`` (host arrays), and each bucket's K."""
    if any(b.label_sets is None for b in data.buckets):
        raise ValueError("the MIMM fits bags with label sets: make_model_data got none")
    masks = [np.asarray(b.mask) for b in data.buckets]
    offsets = np.cumsum([0] + [m.size for m in masks])
    cells = np.concatenate([off + np.flatnonzero(m.reshape(-1)) for off, m in zip(offsets, masks)])
    feats = np.concatenate([np.asarray(b.features)[m] for b, m in zip(data.buckets, masks)])
    position = np.zeros(offsets[-1], np.int32)
    position[cells] = np.arange(len(cells))
    rows = tuple(position[off : off + m.size].reshape(m.shape) for off, m in zip(offsets, masks))
    extra = canonical_size(len(cells), steps=8) - len(cells)
    out = MixtureData(
        np.pad(feats, ((0, extra), (0, 0))),
        np.pad(cells, (0, extra), constant_values=offsets[-1]).astype(np.int32),
        rows,
        tuple(masks),
        tuple(np.asarray(b.label_sets, np.int32) for b in data.buckets),
    )
    return out, tuple(int(b.max_labels) for b in data.buckets)


class MixtureEStep(NamedTuple):
    """The E-step at one parameter point.

    Attributes:
        log_likelihood: () ``sum_b log p(X_b, Y_b | theta)``.
        bag_log_likelihoods: per bucket (B_k,) ``log p(X_b, Y_b | theta)``, zero on padding bags.
        posteriors: per bucket (B_k, N_k, C) ``r_ic = p(y_i = c | X_b, Y_b, theta)``; zero off
            the label set and on padding.
        responsibilities: (M, C) the same per row of ``MixtureData.features`` (zero past the real ones).
        resolved: () whether the DP resolved every bag in probability space (always True
            with the fallback); where False, the other fields are inexact.
    """

    log_likelihood: Array
    bag_log_likelihoods: tuple[Array, ...]
    posteriors: tuple[Array, ...]
    responsibilities: Array
    resolved: Array


def component_log_densities(x: Array, params: MixtureParams, covariance: str) -> Array:
    """(..., C) ``log N(x | mu_c, Sigma_c)`` of (..., d) features; full covariances through Cholesky.

    Full: ``z_c = L_c^-1 (x - mu_c)`` is ``x L_c^-T - mu_c L_c^-T``, the first
    term for every class in one (n, d) x (d, C d) product (sklearn's way):
    batched per-class products ran several times slower on the CPU.
    """
    d = x.shape[-1]
    if covariance == "diag":
        var = params.covariances
        diff = x[..., None, :] - params.means  # (..., C, d)
        return -0.5 * (d * LOG_2PI + jnp.sum(jnp.log(var), -1) + jnp.sum(diff**2 / var, -1))
    n_classes = params.means.shape[0]
    chol = jnp.linalg.cholesky(params.covariances)  # (C, d, d)
    inv_chol = solve_triangular(chol, jnp.broadcast_to(jnp.eye(d, dtype=x.dtype), chol.shape), lower=True)
    project = jnp.transpose(inv_chol, (2, 0, 1)).reshape(d, n_classes * d)  # [e, (c, k)] = L_c^-1[k, e]
    z = (x @ project).reshape(x.shape[:-1] + (n_classes, d)) - jnp.einsum(
        "cke,ce->ck", inv_chol, params.means
    )
    log_det = 2.0 * jnp.sum(jnp.log(jnp.diagonal(chol, axis1=-2, axis2=-1)), -1)
    return -0.5 * (d * LOG_2PI + log_det + jnp.sum(z**2, -1))


def mixture_logits(x: Array, params: MixtureParams, covariance: str) -> Array:
    """(..., C) ``l_ic = log pi_c + log N(x_i | mu_c, Sigma_c)``: ``log p(x_i, y_i = c)``.

    ``logsumexp`` over classes is ``log p(x_i)`` and the softmax ``p(y_i = c | x_i)``.
    A zero weight (``alpha = 1``, a class no label set names) is floored at
    the float's ``tiny``, so that no logit is infinite.
    """
    tiny = jnp.finfo(x.dtype).tiny
    return jnp.log(jnp.maximum(params.weights, tiny)) + component_log_densities(x, params, covariance)


def e_step(
    params: MixtureParams, data: MixtureData, shape: MixtureShape, fallback: bool = True
) -> MixtureEStep:
    """``log p(X_b, Y_b)`` of every bag and the instances' posteriors, in one DP call (``BagLabelSet``).

    The logits are computed once per row and gathered into the buckets.
    ``fallback=False`` leaves the DP's log-space rerun out of the program (see
    ``MixtureEStep.resolved``).
    """
    logits = mixture_logits(data.features, params, shape.covariance)  # (M, C)
    log_px = logsumexp(logits, axis=-1)  # (M,) log p(x_i)
    sites, bag_px = [], []
    for rows, mask, sets, k in zip(data.rows, data.masks, data.label_sets, shape.max_labels):
        bag_px.append(jnp.sum(jnp.where(mask, log_px[rows], 0.0), axis=-1))
        sites.append((BagLabelSet(logits[rows], mask, max_labels=k, validate_args=False), sets))
    results, resolved = BagLabelSet.joint_posteriors(sites, fallback)
    bag_ll = tuple(px + r.log_likelihood for px, r in zip(bag_px, results))
    posteriors = tuple(r.posteriors for r in results)
    flat = [r.reshape(-1, logits.shape[1]) for r in posteriors] + [jnp.zeros_like(logits[:1])]
    total = sum(jnp.sum(b) for b in bag_ll)
    return MixtureEStep(total, bag_ll, posteriors, jnp.concatenate(flat)[data.cells], resolved)


def log_prior(params: MixtureParams, prior: MixturePrior, covariance: str) -> Array:
    """() ``log p(theta)``, normalised: Dirichlet on the weights, NIW (full) or NIG (diag) per class."""
    c, d = params.means.shape
    alpha, kappa, nu = prior.concentration, prior.mean_precision, prior.dof
    log_p = gammaln(c * alpha) - c * gammaln(alpha) + jnp.sum(xlogy(alpha - 1.0, params.weights))
    dev = params.means - prior.mean  # (C, d)
    if covariance == "diag":
        var, a, b = params.covariances, nu / 2.0, prior.scale / 2.0
        normal = -0.5 * (LOG_2PI - jnp.log(kappa) + jnp.log(var) + kappa * dev**2 / var)
        inv_gamma = a * jnp.log(b) - gammaln(a) - (a + 1.0) * jnp.log(var) - b / var
        return log_p + jnp.sum(normal + inv_gamma)
    chol = jnp.linalg.cholesky(params.covariances)
    eye = jnp.broadcast_to(jnp.eye(d, dtype=dev.dtype), chol.shape)
    inv_chol = solve_triangular(chol, eye, lower=True)
    precision = jnp.einsum("cki,ckj->cij", inv_chol, inv_chol)  # Sigma^-1 = L^-T L^-1
    log_det = 2.0 * jnp.sum(jnp.log(jnp.diagonal(chol, axis1=-2, axis2=-1)), -1)  # (C,)
    quad = jnp.einsum("ci,cij,cj->c", dev, precision, dev)
    normal = -0.5 * (d * (LOG_2PI - jnp.log(kappa)) + log_det + kappa * quad)
    _, log_det_psi = jnp.linalg.slogdet(prior.scale)
    inv_wishart = (
        0.5 * nu * log_det_psi
        - 0.5 * nu * d * jnp.log(2.0)
        - multigammaln(0.5 * nu, d)
        - 0.5 * (nu + d + 1.0) * log_det
        - 0.5 * jnp.einsum("ij,cij->c", prior.scale, precision)
    )
    return log_p + jnp.sum(normal + inv_wishart)


def log_posterior(
    params: MixtureParams, data: MixtureData, prior: MixturePrior, shape: MixtureShape
) -> Array:
    """() the MAP objective ``sum_b log p(X_b, Y_b | theta) + log p(theta)``."""
    return e_step(params, data, shape).log_likelihood + log_prior(params, prior, shape.covariance)


def m_step(resp: Array, features: Array, prior: MixturePrior, covariance: str) -> MixtureParams:
    """The closed-form MAP M-step (module docstring) from (M, C) responsibilities of (M, d) rows."""
    n_c = jnp.sum(resp, axis=0)  # (C,)
    kappa, nu, alpha = prior.mean_precision, prior.dof, prior.concentration
    means = (resp.T @ features + kappa * prior.mean) / (n_c + kappa)[:, None]
    dev = means - prior.mean  # (C, d)
    diff = features[:, None, :] - means  # (M, C, d)
    d = means.shape[1]
    if covariance == "diag":
        scatter = jnp.einsum("mc,mcd->cd", resp, diff**2)
        covs = (prior.scale + scatter + kappa * dev**2) / (n_c + nu + 3.0)[:, None]
    else:
        scatter = jnp.einsum("mcd,mce->cde", resp[..., None] * diff, diff)
        num = prior.scale + scatter + kappa * dev[:, :, None] * dev[:, None, :]
        covs = num / (n_c + nu + d + 2.0)[:, None, None]
        covs = 0.5 * (covs + jnp.swapaxes(covs, -1, -2))
    weights = (n_c + alpha - 1.0) / (jnp.sum(n_c) + n_c.shape[0] * (alpha - 1.0))
    return MixtureParams(weights, means, covs)


def start_posteriors(data: MixtureData, rng: np.random.Generator | None = None) -> np.ndarray:
    """(M, C) starting responsibilities, spread over each row's bag's label set (a host array).

    Without ``rng``, evenly: exactly the E-step of a mixture whose classes are
    all alike (one Gaussian, equal weights), which by the DP's symmetry gives
    every class of ``Y_b`` ``1 / |Y_b|``. With ``rng``, each instance's shares
    are a flat Dirichlet draw over its bag's set (a restart's random start).
    Zero past the real rows; in the features' dtype.
    """
    cells = []
    for mask, sets in zip(data.masks, data.label_sets):
        base = np.broadcast_to(np.asarray(sets, np.float64)[:, None, :], np.shape(mask) + sets.shape[-1:])
        cells.append(base.reshape(-1, sets.shape[-1]))
    base = np.concatenate(cells + [np.zeros((1, cells[0].shape[1]))])[np.asarray(data.cells)]
    if rng is not None:
        base = base * rng.exponential(size=base.shape)
    total = base.sum(axis=-1, keepdims=True)
    share = np.divide(base, total, out=np.zeros(base.shape), where=total > 0)
    return share.astype(np.asarray(data.features).dtype)


def make_prior(
    features: np.ndarray,
    covariance: str = "diag",
    concentration: float = 2.0,
    mean_precision: float = 0.01,
    covariance_prior: float = 0.1,
    dof: float | None = None,
    dtype: type = np.float32,
) -> MixturePrior:
    """The default prior, centred and scaled on the training instances (n, d), as host arrays.

    ``m0`` is the instances' mean (with ``kappa0 = mean_precision``), and the
    prior's mode of every class covariance (at ``mu_c = m0``) is
    ``covariance_prior`` times their covariance ``cov`` (its diagonal for
    "diag"; ``cov`` includes ``COVARIANCE_FLOOR``). The M-step pools each class's
    scatter with ``nu0 + d + 2`` ("full"; ``nu0 + 3`` "diag") pseudo-instances
    at that mode: ``Psi0 = (nu0 + d + 2) * covariance_prior * cov`` (full),
    ``psi0 = (nu0 + 3) * covariance_prior * diag(cov)`` (diag). ``dof`` (``nu0``)
    defaults to ``d + 2`` (full) and 3 (diag: the inverse Wishart's diagonal
    marginal has ``nu0 - d + 1 = 3`` at ``d + 2``). A class no label set names
    ends at this mode, centred at ``m0``, with weight ``(alpha - 1) / (N + C
    (alpha - 1))``.
    """
    if covariance not in COVARIANCES:
        raise ValueError(f"covariance={covariance!r}: choose one of {COVARIANCES}")
    x = np.asarray(features, np.float64)
    d = x.shape[1]
    nu = (d + 2.0 if covariance == "full" else 3.0) if dof is None else float(dof)
    lowest = d - 1.0 if covariance == "full" else 0.0
    checks = {
        "weight_concentration": (concentration >= 1.0, "at least 1 (1: no prior on the weights)"),
        "mean_precision": (mean_precision > 0.0, "positive"),
        "covariance_prior": (covariance_prior > 0.0, "positive"),
        "degrees_of_freedom": (nu > lowest, f"above {lowest:g} for covariance={covariance!r}"),
    }
    for name, (ok, want) in checks.items():
        if not ok:
            raise ValueError(f"{name} must be {want}: the prior would be improper or degenerate")
    cov = np.atleast_2d(np.cov(x, rowvar=False, bias=True)) if len(x) > 1 else np.zeros((d, d))
    var = np.diag(cov)
    positive = var[var > 0]
    # Each feature's own floor, so that rescaling a feature rescales its prior alike.
    floor = np.where(var > 0, var, positive.mean() if positive.size else 1.0)
    cov = cov + COVARIANCE_FLOOR * np.diag(floor)
    if covariance == "full":
        scale = (nu + d + 2.0) * covariance_prior * cov
    else:
        scale = (nu + 3.0) * covariance_prior * np.diag(cov)
    values = (concentration, x.mean(0), mean_precision, nu, scale)
    return MixturePrior(*(np.asarray(a, dtype) for a in values))
