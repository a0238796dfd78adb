"""The five inference methods' settings: one small frozen object each, and the one place their defaults live.

An estimator takes one of them (``ORLR(inference=NUTS(num_chains=2))``, or its
name for the defaults, ``ORLR(inference="nuts")``), as NumPyro keeps a kernel's
settings (``NUTS``) apart from the driver (``MCMC``). The functions of this
layer (``em.fit_em``, ``map.fit_map``, ``laplace.fit_laplace``, ``nuts.fit_nuts``,
``svi.fit_svi``) take their defaults from the same fields, so a default is written once.

- ``MAP`` and ``EM`` give point estimates of one objective, the log posterior:
  MAP by L-BFGS (the default: it reaches an optimum first), EM by the published
  generalised EM (an exact E-step by the DP, gradient steps for the M-step). Both
  run in float64 and have converged when the log posterior's gradient vanishes
  (``optimality``). The objective can have several optima, and the two may stop
  at different ones from the same start (the guide's "Several optima").
- ``Laplace``, ``NUTS`` and ``SVI`` give the full posterior: the Laplace
  approximation is the Gaussian at the MAP with the exact Hessian (a MAP's cost,
  about); NUTS samples it (the reference, checked by R-hat and ESS); SVI fits a
  Gaussian by stochastic optimisation (minibatched). The two Gaussians are
  checked by the Pareto k-hat of their draws' importance ratios.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass, fields
from typing import TYPE_CHECKING, Any, ClassVar, NamedTuple

import numpy as np

if TYPE_CHECKING:
    from ..model.model_data import ModelData

TARGET_ACCEPT = 0.8
"""NUTS's target acceptance of warmup's step size, unless ``NUTS(target_accept=...)`` is set."""
HORSESHOE_TARGET_ACCEPT = 0.98
"""NUTS's target acceptance under the group horseshoe prior, unless ``NUTS(target_accept=...)`` is set."""


def _positive_int(owner: str, name: str, value: Any, minimum: int = 1) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise ValueError(f"{owner}({name}={value!r}): give an integer >= {minimum}")


class PointFit(NamedTuple):
    """An EM or MAP point estimate (``EM.fit``, ``MAP.fit``).

    Attributes:
        coef: (d, C) weights. intercept: (C,) intercepts.
        log_posterior: the final log posterior. n_iter: iterations run.
        converged: the first-order condition holds (``optimality <= tol``).
        history: EM: (n_iter + 1,) log posterior per iteration; MAP: None.
        leak: the learnt leak probability (``leak="learn"``), else None.
        optimality: the first-order residual at the estimate (``point.optimality``).
    """

    coef: np.ndarray
    intercept: np.ndarray
    log_posterior: float
    n_iter: int
    converged: bool
    history: np.ndarray | None
    leak: float | None = None
    optimality: float = float("nan")


class PosteriorFit(NamedTuple):
    """A Laplace, NUTS or SVI posterior (``Laplace.fit``, ``NUTS.fit``, ``SVI.fit``).

    Attributes:
        posterior: the draws (``posterior.arviz_compat.Posterior``).
        losses: SVI: (num_steps,) the loss (negative ELBO) per step; else None.
        gaussian: Laplace: the approximation (``posterior.laplace.Gaussian``: its MAP,
            Hessian and evidence); else None.
    """

    posterior: Any
    losses: np.ndarray | None
    gaussian: Any = None


class _Settings:
    """Shared by the settings classes: ``fit``, and a repr of the fields that differ from their defaults.

    ``posterior`` (a class attribute): the method gives the full posterior (``posterior_``,
    draws), not a point estimate. ``sampler``: it draws by simulation, evaluating the gradient
    thousands of times (NUTS, SVI), so it runs in float32 on tightly packed bags. ``runner``:
    ``"module:function"``, the function that fits with these settings, named rather than
    imported because its module takes its defaults from here.
    """

    posterior: ClassVar[bool] = False
    sampler: ClassVar[bool] = False
    runner: ClassVar[str]

    @property
    def stochastic(self) -> bool:
        """Whether each iteration sees a random subset of the bags (stochastic EM)."""
        return False

    def fit(
        self,
        data: ModelData,
        prior_scale: float | None,
        intercept_scale: float | None,
        fit_intercept: bool,
        seed: int = 0,
    ) -> PointFit | PosteriorFit:
        """Fit ``orlr_model`` to ``data`` (``make_model_data``) under its priors with these settings.

        Returns a ``PointFit`` (EM, MAP) or a ``PosteriorFit`` (Laplace, NUTS, SVI). The
        settings object is the method and its module the driver, as NumPyro's ``NUTS`` kernel
        beside ``MCMC``; ``seed`` draws stochastic EM's subsets, the chains' and SVI's randomness,
        and the Laplace draws.
        """
        module, name = self.runner.split(":")
        run = getattr(importlib.import_module(module), name)
        return run(self, data, prior_scale, intercept_scale, fit_intercept, seed)

    def __repr__(self) -> str:
        changed = [
            f"{f.name}={getattr(self, f.name)!r}" for f in fields(self) if getattr(self, f.name) != f.default
        ]
        return f"{type(self).__name__}({', '.join(changed)})"


@dataclass(frozen=True, repr=False)
class EM(_Settings):
    """Generalised EM: the exact E-step (the DP's instance posteriors), then gradient M-steps.

    Args:
        max_iter: EM iterations at most. EM converges linearly, at the rate of the
            information the bag labels leave missing: on the MIML digits it
            meets ``tol`` in tens of iterations, on HJA birdsong not in
            thousands (use ``MAP`` there); the paper's budget was 50.
        tol: converged when the log posterior's gradient is at most this in every
            component (the first-order condition, ``optimality``); 0 runs ``max_iter``.
        m_steps: gradient-ascent steps (Armijo line search) per M-step. The
            paper's generalised EM takes 1; more move each M-step closer to its
            maximum, so fewer, dearer iterations reach ``tol``.
        bag_fraction: below 1, stochastic EM (the paper's 6.6.1): each
            iteration's E- and M-step use this fraction of the bags, drawn
            afresh in every label-set bucket and weighted to an unbiased
            estimate; it runs ``max_iter`` iterations with no stopping test,
            for data too large for full iterations.
    """

    max_iter: int = 200
    tol: float = 1e-3
    m_steps: int = 10
    bag_fraction: float = 1.0
    name: ClassVar[str] = "em"
    runner: ClassVar[str] = "orlr_ppl.inference.point.em:run"

    def __post_init__(self) -> None:
        _check_optimiser("EM", self.max_iter, self.tol)
        _positive_int("EM", "m_steps", self.m_steps)
        if not 0.0 < float(self.bag_fraction) <= 1.0:
            raise ValueError(
                f"EM(bag_fraction={self.bag_fraction!r}): give the fraction of bags per iteration, in (0, 1]"
            )

    @property
    def stochastic(self) -> bool:
        """Stochastic EM: a fresh subset of the bags each iteration."""
        return float(self.bag_fraction) < 1.0


@dataclass(frozen=True, repr=False)
class MAP(_Settings):
    """The posterior mode by L-BFGS on the log posterior (EM's objective), in float64.

    Args:
        max_iter: L-BFGS iterations at most; it takes more, cheaper steps than EM.
        tol: converged when the log posterior's gradient is at most this in every
            component (the first-order condition, ``optimality``; under the l2,1
            prior, FISTA's gradient mapping); 0 runs ``max_iter``.
    """

    max_iter: int = 1000
    tol: float = 1e-3
    name: ClassVar[str] = "map"
    runner: ClassVar[str] = "orlr_ppl.inference.point.map:run"

    def __post_init__(self) -> None:
        _check_optimiser("MAP", self.max_iter, self.tol)


def _check_optimiser(owner: str, max_iter: Any, tol: Any) -> None:
    _positive_int(owner, "max_iter", max_iter)
    if not float(tol) >= 0:
        raise ValueError(f"{owner}(tol={tol!r}): give a gradient tolerance >= 0 (0: run max_iter)")


@dataclass(frozen=True, repr=False)
class Laplace(_Settings):
    """The Laplace approximation: a Gaussian at the MAP whose precision is the exact Hessian there.

    The mean is the MAP (``MAP``'s L-BFGS, in float64), the covariance the inverse of
    the Hessian of the negative log posterior at it, computed exactly from the DP's
    pairwise instance posteriors (``inference.posterior.laplace``). The Hessian costs less than
    the MAP fit, the draws with their log densities a few MAP fits more. It gives
    everything a posterior gives (``posterior_``, intervals, mutual information,
    ``query(strategy="bald")``, PSIS-LOO) and its evidence chooses the prior's scale
    (``prior_scale="evidence"``). It is one Gaussian around one mode: its draws'
    Pareto k-hat (``diagnostics()``) says where the posterior is far from it.

    Args:
        num_draws: independent draws from the Gaussian, the posterior's samples.
        max_iter, tol: the MAP's (``MAP``).
    """

    num_draws: int = 1000
    max_iter: int = MAP.max_iter
    tol: float = MAP.tol
    name: ClassVar[str] = "laplace"
    runner: ClassVar[str] = "orlr_ppl.inference.posterior.laplace:run"
    posterior: ClassVar[bool] = True

    def __post_init__(self) -> None:
        _positive_int("Laplace", "num_draws", self.num_draws)
        _check_optimiser("Laplace", self.max_iter, self.tol)


@dataclass(frozen=True, repr=False)
class NUTS(_Settings):
    """The full posterior by the No-U-Turn Sampler (NumPyro's kernel, the package's compiled driver).

    Args:
        num_warmup: warmup iterations per chain (step size and mass matrix adaptation).
        num_samples: draws kept per chain.
        num_chains: chains, started apart (the MAP jittered per chain) so that
            R-hat means something; they run in parallel, over the CPU's cores
            (threads) or one device each (``inference.posterior.nuts``), and
            the diagnostics say how.
        max_num_samples: chains that fail the R-hat or ESS check after
            ``num_samples`` draws go on, a quarter of ``num_samples`` at a
            time, up to this many draws per chain; None: twice ``num_samples``;
            at most ``num_samples``: never (for a fixed cost, as in a benchmark).
        target_accept: the step-size adaptation's target acceptance, in
            (0, 1); None: 0.98 under the group horseshoe prior (whose narrow
            neck diverges at larger steps), 0.8 otherwise. Higher means smaller
            steps: fewer divergences at a higher cost per draw.
        dense_mass: adapt a dense mass matrix (every parameter's covariance)
            instead of a diagonal one, for strongly correlated weights; it needs
            a warmup of several hundred iterations.
        whiten: move in coordinates whitened by the Laplace approximation at
            the start (the MAP's Hessian), adapting a diagonal metric on top,
            for correlated weights. "auto" (the default) decides from the data:
            it whitens when the complete-data curvature at the start, scaled to
            unit diagonal, has a condition number above
            ``chain_setup.WHITEN_CONDITION`` (1,000): correlations a diagonal
            metric cannot undo, such as HJA birdsong's tied features; deciding
            costs a few matrix products.
            True always whitens, False never (a fixed geometry, as in a
            benchmark). A whitening costs a Hessian (P Hessian-vector products)
            and an eigendecomposition first. "auto" never whitens with
            ``dense_mass``, nor under the l2,1 or horseshoe priors, whose kink or
            funnel shapes the posterior more than the features do (whitening
            diverged there).
        init: where chains start: "map" (the MAP under the same prior,
            jittered per chain) or "zeros" (zero weights, jittered).
        progress_bar: a bar on stderr ("compiling", then "warmup" and "sampling").
    """

    num_warmup: int = 300
    num_samples: int = 1000
    num_chains: int = 4
    max_num_samples: int | None = None
    target_accept: float | None = None
    dense_mass: bool = False
    whiten: bool | str = "auto"
    init: str = "map"
    progress_bar: bool = True
    name: ClassVar[str] = "nuts"
    sampler: ClassVar[bool] = True
    runner: ClassVar[str] = "orlr_ppl.inference.posterior.nuts:run"
    posterior: ClassVar[bool] = True

    def __post_init__(self) -> None:
        _positive_int("NUTS", "num_warmup", self.num_warmup, minimum=0)
        _positive_int("NUTS", "num_samples", self.num_samples)
        _positive_int("NUTS", "num_chains", self.num_chains)
        if self.max_num_samples is not None:
            _positive_int("NUTS", "max_num_samples", self.max_num_samples, minimum=0)
        if self.target_accept is not None and not 0.0 < float(self.target_accept) < 1.0:
            raise ValueError(
                f"NUTS(target_accept={self.target_accept!r}): give a probability strictly between 0 and 1, "
                "or None"
            )
        if self.init not in ("map", "zeros"):
            raise ValueError(f"NUTS(init={self.init!r}): choose 'map' or 'zeros'")
        if not (isinstance(self.whiten, bool) or self.whiten == "auto"):
            raise ValueError(f"NUTS(whiten={self.whiten!r}): choose 'auto', True or False")

    def draw_budget(self) -> int:
        """Draws per chain at most: ``max_num_samples``, or twice ``num_samples`` when None."""
        return 2 * self.num_samples if self.max_num_samples is None else int(self.max_num_samples)

    def acceptance(self, weight_prior: str) -> float:
        """The target acceptance probability under the prior family ``weight_prior``."""
        if self.target_accept is not None:
            return float(self.target_accept)
        # The horseshoe's narrow neck near zero needs smaller steps than NUTS's default 0.8
        # gives (divergences on a 7-row test problem); Piironen & Vehtari sample it at 0.95-0.99.
        return HORSESHOE_TARGET_ACCEPT if weight_prior == "group_horseshoe" else TARGET_ACCEPT


@dataclass(frozen=True, repr=False)
class SVI(_Settings):
    """A Gaussian approximation of the posterior by stochastic variational inference (Adam on the ELBO).

    Args:
        guide: "normal" (mean-field: independent Normals) or "lowrank" (a
            Normal whose covariance is low rank plus diagonal, for correlated weights).
        num_steps: optimisation steps.
        learning_rate: Adam's step size.
        subsample_size: bags per minibatch; None: every bag at every step.
            Minibatches make each step's cost independent of the bag count.
        num_draws: draws taken from the fitted guide (the posterior's samples).
        init: where the guide's means start: "map" (the MAP under the same prior, as
            NUTS's chains start; the guide then mostly has its scales to learn, so a
            refit in a loop, such as an annotation round's, needs far fewer steps) or
            "zeros" (zero weights, no MAP fit first).
        progress_bar: a bar on stderr over the steps.
    """

    guide: str = "normal"
    num_steps: int = 3000
    learning_rate: float = 0.01
    subsample_size: int | None = None
    num_draws: int = 1000
    init: str = "map"
    progress_bar: bool = True
    name: ClassVar[str] = "svi"
    sampler: ClassVar[bool] = True
    runner: ClassVar[str] = "orlr_ppl.inference.posterior.svi:run"
    posterior: ClassVar[bool] = True

    def __post_init__(self) -> None:
        if self.guide not in ("normal", "lowrank"):
            raise ValueError(f"SVI(guide={self.guide!r}): choose 'normal' or 'lowrank'")
        _positive_int("SVI", "num_steps", self.num_steps)
        _positive_int("SVI", "num_draws", self.num_draws)
        if self.subsample_size is not None:
            _positive_int("SVI", "subsample_size", self.subsample_size)
        if not float(self.learning_rate) > 0:
            raise ValueError(f"SVI(learning_rate={self.learning_rate!r}): give a positive step size")
        if self.init not in ("map", "zeros"):
            raise ValueError(f"SVI(init={self.init!r}): choose 'map' or 'zeros'")


Inference = EM | MAP | Laplace | NUTS | SVI
METHODS: dict[str, type[Inference]] = {"map": MAP, "em": EM, "laplace": Laplace, "nuts": NUTS, "svi": SVI}
"""Each method's name and its settings class: ``ORLR(inference="nuts")`` is ``ORLR(inference=NUTS())``."""


def resolve(inference: str | Inference) -> Inference:
    """The settings object for ``inference``: the object itself, or the named method's defaults."""
    if isinstance(inference, _Settings):
        return inference  # type: ignore[return-value]
    if isinstance(inference, str) and inference in METHODS:
        return METHODS[inference]()
    raise ValueError(
        f"inference={inference!r}: give one of {tuple(METHODS)}, or a settings object such as "
        "EM(max_iter=50) or NUTS(num_chains=2) (from orlr_ppl import EM, MAP, Laplace, NUTS, SVI)"
    )


def to_json(inference: str | Inference) -> str | dict[str, Any]:
    """``inference`` as JSON: a name stays a name; an object is ``{"method": name, **its fields}``."""
    if isinstance(inference, str):
        return inference
    return {"method": inference.name, **{f.name: getattr(inference, f.name) for f in fields(inference)}}


def from_json(value: Any, where: str) -> str | Inference:
    """The inverse of ``to_json``; a ValueError naming ``where`` for anything else."""
    if isinstance(value, str | _Settings):
        return value  # type: ignore[return-value]
    if isinstance(value, dict) and value.get("method") in METHODS:
        settings = {k: v for k, v in value.items() if k != "method"}
        try:
            return METHODS[value["method"]](**settings)
        except (TypeError, ValueError) as err:
            raise ValueError(f"{where}: its inference settings {value!r} are invalid: {err}") from err
    raise ValueError(f"{where}: 'inference' is {value!r}, expected a method name or its settings")
