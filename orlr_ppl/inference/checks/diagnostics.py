"""Can the posterior be trusted? Convergence checks for NUTS, SVI and Laplace fits, and EM/MAP stopping.

The checks and their thresholds (module constants):

* split R-hat (rank-normalised, Vehtari et al. 2021) ``<= RHAT_MAX`` (1.01)
  for every scalar of the interpretable parameters ``W`` (d, C), ``beta``
  (C,) and any other latent site in the posterior (``W_raw``/``beta_raw``
  are rotations of ``W``/``beta`` and left out);
* bulk and tail effective sample size ``>= ESS_MIN`` (400, over all chains);
* no divergent transitions (``MAX_DIVERGENT`` = 0);
* no transition at the maximum tree depth (the trajectory was cut short);
* E-BFMI ``>= BFMI_MIN`` (0.3) in every chain: Betancourt's energy Bayesian
  fraction of missing information ``sum_t (E_t - E_{t-1})^2 / sum_t (E_t - mean E)^2``;
  below it, momentum resampling explores the energy levels poorly;
* PSIS-LOO Pareto ``k_hat <= PARETO_K_MAX`` (0.7) for every bag;
* for an approximation q (SVI's guide, the Laplace Gaussian), whose draws keep
  ``lp = log p(theta, Y)`` and ``log_q``: the Pareto k-hat of the importance
  ratios ``lp - log_q`` over all draws ``<= PARETO_K_MAX`` (Yao et al. 2018,
  "Yes, but did it work?"): above it q is too far from the posterior for its
  draws, or their reweighting, to stand for the posterior's.

The first five are MCMC checks and apply to NUTS only. An SVI or Laplace
posterior is one "chain" of independent draws from q, for which R-hat and ESS
say nothing about the fit, so only the two k-hat checks apply to it. A
parameter that is exactly constant over all draws (``beta`` when
``fit_intercept=False``) has no defined R-hat and is not flagged.

``diagnose(idata)`` runs every check and returns a ``Diagnostics``;
``warn_if_unconverged`` issues one ``ConvergenceWarning``: a short paragraph of what failed and what
to try next (``warning_message``); ``Diagnostics.problems`` keeps every check in full.
EM and MAP fits report ``PointDiagnostics`` (``optimizer_diagnostics``): whether the optimiser
met its tolerance.

The module reads in four parts: the EM/MAP stopping report; the per-scalar tables
(``convergence_table``, ``chain_means``, ``divergent_draw_ranks``, which share their row labels
``W[x-box, j]``, ``beta[j]``, ... so a row of one is found in the others); what the divergence
sentence adds (where the divergent draws sit, what to try next); and the checks themselves.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any, NamedTuple

import numpy as np
import pandas as pd
import xarray as xr

from ..posterior import arviz_compat as azc
from ..posterior.inference_data import RAW_SITES, with_names

RHAT_MAX = 1.01
"""Largest acceptable split R-hat."""
ESS_MIN = 400
"""Smallest acceptable bulk and tail ESS (all chains together)."""
MAX_DIVERGENT = 0
"""Divergent transitions tolerated after warmup."""
BFMI_MIN = 0.3
"""Smallest acceptable E-BFMI per chain."""
PARETO_K_MAX = 0.7
"""Largest acceptable PSIS-LOO Pareto k-hat per bag."""
N_WORST = 5
"""Parameters (or bags) named in a problem sentence, worst first."""
SHORT_RUN = 1000
"""Draws a chain below which slow mixing is first met with more draws (the default ``num_samples``)."""


class ConvergenceWarning(UserWarning):
    """A fit ran but its result should not be trusted yet (sampler or optimiser did not converge)."""


def mixing_converged(draws: dict[str, np.ndarray]) -> bool:
    """Whether (chain, draw, ...) draws of ``W`` and ``beta`` pass the R-hat and bulk/tail ESS checks.

    The checks of ``convergence_problems`` that more draws of the same chains
    can fix (``NUTS(max_num_samples=...)`` uses it to decide whether to go
    on), on the same table. Parameters constant over all draws are exempt;
    with one chain, R-hat is not checked.
    """
    posterior = {k: np.asarray(v) for k, v in draws.items() if k in INTERPRETABLE}
    with quiet_arviz():
        table = convergence_table(azc.from_dict({"posterior": posterior}))
    failures = _mixing_failures(table)
    if next(iter(posterior.values())).shape[0] < 2:
        failures.pop("r_hat")
    return not any(len(bad) for bad in failures.values())


def _stat(stats: xr.Dataset | None, name: str) -> np.ndarray | None:
    return np.asarray(stats[name]) if stats is not None and name in stats else None


def _loo_summary(idata: azc.Posterior) -> dict[str, Any]:
    """Share of bags with Pareto k-hat above ``PARETO_K_MAX`` (None without a log-likelihood).

    ``loo_error``: why ArviZ could not compute the k-hats (None when it could); a check that could
    not run is a problem (``convergence_problems``), never a pass.
    """
    empty = {
        "n_bags": None,
        "n_high_pareto_k": None,
        "loo_high_k_share": None,
        "worst_pareto_k": None,
        "loo_error": None,
    }
    if "log_likelihood" not in azc.groups(idata):
        return empty
    with quiet_arviz():  # ArviZ warns about high k-hat itself; we report it as a problem instead
        try:
            k = azc.pareto_k(idata)
        except (TypeError, ValueError) as err:
            return {**empty, "loo_error": f"{type(err).__name__}: {err}"}
    values = np.asarray(k).ravel()
    labels = [str(b) for b in np.asarray(k[k.dims[0]])] if k.ndim == 1 else [str(i) for i in range(k.size)]
    order = np.argsort(-np.nan_to_num(values, nan=np.inf), kind="stable")[:N_WORST]
    n_high = int(np.sum(~(values <= PARETO_K_MAX)))  # NaN counts as high
    return {
        "n_bags": int(values.size),
        "n_high_pareto_k": n_high,
        "loo_high_k_share": n_high / max(values.size, 1),
        "worst_pareto_k": [(labels[i], float(values[i])) for i in order],
        "loo_error": None,
    }


def sampler_summary(idata: azc.Posterior) -> dict[str, Any]:
    """Sampler statistics of a fit; any statistic the posterior lacks is None.

    Returns a dict with ``n_chains``, ``n_draws`` (per chain), ``n_draws_planned``
    (fewer than ``n_draws`` when unconverged chains went on); ``interrupted``
    (Ctrl-C stopped the sampling: the draws are those done by then); ``mcmc`` (True
    when there is a ``sample_stats`` group, i.e. NUTS; an SVI posterior has
    none); ``n_divergent`` and ``n_divergent_per_chain`` (a list);
    ``max_tree_depth`` (``sample_stats.attrs``),
    ``n_at_max_treedepth``, ``mean_tree_depth``, ``mean_n_steps`` (leapfrog
    steps per transition); ``target_accept_prob`` (``sample_stats.attrs``);
    ``step_size`` and ``bfmi`` (E-BFMI) as lists, one value per chain;
    ``mean_acceptance_rate``; ``chain_method`` (how the chains ran, ``RAN``; ``sample_stats.attrs``);
    and from PSIS-LOO ``n_bags``,
    ``n_high_pareto_k`` (bags with k-hat > ``PARETO_K_MAX``),
    ``loo_high_k_share`` (their share), ``worst_pareto_k`` (up to
    ``N_WORST`` (bag, k-hat) pairs, largest first) and ``loo_error`` (why
    the k-hats could not be computed; None when they were).
    """
    post = idata.posterior
    stats = azc.group(idata, "sample_stats")
    out: dict[str, Any] = {
        "n_chains": int(post.sizes["chain"]),
        "n_draws": int(post.sizes["draw"]),
        "mcmc": stats is not None and "diverging" in stats,  # SVI has lp and log_q only
    }
    diverging = _stat(stats, "diverging")
    out["n_divergent"] = None if diverging is None else int(np.sum(diverging))
    per_chain = None if diverging is None else diverging.reshape(diverging.shape[0], -1).sum(1)
    out["n_divergent_per_chain"] = None if per_chain is None else [int(v) for v in per_chain]
    planned = None if stats is None else stats.attrs.get("num_samples_planned")
    out["n_draws_planned"] = None if planned is None else int(planned)
    out["interrupted"] = stats is not None and bool(stats.attrs.get("interrupted", 0))
    method = None if stats is None else stats.attrs.get("chain_method")
    out["chain_method"] = None if method is None else str(method)
    depth = _stat(stats, "tree_depth")
    max_depth = None if stats is None else stats.attrs.get("max_tree_depth")
    out["max_tree_depth"] = None if max_depth is None else int(max_depth)
    at_max = None if depth is None or max_depth is None else int(np.sum(depth >= int(max_depth)))
    out["n_at_max_treedepth"] = at_max
    out["mean_tree_depth"] = None if depth is None else float(np.mean(depth))
    n_steps = _stat(stats, "n_steps")
    out["mean_n_steps"] = None if n_steps is None else float(np.mean(n_steps))
    target = None if stats is None else stats.attrs.get("target_accept_prob")
    out["target_accept_prob"] = None if target is None else float(target)
    step = _stat(stats, "step_size")
    out["step_size"] = None if step is None else [float(v) for v in step.reshape(step.shape[0], -1).mean(1)]
    accept = _stat(stats, "acceptance_rate")
    out["mean_acceptance_rate"] = None if accept is None else float(np.mean(accept))
    out["bfmi"] = None
    if _stat(stats, "energy") is not None and post.sizes["draw"] > 1:
        out["bfmi"] = [float(v) for v in azc.bfmi(idata)]
    out.update(_loo_summary(idata))
    out["approximation"] = (
        None
        if out["mcmc"]
        else APPROXIMATIONS.get(
            str((stats.attrs if stats is not None else {}).get("inference", "svi")), "SVI"
        )
    )
    out["approximation_k"] = _approximation_k(stats)
    return out


FAR_K = 1.0
"""Above this importance-ratio k̂ an SVI guide is far from the posterior (the ratios' variance is
infinite): no Gaussian guide met the check on the README's example or the demo (BENCHMARKS.md), so
the warning sends the user to NUTS rather than to a longer fit."""
RAN = {
    "parallel": "in parallel (one device each)",
    "threads": "in parallel (one thread each)",
    "vectorized": "vectorized (one program, all chains in step)",
    "sequential": "one after another",
}
"""How NUTS's chains ran (``sample_stats.attrs["chain_method"]``), as the summary says it."""
APPROXIMATIONS = {"svi": "SVI", "laplace": "Laplace"}
"""The approximate posteriors' names by ``sample_stats.attrs["inference"]`` (absent: SVI, saved before it)."""


def _approximation_k(stats: xr.Dataset | None) -> float | None:
    """Pareto k-hat of the draws' importance ratios ``lp - log_q`` (None without both)."""
    if stats is None or "lp" not in stats or "log_q" not in stats:
        return None
    ratios = np.asarray(stats["lp"], np.float64) - np.asarray(stats["log_q"], np.float64)
    if not np.all(np.isfinite(ratios)):
        return float("inf")
    with quiet_arviz():
        return azc.importance_k(ratios)


def _worst(values: pd.Series, largest: bool, fmt: str) -> str:
    """``"W[0, 1] 1.08, beta[2] 1.05, …"``: up to ``N_WORST`` entries, worst first (NaN worst)."""
    key = values.fillna(np.inf if largest else -np.inf)
    order = key.sort_values(ascending=not largest, kind="stable").index[:N_WORST]
    parts = [f"{name} {values[name]:{fmt}}" for name in order]
    return ", ".join(parts) + (", …" if len(values) > N_WORST else "")


def _spread(bad: pd.Series, table: pd.DataFrame, means: pd.DataFrame | None) -> str:
    """``"; chain means of W[0, 1]: 0.15, 1.02 against a posterior sd of 0.62"`` for the worst R-hat."""
    if means is None:
        return ""
    name = bad.fillna(np.inf).idxmax()
    values = ", ".join(f"{v:.3g}" for v in means.loc[name])
    return f"; chain means of {name}: {values} against a posterior sd of {table.loc[name, 'sd']:.3g}"


def _mixing_failures(table: pd.DataFrame) -> dict[str, pd.Series]:
    """Per column (``r_hat``, ``ess_bulk``, ``ess_tail``), the varying parameters that fail it."""
    varies = table["sd"] > 0
    return {
        "r_hat": table.loc[varies & ~(table["r_hat"] <= RHAT_MAX), "r_hat"],
        **{c: table.loc[varies & ~(table[c] >= ESS_MIN), c] for c in ("ess_bulk", "ess_tail")},
    }


def convergence_problems(
    table: pd.DataFrame | None,
    stats: dict[str, Any],
    means: pd.DataFrame | None = None,
    divergence_ranks: pd.DataFrame | None = None,
) -> list[str]:
    """One sentence per failed check, naming the worst parameters (or bags), worst first.

    Args:
        table: from ``convergence_table`` (None skips the per-parameter checks).
        stats: from ``sampler_summary``; when ``stats["mcmc"]`` is False (SVI)
            only the PSIS-LOO check applies.
        means: from ``chain_means`` (optional): the R-hat sentence then gives
            the worst parameter's mean in each chain beside its posterior sd.
        divergence_ranks: from ``divergent_draw_ranks`` (optional): the
            divergence sentence then names the parameters at whose low or high
            values the divergent draws cluster.
    Returns:
        E.g. ``["R-hat above 1.01 for 12 parameters (worst: W[x-box, j] 1.08, …; chain means of
        W[x-box, j]: 0.15, 1.02, 0.98, 1.91 against a posterior sd of 0.62)"]``;
        empty when every check passes.
    """
    problems = []
    mcmc = stats.get("mcmc", True)
    if stats.get("interrupted"):
        problems.append(
            f"sampling was interrupted (Ctrl-C) after {stats['n_draws']} of the "
            f"{stats.get('n_draws_planned')} planned draws a chain"
        )
    if mcmc and table is not None and len(table):
        failures = _mixing_failures(table)
        bad = failures["r_hat"]
        if not (table["sd"] > 0).any():
            # Constant parameters are exempt below, so a sampler that never moved would pass silently.
            problems.append("every parameter is constant over all draws: the sampler never moved")
        elif stats.get("n_chains", 2) < 2:
            problems.append(
                "R-hat needs at least 2 chains to check that they agree, and this fit has 1: "
                "set NUTS(num_chains=2) or more"
            )
        elif len(bad):
            problems.append(
                f"R-hat above {RHAT_MAX} for {count_noun(len(bad), 'parameter')} "
                f"(worst: {_worst(bad, largest=True, fmt='.3f')}{_spread(bad, table, means)})"
            )
        for column, label in (("ess_bulk", "bulk"), ("ess_tail", "tail")):
            bad = failures[column]
            if len(bad):
                problems.append(
                    f"{label} ESS below {ESS_MIN} for {count_noun(len(bad), 'parameter')} "
                    f"(worst: {_worst(bad, largest=False, fmt='.0f')})"
                )
    total = stats.get("n_chains", 0) * stats.get("n_draws", 0)
    n_div = stats.get("n_divergent")
    if mcmc and n_div is not None and n_div > MAX_DIVERGENT:
        problems.append(
            f"{count_noun(n_div, 'divergent transition')} "
            f"({100 * n_div / max(total, 1):.1f}% of {total} draws): "
            "the sampler missed regions of high curvature, so the draws may be biased"
            + divergence_places(stats, divergence_ranks)
            + divergence_remedy(stats.get("target_accept_prob"))
        )
    at_max = stats.get("n_at_max_treedepth")
    if mcmc and at_max:
        problems.append(
            f"{count_noun(at_max, 'transition')} ({100 * at_max / max(total, 1):.1f}%) hit the maximum tree "
            f"depth {stats.get('max_tree_depth')}: trajectories were cut short and explore slowly"
        )
    bfmi = stats.get("bfmi")
    if mcmc and bfmi:
        low = [(c, v) for c, v in enumerate(bfmi) if not v >= BFMI_MIN]
        if low:
            chains = ", ".join(f"chain {c} {v:.2f}" for c, v in low)
            problems.append(f"E-BFMI below {BFMI_MIN} ({chains}): the sampler explores the energy poorly")
    k_q = stats.get("approximation_k")
    if k_q is not None and not k_q <= PARETO_K_MAX:
        name = stats.get("approximation") or "SVI"
        problems.append(
            f"the {name} approximation is far from the posterior: the Pareto k̂ of its draws' importance "
            f"ratios p / q is {k_q:.2f} (> {PARETO_K_MAX}; Yao et al. 2018), so its draws, and their "
            "reweighting, do not stand for the posterior's"
        )
    if stats.get("loo_error"):
        problems.append(
            f"PSIS-LOO's Pareto k̂ could not be computed ({stats['loo_error']}), so the bags' influence "
            "is unchecked: look at the posterior's log_likelihood group"
        )
    n_high = stats.get("n_high_pareto_k")
    if n_high:
        worst = ", ".join(f"bag {b} {k:.2f}" for b, k in stats["worst_pareto_k"] if not k <= PARETO_K_MAX)
        problems.append(
            f"PSIS-LOO Pareto k̂ above {PARETO_K_MAX} for {n_high} of {stats['n_bags']} bags "
            f"({100 * stats['loo_high_k_share']:.1f}%; worst: {worst}"
            f"{', …' if n_high > N_WORST else ''}): the LOO estimate is unreliable for them, "
            + (
                "and each such bag pulls strongly on the posterior"
                if mcmc
                else "as the approximation is too far from their leave-one-out posteriors for the draws' "
                "importance weights to correct"
            )
        )
    return problems


def _fmt(value: float | None, fmt: str) -> str:
    return "n/a" if value is None or not np.isfinite(value) else f"{value:{fmt}}"


class Diagnostics(NamedTuple):
    """Convergence report of a posterior fit (``diagnose``; ``ORLR.diagnostics()`` for NUTS, SVI, Laplace).

    Attributes:
        table: ``convergence_table``, one row per interpretable scalar.
        sampler: ``sampler_summary``.
        problems: ``convergence_problems``, one sentence per failed check.
        converged: no problems.
        chain_means: ``chain_means``, each scalar's mean per chain (None for SVI).
        divergence_ranks: ``divergent_draw_ranks``, where the divergent draws
            sit in each scalar (None for SVI; empty without divergences).
        note: the caller's advice (``diagnose``'s ``note``), also the last problem; "" without one.
        mode: a Laplace posterior's MAP that did not converge (``diagnose``'s ``mode_problem``),
            also the first problem; "" otherwise.
        unchecked: rows of ``table`` left out of the R-hat and ESS checks, the weights of features
            that are constant in the training data (``diagnose``'s ``constant_features``): the
            likelihood does not depend on them, so their draws are the prior's and say nothing of
            the fit's mixing.
    """

    table: pd.DataFrame
    sampler: dict[str, Any]
    problems: list[str]
    converged: bool
    chain_means: pd.DataFrame | None = None
    divergence_ranks: pd.DataFrame | None = None
    note: str = ""
    mode: str = ""
    unchecked: tuple[str, ...] = ()

    @property
    def checked(self) -> pd.DataFrame:
        """``table`` without the ``unchecked`` rows: the scalars the R-hat and ESS checks judge."""
        return self.table.drop(index=list(self.unchecked))

    def summary_lines(self) -> list[str]:
        """A short text report: R-hat, ESS, divergences, tree depth, E-BFMI, LOO k-hat, verdict."""
        s, t = self.sampler, self.checked
        lines = []
        if s["mcmc"]:
            r_hat = t.loc[t["sd"] > 0, "r_hat"].dropna()
            worst = r_hat.idxmax() if len(r_hat) else None
            planned = s.get("n_draws_planned")
            extended = (
                f" (extended from {planned}: unconverged)" if planned and planned < s["n_draws"] else ""
            )
            method = s.get("chain_method")
            ran = f", {RAN[method]}" if method in RAN and s["n_chains"] > 1 else ""
            lines.append(
                f"NUTS: {count_noun(s['n_chains'], 'chain')} x {s['n_draws']} draws{extended}{ran}, "
                f"{count_noun(len(t), 'parameter')}"
                + (f" checked ({len(self.unchecked)} on constant features not)" if self.unchecked else "")
            )
            lines.append(
                f"max R-hat {_fmt(r_hat.max() if len(r_hat) else None, '.3f')}"
                + (f" ({worst})" if worst is not None else "")
                + f" [<= {RHAT_MAX}]; min bulk ESS {_fmt(t['ess_bulk'].min(), '.0f')}, "
                f"min tail ESS {_fmt(t['ess_tail'].min(), '.0f')} [>= {ESS_MIN}]"
            )
            depth = "n/a" if s["n_at_max_treedepth"] is None else str(s["n_at_max_treedepth"])
            bfmi = "n/a" if s["bfmi"] is None else ", ".join(f"{v:.2f}" for v in s["bfmi"])
            lines.append(
                f"divergences {'n/a' if s['n_divergent'] is None else s['n_divergent']}; "
                f"at max tree depth {depth}; mean tree depth {_fmt(s['mean_tree_depth'], '.1f')}; "
                f"E-BFMI {bfmi} [>= {BFMI_MIN}]"
            )
        else:
            source = "the Gaussian at the MAP" if s.get("approximation") == "Laplace" else "the guide"
            lines.append(
                f"{s.get('approximation') or 'SVI'}: {s['n_chains'] * s['n_draws']} independent draws from "
                f"{source} (R-hat and ESS do not apply)"
            )
            if s.get("approximation_k") is not None:
                lines.append(
                    f"importance ratios p / q: Pareto k̂ {_fmt(s['approximation_k'], '.2f')} "
                    f"[<= {PARETO_K_MAX}]"
                )
        if s["n_bags"] is not None:
            lines.append(
                f"PSIS-LOO: {s['n_high_pareto_k']} of {s['n_bags']} bags "
                f"({100 * s['loo_high_k_share']:.1f}%) with Pareto k̂ > {PARETO_K_MAX}"
            )
        elif s.get("loo_error"):
            lines.append(f"PSIS-LOO: not computed ({s['loo_error']})")
        verdict = (
            "converged" if self.converged else f"NOT converged ({count_noun(len(self.problems), 'problem')})"
        )
        planned = s.get("n_draws_planned")
        if self.converged and s["mcmc"] and planned and planned < s["n_draws"]:
            # Optional stopping: the chains ran on until these same checks passed, so a pass here is
            # likelier than the posterior's mixing alone would make it.
            verdict += (
                f", after going on from {planned} draws until the checks passed, which favours a pass: "
                "confirm with a fixed-length run (NUTS(num_samples=..., max_num_samples=0))"
            )
        lines.append(f"verdict: {verdict}")
        return lines

    def summary(self) -> str:
        """``summary_lines`` joined by newlines."""
        return "\n".join(self.summary_lines())

    def __str__(self) -> str:
        """What ``print`` shows: the summary, then each failed check in full."""
        return "\n".join([*self.summary_lines(), *(f"- {p}" for p in self.problems)])


def diagnose(
    idata: azc.Posterior,
    class_names: Sequence[str] | None = None,
    feature_names: Sequence[str] | None = None,
    *,
    note: Callable[[Diagnostics], str] | None = None,
    mode_problem: str = "",
    constant_features: Sequence[str] = (),
) -> Diagnostics:
    """Every convergence check of a NUTS, SVI or Laplace posterior (see the module docstring).

    ``note``: given the failed ``Diagnostics``, a sentence the caller knows and this module cannot
    (e.g. about the data); when not empty it ends ``problems``. ``mode_problem``: for a Laplace
    posterior, the MAP's own failure (``optimizer_diagnostics``'s sentence), which comes first.
    ``constant_features``: names (as the ``feature`` coordinate reads) of features constant in the
    training data, whose weights ``W[f, ...]`` (and horseshoe scales ``lam[f]``) the R-hat and
    ESS checks leave out (``Diagnostics.unchecked``).
    """
    table = convergence_table(idata, class_names, feature_names)
    stats = sampler_summary(idata)
    means, ranks = chain_tables(idata, class_names, feature_names) if stats["mcmc"] else (None, None)
    prefixes = tuple(p for f in constant_features for p in (f"W[{f}, ", f"lam[{f}]"))
    unchecked = tuple(row for row in table.index if prefixes and str(row).startswith(prefixes))
    problems = [mode_problem] if mode_problem else []
    problems += convergence_problems(table.drop(index=list(unchecked)), stats, means, ranks)
    result = Diagnostics(
        table, stats, problems, not problems, means, ranks, mode=mode_problem, unchecked=unchecked
    )
    extra = note(result) if note is not None and problems else ""
    return result._replace(problems=[*problems, extra], note=extra) if extra else result


def warning_message(diagnostics: Diagnostics) -> str:
    """The ``ConvergenceWarning``'s one short paragraph: what failed, with its worst figure, and the
    one thing to try next (``next_step``); ``ORLR.diagnostics()`` keeps every check in full."""
    s = diagnostics.sampler
    kind = "NUTS" if s["mcmc"] else (s.get("approximation") or "SVI")
    figures = failure_figures(diagnostics)
    # The chains passed every MCMC check; only PSIS-LOO is in doubt, and the lead says so.
    loo_only = s["mcmc"] and s.get("n_high_pareto_k") and len(figures) == 1 and not diagnostics.note
    lead = (
        f"the {kind} chains converged, but PSIS-LOO is not to be trusted"
        if loo_only
        else f"the {kind} posterior is not yet to be trusted"
    )
    if diagnostics.mode:  # the Gaussian sits at a MAP that did not converge: that comes first
        figures = ["its MAP did not converge", *figures]
    skipped = ""
    if diagnostics.unchecked and s["mcmc"]:
        skipped = (
            f" The {count_noun(len(diagnostics.unchecked), 'weight')} on features constant in the "
            "training data were left out of these checks: their draws are the prior's."
        )
    return (
        f"{lead}: {'; '.join(figures)}. Next: {next_step(diagnostics)}.{skipped} "
        "ORLR.diagnostics() reports every check in full."
    )


def failure_figures(diagnostics: Diagnostics) -> list[str]:
    """Each failed check in a few words with its worst figure, e.g. ``"R-hat up to 1.040 (W[3, 1])"``."""
    s, out = diagnostics.sampler, []
    if s.get("interrupted"):
        out.append(f"stopped by Ctrl-C after {s['n_draws']} of {s.get('n_draws_planned')} draws a chain")
    if s["mcmc"] and len(diagnostics.checked):
        fails = _mixing_failures(diagnostics.checked)
        if s.get("n_chains", 2) < 2:
            out.append("one chain, so R-hat cannot check that chains agree")
        elif len(fails["r_hat"]):
            worst = fails["r_hat"].fillna(np.inf)
            out.append(f"R-hat up to {worst.max():.3f} ({worst.idxmax()}) against {RHAT_MAX}")
        for column, label in (("ess_bulk", "bulk"), ("ess_tail", "tail")):
            if len(fails[column]):
                worst = fails[column].fillna(-np.inf)
                out.append(
                    f"{label} ESS down to {_fmt(worst.min(), '.0f')} ({worst.idxmin()}) against {ESS_MIN}"
                )
    if s["mcmc"] and (s.get("n_divergent") or 0) > MAX_DIVERGENT:
        out.append(count_noun(s["n_divergent"], "divergent transition"))
    if s["mcmc"] and s.get("n_at_max_treedepth"):
        out.append(f"{count_noun(s['n_at_max_treedepth'], 'transition')} at the tree-depth cap")
    low = [v for v in (s.get("bfmi") or []) if not v >= BFMI_MIN] if s["mcmc"] else []
    if low:
        out.append(f"E-BFMI down to {min(low):.2f} against {BFMI_MIN}")
    k_q = s.get("approximation_k")
    if k_q is not None and not k_q <= PARETO_K_MAX:
        out.append(f"the draws' importance ratios p / q have Pareto k̂ {k_q:.2f} against {PARETO_K_MAX}")
    if s.get("loo_error"):
        out.append("PSIS-LOO's k̂ could not be computed")
    if s.get("n_high_pareto_k"):
        out.append(
            f"Pareto k̂ above {PARETO_K_MAX} for {100 * s['loo_high_k_share']:.1f}% of bags "
            + (
                "(influential bags, for which PSIS-LOO is unreliable)"
                if s["mcmc"]
                else "(the approximation is too far from the posterior for PSIS-LOO's weights to correct)"
            )
        )
    return out or diagnostics.problems[:1]  # a check with no figure (a sampler that never moved)


def next_step(diagnostics: Diagnostics) -> str:
    """The one remedy a failed fit should try first: finish an interrupted run; stop divergences
    (their draws are biased); more draws when fewer than ``SHORT_RUN`` a chain mixed slowly; the
    caller's note (``Diagnostics.note``); a better-scaled posterior after tree-depth caps; more draws
    for slow mixing; a longer warmup for low E-BFMI; for k̂ alone, what it means."""
    s = diagnostics.sampler
    if not s["mcmc"] and s.get("approximation") == "Laplace":
        return (
            "sample the posterior with inference='nuts' (one Gaussian at one mode misses what the posterior "
            "holds beyond it), and compare their held-out scores"
        )
    if not s["mcmc"] and (s.get("approximation_k") or 0.0) > FAR_K:
        return (
            f"sample the posterior with inference='nuts' (k̂ above {FAR_K:g}: the posterior is far from a "
            "Gaussian, which neither a longer fit nor a low-rank guide changes)"
        )
    if not s["mcmc"]:
        return (
            "fit the guide longer (SVI(num_steps=...)), try SVI(guide='lowrank'), or use inference='nuts' "
            "(or 'laplace')"
        )
    if s.get("interrupted"):
        return "run the fit again and let it finish"
    if (s.get("n_divergent") or 0) > MAX_DIVERGENT:
        return divergence_remedy(s.get("target_accept_prob")).removeprefix("; ") or (
            "refit with a higher NUTS(target_accept=...) (e.g. 0.95)"
        )
    slow = len(failing_parameters(diagnostics)) > 0 or s.get("n_chains", 2) < 2
    draws = 2 * max(int(s["n_draws"]), 500)
    more = f"run more chains or longer ones (NUTS(num_chains=4, num_samples={draws}))"
    if slow and int(s["n_draws"]) < SHORT_RUN:  # too short a run to say more
        return more
    if diagnostics.note:
        return diagnostics.note
    if s.get("n_at_max_treedepth"):
        return (
            "trajectories were cut short; adapt a dense mass matrix (NUTS(dense_mass=True, num_warmup=1000))"
        )
    if slow:
        return more
    if any(not v >= BFMI_MIN for v in (s.get("bfmi") or [])):
        return "lengthen warmup (num_warmup=1000); if E-BFMI stays low, reparametrise the prior's scales"
    return "the flagged bags pull strongly on the posterior: compare the fit without them before using LOO"


def failing_parameters(diagnostics: Diagnostics) -> list[str]:
    """Row labels of ``diagnostics.table`` (``W[x6, WETA]``, ...) that fail R-hat or an ESS check
    (none for an approximation's independent draws, to which neither check applies)."""
    if not diagnostics.sampler["mcmc"]:
        return []
    failed = set().union(*(bad.index for bad in _mixing_failures(diagnostics.checked).values()))
    return [p for p in diagnostics.table.index if p in failed]


def warn_if_unconverged(
    idata: azc.Posterior,
    class_names: Sequence[str] | None = None,
    feature_names: Sequence[str] | None = None,
    *,
    stacklevel: int = 2,
    note: Callable[[Diagnostics], str] | None = None,
    mode_problem: str = "",
    constant_features: Sequence[str] = (),
) -> Diagnostics:
    """``diagnose`` and, if any check fails, issue one ``ConvergenceWarning`` (``warning_message``).

    Returns the ``Diagnostics`` (so callers need not compute them twice).
    ``stacklevel`` as in ``warnings.warn``, counted from the caller.
    ``note``, ``mode_problem``, ``constant_features``: as in ``diagnose``; the first two end and
    lead the warning too.
    """
    result = diagnose(
        idata,
        class_names,
        feature_names,
        note=note,
        mode_problem=mode_problem,
        constant_features=constant_features,
    )
    if result.problems:
        warnings.warn(warning_message(result), ConvergenceWarning, stacklevel=stacklevel + 1)
    return result


# -- the EM/MAP stopping report ----------------------------------------------------


def count_noun(n: int, noun: str) -> str:
    """``"1 iteration"``, ``"3 iterations"``: ``n`` and the noun, plural unless ``n == 1``."""
    return f"{n} {noun}" + ("" if n == 1 else "s")


OPTIMIZERS = {"em": "EM", "map": "MAP (L-BFGS)"}


class PointDiagnostics(NamedTuple):
    """Stopping report of an EM or MAP fit (``ORLR.diagnostics()`` for ``inference="em"|"map"``).

    Attributes:
        method: "em" or "map".
        converged: the first-order condition holds (``optimality <= tol``); for the
            MIMM's EM, the relative change of the log posterior fell below ``tol``.
        n_iter: iterations run; max_iter, tol: the settings.
        relative_change: ``|lp_T - lp_{T-1}| / max(|lp_{T-1}|, 1)`` at the last
            EM iteration; None for MAP, or an EM model loaded from disk (the
            history is not saved).
        problems: one sentence when not converged, else empty (also for
            stochastic EM, whose fixed budget is its setting, not a failure).
        bag_fraction: stochastic EM's fraction of bags per iteration; None
            for EM on every bag, and for MAP.
        optimality: the first-order residual at the estimate (``inference.point.optimality``:
            the largest component of the log posterior's gradient); None where not
            measured (the MIMM, a model saved before it was kept).
    """

    method: str
    converged: bool
    n_iter: int
    max_iter: int
    tol: float
    relative_change: float | None
    problems: list[str]
    bag_fraction: float | None = None
    optimality: float | None = None

    def summary_lines(self) -> list[str]:
        """One line: iterations, the first-order residual (or the final relative change), the verdict."""
        iterations = count_noun(self.n_iter, "iteration")
        if self.bag_fraction is not None:
            return [
                f"stochastic EM ({self.bag_fraction:g} of the bags per iteration): {iterations} "
                f"(max_iter={self.max_iter}), a fixed budget with no stopping test"
            ]
        if self.optimality is not None:
            measure = f", gradient up to {self.optimality:.2g} [<= tol={self.tol:g}]"
        elif self.relative_change is not None:
            measure = f", final relative change {self.relative_change:.2g}"
        else:
            measure = ""
        verdict = "converged" if self.converged else "NOT converged"
        return [f"{OPTIMIZERS[self.method]}: {iterations} (max_iter={self.max_iter}){measure}; {verdict}"]

    def summary(self) -> str:
        return "\n".join(self.summary_lines())

    def __str__(self) -> str:
        """What ``print`` shows: the summary, then the problem in full."""
        return "\n".join([*self.summary_lines(), *(f"- {p}" for p in self.problems)])


def optimizer_diagnostics(
    method: str,
    converged: bool,
    n_iter: int,
    max_iter: int,
    tol: float,
    relative_change: float | None = None,
    bag_fraction: float | None = None,
    optimality: float | None = None,
) -> PointDiagnostics:
    """``PointDiagnostics`` with the problem sentence of an EM/MAP fit that did not converge.

    ``bag_fraction`` (stochastic EM) reports a fixed budget instead: no problem.
    ``optimality``: the first-order residual at the estimate, which the sentence quotes.
    """
    if method not in OPTIMIZERS:
        raise ValueError(f"method={method!r}: point diagnostics are for {tuple(OPTIMIZERS)}")
    problems = []
    if not converged and bag_fraction is None:
        iterations = count_noun(n_iter, "iteration")
        if optimality is not None and np.isfinite(optimality):
            problem = (
                f"{OPTIMIZERS[method]} stopped after {iterations} short of an optimum: the log "
                f"posterior's gradient is up to {optimality:.3g}, above tol={tol:g}"
            )
        else:
            problem = f"{OPTIMIZERS[method]} stopped after {iterations} without meeting tol={tol:g}"
        if n_iter < max_iter:
            # An optimiser stops early when its line search finds no rise: round-off near the optimum.
            problem += f" (its line search found no rise before max_iter={max_iter}); try a prior_scale"
        elif method == "em" and optimality is not None:
            problem += (
                "; EM converges at the rate of the information the bag labels leave missing, which can "
                "take thousands of iterations: raise max_iter, or fit with MAP (L-BFGS), which reaches "
                "an optimum first"
            )
        else:
            problem += "; raise max_iter"
        problems.append(problem)
    settings = (int(n_iter), int(max_iter), float(tol))
    return PointDiagnostics(
        method, bool(converged), *settings, relative_change, problems, bag_fraction, optimality
    )


# -- per-scalar tables: convergence statistics, chain means, divergent draws' ranks --


TABLE_COLUMNS = ["mean", "sd", "r_hat", "ess_bulk", "ess_tail"]
"""``convergence_table``'s columns."""
INTERPRETABLE = ("W", "beta", "leak", "tau", "lam")
"""The sites the tables list first, in this order (then any other latent site, never the raw ones)."""


@contextmanager
def quiet_arviz() -> Iterator[None]:
    """Silence ArviZ's own warnings and log lines while it computes.

    E.g. "Shape validation failed" for one chain, or high Pareto k-hat: the
    checks of ``diagnostics`` report the same facts as problems.
    """
    with azc.quiet_loggers(), warnings.catch_warnings(), np.errstate(invalid="ignore", divide="ignore"):
        warnings.simplefilter("ignore")
        yield


def _table_vars(posterior) -> list[str]:
    """``W``, ``beta``, then any other latent site, in the posterior's order; never the raw sites."""
    first = [v for v in INTERPRETABLE if v in posterior.data_vars]
    rest = [v for v in posterior.data_vars if v not in (*INTERPRETABLE, *RAW_SITES)]
    return first + rest


def convergence_table(
    idata: azc.Posterior,
    class_names: Sequence[str] | None = None,
    feature_names: Sequence[str] | None = None,
) -> pd.DataFrame:
    """Per-scalar posterior mean, sd, R-hat and bulk/tail ESS of the interpretable parameters.

    Args:
        idata: with a ``posterior`` group of (chain, draw, ...) variables.
        class_names, feature_names: relabel the ``class`` / ``feature``
            coordinates, so rows read ``W[x-box, j]``; default: the
            coordinates as stored (``W[3, 9]`` unless the fit had names).
    Returns:
        One row per scalar of ``W`` (d * C rows), ``beta`` (C) and any other
        latent site, in ArviZ's order, with columns ``TABLE_COLUMNS``
        (unrounded; R-hat is NaN for a parameter constant over all draws,
        and for every parameter when there is only one chain).
    """
    named = with_names(idata, class_names, feature_names)
    names = _table_vars(named.posterior)
    if not names:
        raise ValueError("the posterior has no W, beta or other latent site to check")
    # Constant parameters (beta without an intercept) give 0/0 in R-hat: NaN, and ArviZ says so.
    with quiet_arviz():
        table = azc.summary(azc.group(named, "posterior")[names])
    return table[TABLE_COLUMNS]


def _scalar_draws(
    idata: azc.Posterior,
    class_names: Sequence[str] | None,
    feature_names: Sequence[str] | None,
) -> dict[str, np.ndarray]:
    """Each scalar of the table's sites as its (chain, draw) array, keyed by its table row label."""
    named = with_names(idata, class_names, feature_names)
    names = _table_vars(named.posterior)
    return dict(azc.scalar_draws(azc.group(named, "posterior"), names))  # as convergence_table's rows


def chain_means(
    idata: azc.Posterior,
    class_names: Sequence[str] | None = None,
    feature_names: Sequence[str] | None = None,
) -> pd.DataFrame:
    """Per-chain posterior mean of every scalar of ``convergence_table``, on the same row labels.

    A high R-hat or a low bulk ESS comes from chains that sit in different
    places (separate modes: more draws will not join them) or from chains that
    wander slowly (more draws will); the chains' means of the worst scalar tell
    the two apart.

    Returns:
        (scalars, n_chains) frame, index as ``convergence_table``'s, columns
        the chain numbers.
    """
    return _chain_means(_scalar_draws(idata, class_names, feature_names), int(idata.posterior.sizes["chain"]))


def _chain_means(draws: dict[str, np.ndarray], n_chains: int) -> pd.DataFrame:
    rows = {label: values.mean(axis=1) for label, values in draws.items()}
    return pd.DataFrame.from_dict(rows, orient="index", columns=list(range(n_chains)))


DIVERGENT_RANK_COLUMNS = ["mean_rank", "z"]
"""``divergent_draw_ranks``'s columns."""


def divergent_draw_ranks(
    idata: azc.Posterior,
    class_names: Sequence[str] | None = None,
    feature_names: Sequence[str] | None = None,
) -> pd.DataFrame:
    """Where the divergent draws sit in each scalar's posterior: the mean rank of their values.

    Divergences that cluster at one end of a parameter (small ``tau``: the
    funnel's neck) point at the geometry the sampler cannot follow; spread at
    random, they point nowhere. Each scalar's ``N`` draws (all chains) are
    ranked, ties averaged, and scaled to ``u = (rank - 1/2) / N`` in (0, 1);
    ``mean_rank`` is the mean ``u`` over the ``m`` divergent draws. Were those
    ``m`` draws a random subset, ``mean_rank`` would have mean 1/2 and
    variance ``(N^2 - 1) / (12 N^2 m) * (N - m) / (N - 1)`` (sampling without
    replacement), and ``z`` is its deviation in those sds.

    Args:
        idata: with ``posterior`` and ``sample_stats.diverging`` (chain, draw).
        class_names, feature_names: as in ``convergence_table``.
    Returns:
        (scalars, 2) frame, columns ``DIVERGENT_RANK_COLUMNS``, index as
        ``convergence_table``'s, sorted by ``|z|``, largest first; empty when
        there is no ``sample_stats.diverging``, no divergent draw, or every
        draw diverged. A scalar constant over all draws has ``z`` 0.
    """
    divergent = _divergent(idata)
    draws = {} if divergent is None else _scalar_draws(idata, class_names, feature_names)
    return _divergent_ranks(draws, divergent)


def chain_tables(
    idata: azc.Posterior,
    class_names: Sequence[str] | None = None,
    feature_names: Sequence[str] | None = None,
) -> tuple[pd.DataFrame, pd.DataFrame]:
    """``(chain_means, divergent_draw_ranks)`` of ``idata``, its draws read once for both."""
    draws = _scalar_draws(idata, class_names, feature_names)
    means = _chain_means(draws, int(idata.posterior.sizes["chain"]))
    return means, _divergent_ranks(draws, _divergent(idata))


def _divergent(idata: azc.Posterior) -> np.ndarray | None:
    """The (chain * draw,) divergence flags; None when the ranks are undefined (none, all, or no stats)."""
    stats = azc.group(idata, "sample_stats")
    if stats is None or "diverging" not in stats:
        return None
    divergent = np.asarray(stats["diverging"], bool).ravel()
    return divergent if 0 < divergent.sum() < divergent.size else None


def _divergent_ranks(draws: dict[str, np.ndarray], divergent: np.ndarray | None) -> pd.DataFrame:
    if divergent is None:
        return pd.DataFrame(columns=DIVERGENT_RANK_COLUMNS, dtype=float)
    from scipy.stats import rankdata

    n, m = divergent.size, int(divergent.sum())
    labels = list(draws)
    values = np.stack([draws[label].ravel() for label in labels], axis=1)  # (N, scalars)
    u = (rankdata(values, axis=0) - 0.5) / n
    mean_rank = u[divergent].mean(axis=0)
    sd = np.sqrt((n**2 - 1) / (12 * n**2 * m) * (n - m) / max(n - 1, 1))
    z = np.where(np.ptp(values, axis=0) > 0, (mean_rank - 0.5) / sd, 0.0)
    table = pd.DataFrame({"mean_rank": mean_rank, "z": z}, index=labels)
    return table.iloc[np.argsort(-np.abs(z), kind="stable")]


# -- the divergence sentence: where the divergent draws sit, and what to try next ---


DIVERGENT_Z = 4.0
"""``|z|`` of ``divergent_draw_ranks`` above which the divergence sentence names a
parameter: divergent draws that far from a random subset of its draws (two-sided p below 1e-4 each,
so among a few hundred scalars chance names one in a few dozen fits)."""
N_DIVERGENT_NAMED = 3
"""Parameters named where the divergent draws sit, furthest first."""


def divergence_remedy(target: float | None) -> str:
    """What to try after divergences, given the fit's target acceptance (None: not recorded)."""
    if target is None:
        return ""
    if target >= 0.99:
        return (
            f"; the fit's target acceptance, {target:.2f}, is already high: reparametrise the model "
            "or change its prior"
        )
    # A higher target makes warmup adapt a smaller step, which follows curvature that a larger
    # step jumps over (the group horseshoe on HJA union diverges at 0.8: REPRODUCTION.md).
    higher = 0.95 if target < 0.95 else 0.99
    return (
        f"; refit with a target acceptance above this fit's {target:.2f} (NUTS(target_accept=...), e.g. "
        f"{higher:.2f}), so that warmup adapts smaller steps"
    )


def divergence_places(stats: dict[str, Any], ranks: pd.DataFrame | None) -> str:
    """``"; per chain 0, 31, 0, 0; divergent draws sit at low tau (mean rank 0.04, z -8.1)"``.

    Chains are listed when there are several; parameters when their divergent draws sit
    ``DIVERGENT_Z`` sds or more from a random subset (``divergent_draw_ranks``), up to
    ``N_DIVERGENT_NAMED``, furthest first.
    """
    out = ""
    per_chain = stats.get("n_divergent_per_chain")
    if per_chain is not None and len(per_chain) > 1:
        out += "; per chain " + ", ".join(str(v) for v in per_chain)
    if ranks is not None and len(ranks):
        far = ranks[ranks["z"].abs() >= DIVERGENT_Z].iloc[:N_DIVERGENT_NAMED]
        if len(far):
            out += "; divergent draws sit at " + ", ".join(
                f"{'low' if row.z < 0 else 'high'} {name} (mean rank {row.mean_rank:.2f}, z {row.z:+.1f})"
                for name, row in far.iterrows()
            )
    return out
