"""A group-shrinkage posterior (NUTS, or SVI) against the l2,1 MAP: accuracy, sparsity, convergence.

    python -m reproduction.shrinkage_vs_l21 [--dataset letter-frost|hja-union] [--folds 10]
        [--prior group_horseshoe|l21] [--slab 3.0] [--sampler nuts|svi|none] [--num-chains 4]
        [--num-warmup 300] [--num-samples 1000] [--dense-mass] [--whiten] [--target-accept A]
        [--drop-dependent] [--transform none|quantile-normal] [--progress-bar] [--svi-steps 3000]
        [--run-folds 0,1,2] [--save rows.jsonl] [--summarise [--reruns FILE]]

Same bag-level folds (seed 0) as ``orlr-ppl evaluate``, linear features standardised on each
training fold. l2,1 MAP: ``ORLRCV(inference="map", prior="l21")``, the penalty chosen inside each
fit by 3-fold bag-level CV (bag labels only). Posterior: ``ORLR(inference=NUTS(...),
prior="group_horseshoe", prior_scale=SLAB)``, the slab fixed beforehand (3: a feature moving a class
logit by at most a few nats per sd), its predictions the posterior mean of p(y | x) over the draws
kept. ``--prior l21`` samples instead the l2,1 penalty's own Bayesian reading, the group Laplace
prior ``ORLR(prior="l21")`` at the scale the MAP's CV chose on that fold (so posterior and MAP share
the prior, and differ only in how they use it). Prints per fold both inductive accuracies, the rows
each keeps (MAP: non-zero; posterior: row_inclusion >= 0.5), the posterior's worst R-hat, least
bulk/tail ESS and divergences, and the fit seconds; then means and sds, and the folds where each is
ahead. ``--sampler svi`` fits the same model's mean-field guide instead (``ORLR(inference=SVI(...))``,
1,000 draws from it): an approximation with no R-hat or ESS to check, for data where NUTS is too
slow. ``--sampler none`` fits the l2,1 MAP alone.

As in ``reproduction.kernel_orlr``: ``--run-folds`` fits only those folds, ``--save`` appends each fold's row
to a JSON-lines file (each fold seeded by its number, so parts give what one run would), and
``--summarise`` prints the summary from that file, refusing a missing fold (with ``--run-folds``, of
those folds only: a partial summary). ``--drop-dependent`` fits both on the features left after
dropping those ``MIMLData.linear_dependencies`` names on the training fold (HJA: x16, x22), which
NUTS samples in half the leapfrog steps (``benchmarks.bench_posterior --dataset hja-union``).
``--transform quantile-normal`` then maps each feature through its training quantiles to a
standard Normal (``quantile_normal``) before both fits, which standardise the result as usual.

``--summarise --reruns FILE`` applies the rule written in REPRODUCTION.md before the horseshoe's
fold 3 ran: a fold whose NUTS run fails R-hat, bulk/tail ESS or divergences is rerun at target
acceptance ``RERUN_TARGET`` (0.98), everything else fixed, its row saved in FILE; each fold then
counts with its converged run. It prints which run each fold takes, and the summary over them.
"""

from __future__ import annotations

import argparse
from dataclasses import replace
from pathlib import Path

import numpy as np

from benchmarks.harness import (
    add_part_options,
    as_saved,
    environments_note,
    host_devices,
    paired_difference,
    run_folds,
    run_in_parts,
    saved_lines,
    timed_fit,
    without_dependent,
)
from orlr_ppl.inference.checks.diagnostics import ESS_MIN, MAX_DIVERGENT, RHAT_MAX

POSTERIOR_KEY = {"group_horseshoe": "horseshoe_", "l21": "group_laplace_"}
"""The posterior's accuracy in a saved row: this prefix and the sampler's name."""
RERUN_TARGET = 0.98
"""The target acceptance at which the rule reruns a fold that failed (``--reruns``)."""


def quantile_normal(train, test) -> tuple:
    """``(train, test)`` with each feature mapped through its training quantiles to a standard Normal.

    scikit-learn's ``QuantileTransformer`` (1,000 quantiles, or one per training instance when
    there are fewer, every instance counted), fitted on the training instances only: what the saved
    rows ran on, and what ``ORLR``'s quantile-normal features do inside ``fit``. Heavy-tailed or
    spiked features (HJA's x6: a fifth of its values exactly 0, z from -7 to 8) come out with Normal
    margins, so no weight is set by a handful of extreme instances. Monotone per feature: the
    ranking of instances along each feature is kept, its spacing is not.
    """
    from sklearn.preprocessing import QuantileTransformer

    x = np.concatenate(train.bags)
    qt = QuantileTransformer(
        n_quantiles=min(1000, x.shape[0]), output_distribution="normal", subsample=None, random_state=0
    ).fit(x)
    return tuple(replace(d, bags=[qt.transform(bag) for bag in d.bags]) for d in (train, test))


def _posterior_model(args: argparse.Namespace, scale: float, fold: int):
    """The posterior's estimator: NUTS (or SVI) under the group horseshoe (slab) or group Laplace prior."""
    from orlr_ppl import NUTS, ORLR, SVI

    if args.sampler == "nuts":
        inference = NUTS(
            num_warmup=args.num_warmup,
            num_samples=args.num_samples,
            num_chains=args.num_chains,
            dense_mass=args.dense_mass,
            whiten=args.whiten,
            target_accept=args.target_accept,
            progress_bar=args.progress_bar,
        )
    else:
        inference = SVI(num_steps=args.svi_steps, num_draws=args.num_samples, progress_bar=args.progress_bar)
    return ORLR(inference=inference, prior=args.prior, prior_scale=scale, random_state=fold)


def _fold(train, test, args, fold: int) -> dict[str, float | str]:
    from orlr_ppl import ORLRCV

    if args.drop_dependent:
        train, test, _ = without_dependent(train, test)
    if args.transform == "quantile-normal":
        train, test = quantile_normal(train, test)
    # Warnings silenced: a CV choice at the grid's edge and the diagnostics are reported in the row.
    l21 = ORLRCV(inference="map", prior="l21", random_state=fold, progress_bar=False)
    l21, t_map = timed_fit(l21, train)
    map_row = {
        "l21_map": l21.score(test),
        "l21_scale": l21.prior_scale_,
        "l21_rows": int(np.any(np.asarray(l21.coef_) != 0, axis=1).sum()),
        "t_map": t_map,
    }
    if args.sampler == "none":  # the MAP alone: what a feature transform costs or gains it, cheaply
        return map_row
    scale = l21.prior_scale_ if args.prior == "l21" else args.slab
    post, t_post = timed_fit(_posterior_model(args, scale, fold), train)
    diag = post.diagnostics()
    table = diag.table[diag.table["sd"] > 0]
    row = {
        "l21_map": map_row["l21_map"],  # first, then the posterior's: the printed row reads as a pair
        POSTERIOR_KEY[args.prior] + args.sampler: post.score(test),
        **map_row,
        "hs_rows": int((post.row_inclusion() >= 0.5).sum()),
        "loo_high_k": diag.sampler["n_high_pareto_k"],  # None where PSIS-LOO could not be computed
        "t_post": t_post,
    }
    if args.sampler == "svi":  # independent draws: no R-hat, ESS or divergences to report
        return {**row, "svi_loss": float(np.median(post.losses_[-100:]))}
    worst = table["ess_bulk"].idxmin()
    return {
        **row,
        "r_hat": float(table["r_hat"].max()),
        "worst": str(worst),
        # Chains that sit in different places (modes) and chains that stall both give a low bulk ESS;
        # the worst scalar's mean per chain, against its sd, tells them apart.
        "worst_chain_means": [float(m) for m in diag.chain_means.loc[worst]],
        "worst_sd": float(table.loc[worst, "sd"]),
        "ess_bulk": float(table["ess_bulk"].min()),
        "ess_tail": float(table["ess_tail"].min()),
        "divergent": int(diag.sampler["n_divergent"]),
        "mean_n_steps": diag.sampler["mean_n_steps"],  # leapfrog steps a transition: the cost
        "divergent_per_chain": diag.sampler["n_divergent_per_chain"],
        # Where the divergent draws sit: the scalars furthest from a random subset of draws, with
        # their mean rank and z (diagnostics.divergent_draw_ranks); named in the warning past |z| 4.
        "divergent_at": [
            [str(name), round(float(r.mean_rank), 3), round(float(r.z), 1)]
            for name, r in diag.divergence_ranks.iloc[:3].iterrows()
        ],
    }


def _converged(row: dict[str, float | str]) -> bool:
    """Whether a NUTS row meets the package's R-hat, bulk/tail ESS and divergence thresholds."""
    return (
        float(row["r_hat"]) <= RHAT_MAX
        and min(float(row["ess_bulk"]), float(row["ess_tail"])) >= ESS_MIN
        and int(row["divergent"]) <= MAX_DIVERGENT
    )


def _summarise(rows: list[dict[str, float | str]], folds: list[int]) -> None:
    """Means and sds of both accuracies, the paired difference, and the worst diagnostics over
    ``folds`` (one row each)."""
    print(f"folds {folds}")
    post = next((k for k in rows[0] if k.startswith(tuple(POSTERIOR_KEY.values()))), None)
    for key in ("l21_map",) if post is None else ("l21_map", post):
        acc = 100 * np.array([r[key] for r in rows])
        print(f"{key}: {acc.mean():.1f} ± {acc.std(ddof=1):.1f} over {len(rows)} folds")
    if post is None:  # --sampler none: the MAP's rows alone
        print(f"per fold: {[round(float(a), 1) for a in acc]}")
        print(f"l21_rows per fold: {[r['l21_rows'] for r in rows]}; scales {[r['l21_scale'] for r in rows]}")
        print(f"median t_map: {np.median([r['t_map'] for r in rows]):.1f} s")
        return
    diff = 100 * np.array([r[post] - r["l21_map"] for r in rows])
    print(f"posterior - MAP: {paired_difference(diff)}")
    for key in ("l21_rows", "hs_rows"):
        print(f"{key} per fold: {[r[key] for r in rows]}")
    if "r_hat" in rows[0]:
        print(
            f"worst over folds: R-hat {max(r['r_hat'] for r in rows):.3f}, ESS bulk/tail "
            f"{min(r['ess_bulk'] for r in rows):.0f}/{min(r['ess_tail'] for r in rows):.0f}, "
            f"divergences {sum(r['divergent'] for r in rows)}"
        )
        # An unconverged fold's mean is no posterior to report, so the comparison is also shown
        # over the folds that pass R-hat, both ESS and divergences (the row keeps only these).
        converged = [_converged(r) for r in rows]
        passed = [i for i, ok in enumerate(converged) if ok]
        print(
            f"folds meeting R-hat/ESS/divergences: {len(passed)} of {len(rows)} "
            f"(folds {[folds[i] for i in passed]})"
        )
        if len(passed) > 1:
            print(f"posterior - MAP over those: {paired_difference(diff[passed])}")
        print(goal_line(diff, converged, folds))
    print(f"bags with PSIS-LOO k-hat > 0.7 per fold: {[r.get('loo_high_k') for r in rows]}")
    for key in ("t_map", "t_post"):
        print(f"median {key}: {np.median([r[key] for r in rows]):.1f} s")


def goal_line(diff: np.ndarray, converged: list[bool], folds: list[int]) -> str:
    """The issue's goal read from the folds, as REPRODUCTION.md fixed it before folds 7-9 finished.

    Args:
        diff: (folds,) posterior minus MAP accuracy, in points.
        converged: (folds,) whether each fold's NUTS row meets the convergence rule.
        folds: (folds,) the fold numbers, to name the failed ones.
    Returns:
        ``"goal ...: met"`` when every fold converged and the unrounded mean of ``diff`` is at
        least 0 (to within 1e-9 points of float rounding), ``"... not met"`` when they converged
        and it is below 0, and ``"... undecided"`` naming the folds that failed the rule otherwise
        (a failed fold is no result to count).
    """
    mean = float(np.mean(diff))
    head = f"goal (posterior - MAP, the unrounded mean, at least 0): {mean:+.3f} points"
    failed = [fold for fold, ok in zip(folds, converged, strict=True) if not ok]
    if failed:
        return f"{head}; undecided: folds {failed} fail the convergence rule"
    # Folds level to the instance give float differences of 0 only up to rounding; 1e-9 points
    # is far below one instance of any fold (1/500 of a fold is 0.2 points).
    return f"{head}; {'met' if mean >= -1e-9 else 'not met'}"


def _verdict(row: dict) -> str:
    """``"converged (0 div)"`` or ``"failed (31 div)"``: a NUTS row against the rule."""
    return f"{'converged' if _converged(row) else 'failed'} ({row['divergent']} div)"


Saved = dict[int, tuple[dict, dict | None]]
"""fold -> (row, environment), as ``saved_lines`` reads them."""


def _by_rule(
    firsts: Saved, reruns: Saved, folds: list[int]
) -> tuple[list[dict], list[dict | None], list[str]]:
    """Each fold's row and environment under the rerun rule, and a line per fold saying which run
    it takes.

    A fold converged in ``firsts`` keeps that row; a failed one takes its rerun where there is one
    (converged or not: the summary counts it either way), else keeps the failed row, marked pending.
    A fold run at ``RERUN_TARGET`` only (from fold 4 on, REPRODUCTION.md) takes that run.
    """
    missing = [f for f in folds if f not in firsts and f not in reruns]
    if missing:
        raise SystemExit(f"folds {missing} saved in neither file; run them with --run-folds")
    chosen, chosen_envs, lines = [], [], []
    for fold in folds:
        row, env, line = (
            _first_or_rerun(fold, firsts, reruns) if fold in firsts else _rerun_only(fold, reruns)
        )
        chosen.append(row)
        chosen_envs.append(env)
        lines.append(line)
    return chosen, chosen_envs, lines


def _rerun_only(fold: int, reruns: Saved) -> tuple[dict, dict | None, str]:
    """A fold run at ``RERUN_TARGET`` only: its row, environment and line."""
    row, env = reruns[fold]
    return row, env, f"fold {fold}: run at {RERUN_TARGET} only: {_verdict(row)}"


def _first_or_rerun(fold: int, firsts: Saved, reruns: Saved) -> tuple[dict, dict | None, str]:
    """A fold with a first run: that run if it converged or has no rerun, else its rerun."""
    row, env = firsts[fold]
    line = f"fold {fold}: {_verdict(row)}"
    if _converged(row):
        return row, env, line + (" (its rerun is ignored)" if fold in reruns else "")
    if fold not in reruns:
        return row, env, line + f", rerun at {RERUN_TARGET} pending"
    rerun, rerun_env = reruns[fold]
    if rerun["l21_map"] != row["l21_map"]:  # same fold, same seed: the MAP cannot move
        raise SystemExit(
            f"fold {fold}: the rerun's l2,1 MAP scored {rerun['l21_map']}, the first run's "
            f"{row['l21_map']}; the two runs did not fit the same fold alike"
        )
    return rerun, rerun_env, line + f" -> at {RERUN_TARGET}: {_verdict(rerun)}"


def _summarise_by_rule(args: argparse.Namespace, settings: dict) -> None:
    """``--summarise --reruns``: the summary over each fold's run under the rerun rule."""
    settings = as_saved(settings)
    folds = run_folds(args)
    firsts = saved_lines(args.save, settings)
    reruns = saved_lines(args.reruns, {**settings, "target_accept": RERUN_TARGET})
    chosen, chosen_envs, lines = _by_rule(firsts, reruns, folds)
    print("\n".join(lines))
    _summarise(chosen, folds)
    note = environments_note(chosen_envs, folds)
    if note is not None:
        print(note)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--dataset", choices=["letter-frost", "hja-union"], default="letter-frost")
    p.add_argument("--folds", type=int, default=10)
    p.add_argument(
        "--prior",
        choices=list(POSTERIOR_KEY),
        default="group_horseshoe",
        help="the posterior's prior: the group horseshoe (slab --slab), or the group Laplace at the l2,1 "
        "MAP's CV-chosen scale",
    )
    p.add_argument("--slab", type=float, default=3.0, help="the horseshoe's slab")
    p.add_argument("--num-chains", type=int, default=4)
    p.add_argument("--num-warmup", type=int, default=300)
    p.add_argument("--num-samples", type=int, default=1000)
    p.add_argument("--dense-mass", action="store_true", help="NUTS adapts a dense mass matrix")
    p.add_argument(
        "--whiten", action="store_true", help="NUTS in Laplace-whitened coordinates (ORLR(whiten=True))"
    )
    p.add_argument(
        "--target-accept",
        type=float,
        default=None,
        help="NUTS's target acceptance (default: the package's, 0.98 under the horseshoe, 0.8 else)",
    )
    p.add_argument(
        "--drop-dependent",
        action="store_true",
        help="drop the features that MIMLData.linear_dependencies names on each training fold (both fits)",
    )
    p.add_argument(
        "--transform",
        choices=["none", "quantile-normal"],
        default="none",
        help="map each feature through its training quantiles to a standard Normal before both fits "
        "(after --drop-dependent)",
    )
    p.add_argument("--progress-bar", action="store_true", help="a bar over NUTS's iterations, on stderr")
    p.add_argument(
        "--sampler",
        choices=["nuts", "svi", "none"],
        default="nuts",
        help="nuts: the posterior, with its diagnostics; svi: a mean-field approximation of it (cheap, "
        "no convergence guarantee); none: the l2,1 MAP alone",
    )
    p.add_argument("--svi-steps", type=int, default=3000, help="SVI optimiser steps (with --sampler svi)")
    add_part_options(p)
    p.add_argument(
        "--reruns",
        type=Path,
        default=None,
        help=f"with --summarise: the rows of the failed folds rerun at target acceptance {RERUN_TARGET}; "
        "each fold counts with its converged run (the rule in REPRODUCTION.md)",
    )
    args = p.parse_args()
    if args.reruns is not None and not (args.summarise and args.sampler == "nuts"):
        p.error("--reruns goes with --summarise, for NUTS rows")
    if args.reruns is not None and not (args.target_accept or 0) < RERUN_TARGET:
        p.error(f"--reruns needs the first runs' --target-accept, below {RERUN_TARGET}")
    names: tuple[str, ...] = ("dataset", "folds", "sampler")
    if args.sampler != "none":  # the MAP alone has no sampler setting
        names += ("slab", "num_chains", "num_warmup", "num_samples", "dense_mass")
        names += ("svi_steps",) if args.sampler == "svi" else ("target_accept",)
        names += ("whiten",) if args.whiten else ()
        names += ("prior",) if args.prior != "group_horseshoe" else ()
    # Options named only when used, so rows saved before an option existed read alike.
    names += ("drop_dependent",) if args.drop_dependent else ()
    names += ("transform",) if args.transform != "none" else ()
    settings = {k: getattr(args, k) for k in names}
    if args.sampler == "nuts" and not args.summarise:
        host_devices()  # the chains in parallel, before JAX starts
    if args.reruns is not None:
        _summarise_by_rule(args, settings)
        return
    run_in_parts(args, settings, lambda train, test, fold: _fold(train, test, args, fold), _summarise)


if __name__ == "__main__":
    main()
