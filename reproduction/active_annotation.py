"""Active annotation on real data: accuracy against instance labels queried, one curve per strategy.

    python -m reproduction.active_annotation [--dataset hja-union|letter-frost] [--folds 5]
        [--rounds 20] [--batch 10] [--strategies bald,entropy,entropy-map,random]
        [--svi-steps 1000] [--run-folds 0,1] [--save rows.jsonl] [--summarise]
        [--merge other_rows.jsonl ...] [--plot FIG.png]

Each fold of the bag-level split (seed 0, as ``orlr-ppl evaluate``) starts from the training bags'
labels alone. A round fits ORLR with every instance label queried so far (``fit(...,
instance_labels=...)``), measures its inductive accuracy on the held-out bags and its transductive
accuracy on the training instances not queried (given their bags' labels), and queries ``--batch``
more instances (``ORLR.query``), whose true labels are then revealed. ``--rounds`` rounds, so up
to rounds x batch labels; the last fit is measured too.

Strategies: ``bald`` and ``entropy`` rank by the posterior of ``ORLR(inference=SVI(init="map",
num_steps=--svi-steps))`` (its means start at the round's MAP, the cheap refit this loop needs),
``bald-laplace`` and ``entropy-laplace`` by the Laplace posterior's (``Laplace(num_draws=200)``),
``entropy-map`` and ``random`` by ``ORLR(inference="map")``'s; ``random-svi`` picks at random and
refits the posterior, the baseline of the posterior's own strategies. Each curve is measured with its
own model's predictions (the posterior mean's, or the MAP's), except ``bald-map-refit`` and
``bald-laplace-map-refit``: BALD's queries, measured with a MAP refit on the same labels, which
separates the choice of instances from the model that predicts. The ceiling is
``SoftmaxRegression`` on every training instance's label, on the same folds. The summary prints,
per strategy and budget, the mean over folds with a 95 % t interval, and the share of the gap
between the bag-labels-only fit and the ceiling that each strategy has closed; ``--plot`` draws the
curves with their bands.
"""

from __future__ import annotations

import argparse
import json
import time
import warnings
from pathlib import Path
from typing import Any

import jax
import numpy as np

from benchmarks.harness import add_part_options, run_in_parts

STRATEGIES = {
    "bald": ("svi", "bald", "svi"),
    "entropy": ("svi", "entropy", "svi"),
    "entropy-map": ("map", "entropy", "map"),
    "random": ("map", "random", "map"),
    "random-svi": ("svi", "random", "svi"),
    "bald-map-refit": ("svi", "bald", "map"),
    "bald-laplace": ("laplace", "bald", "laplace"),
    "bald-laplace-map-refit": ("laplace", "bald", "map"),
    "entropy-laplace": ("laplace", "entropy", "laplace"),
}
"""Each curve's name: (the fit its queries come from, the query strategy, the fit measured)."""


def _model(kind: str, svi_steps: int, seed: int):
    from orlr_ppl import ORLR, SVI, Laplace

    if kind == "map":
        return ORLR(inference="map", random_state=seed)
    if kind == "laplace":  # 200 draws, as the SVI posterior's
        return ORLR(inference=Laplace(num_draws=200), random_state=seed, max_predict_draws=100)
    settings = SVI(num_steps=svi_steps, num_draws=200, init="map", progress_bar=False)
    return ORLR(inference=settings, random_state=seed, max_predict_draws=100)


def _accuracy(
    predicted: list[np.ndarray], truth: list[np.ndarray], keep: list[np.ndarray] | None = None
) -> float:
    """Instance accuracy of the argmax predictions, over the instances ``keep`` marks (all without)."""
    hits = np.concatenate([p.argmax(1) == y for p, y in zip(predicted, truth)])
    return float(np.mean(hits if keep is None else hits[np.concatenate(keep)]))


def run_strategy(
    train, test, name: str, rounds: int, batch: int, svi_steps: int, seed: int
) -> dict[str, Any]:
    """One curve: inductive and transductive accuracy after each round's labels, and the fit seconds."""
    from orlr_ppl.inference.checks.diagnostics import ConvergenceWarning

    kind, strategy, measured = STRATEGIES[name]
    known = [np.full(len(x), -1, np.int64) for x in train.bags]
    inductive, transductive, seconds, labelled = [], [], [], []
    for r in range(rounds + 1):
        start = time.perf_counter()
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", ConvergenceWarning)  # the loop reports accuracy, not checks
            # known from the first round, all -1 then: every round has the same data shapes, so the
            # refits reuse the first fit's compiled programs
            model = _model(kind, svi_steps, seed).fit(train, None, known)
            seconds.append(time.perf_counter() - start)
            judge = model if measured == kind else _model(measured, svi_steps, seed).fit(train, None, known)
        inductive.append(_accuracy(judge.predict_proba(test), test.instance_labels))
        unqueried = [k < 0 for k in known]
        transductive.append(
            _accuracy(judge.predict_proba(train, train.label_sets), train.instance_labels, unqueried)
        )
        labelled.append(int(sum((k >= 0).sum() for k in known)))
        if r == rounds:
            break
        table = model.query(train, batch, strategy, instance_labels=known)
        for bag, i in zip(table["bag_id"], table["instance"]):
            b = train.bag_ids.index(bag)
            known[b][i] = train.instance_labels[b][i]
        # The query's DP on the bags with known labels compiles for their shapes each round: freed
        # here, since hundreds of such programs outgrow the process's memory maps in one run.
        jax.clear_caches()
    return {"labelled": labelled, "inductive": inductive, "transductive": transductive, "seconds": seconds}


def fit_fold(args: argparse.Namespace, train, test, fold: int) -> dict[str, Any]:
    from orlr_ppl import SoftmaxRegression

    row: dict[str, Any] = {}
    ceiling = SoftmaxRegression().fit(train)
    row["ceiling_inductive"] = ceiling.score(test)
    for name in args.strategies.split(","):
        row[name] = run_strategy(train, test, name, args.rounds, args.batch, args.svi_steps, seed=fold)
    return row


def _interval(values: np.ndarray) -> tuple[float, float]:
    """Mean and the half-width of its 95 % t interval over folds (0 for one fold)."""
    from scipy.stats import t

    n = len(values)
    half = 0.0 if n < 2 else float(t.ppf(0.975, n - 1) * values.std(ddof=1) / np.sqrt(n))
    return float(values.mean()), half


def summarise(rows: list[dict[str, Any]], folds: list[int]) -> None:
    strategies = [k for k in rows[0] if isinstance(rows[0][k], dict)]
    ceiling = _interval(np.array([r["ceiling_inductive"] for r in rows]))
    shown = f"{100 * ceiling[0]:.1f} ± {100 * ceiling[1]:.1f}"
    print(f"folds {folds}; ceiling (SoftmaxRegression on every training label): {shown}")
    budgets = rows[0][strategies[0]]["labelled"]
    for measure in ("inductive", "transductive"):
        print(f"\n{measure} accuracy (%), mean ± 95% t interval over {len(rows)} folds")
        print("labels | " + " | ".join(strategies))
        for j, budget in enumerate(budgets):
            cells = [_interval(100 * np.array([r[s][measure][j] for r in rows])) for s in strategies]
            print(f"{budget:6d} | " + " | ".join(f"{m:.1f} ± {h:.1f}" for m, h in cells))
    print("\nshare of the inductive gap to the ceiling closed at the last budget (mean over folds)")
    for s in strategies:
        gaps = np.array([r["ceiling_inductive"] - r[s]["inductive"][0] for r in rows])
        gains = np.array([r[s]["inductive"][-1] - r[s]["inductive"][0] for r in rows])
        if np.any(gaps <= 0):  # a fold that starts at or above the ceiling has no gap to close
            none = [f for f, g in zip(folds, gaps) if g <= 0]
            print(f"  {s}: no gap in folds {none}; gain {100 * gains.mean():+.1f}")
            continue
        mean, half = _interval(gains / gaps)
        print(f"  {s}: {100 * mean:.0f}% ± {100 * half:.0f}")
    seconds = {s: np.median([np.median(r[s]["seconds"]) for r in rows]) for s in strategies}
    print("median fit seconds per round: " + ", ".join(f"{s} {v:.1f}" for s, v in seconds.items()))


def plot(rows: list[dict[str, Any]], path: str, title: str) -> None:
    """Held-out accuracy against labels queried, one line per strategy: the means over the folds
    (left), and each fold's change from its bag-labels-only MAP fit with its 95 % band (right; paired
    by fold, so the folds' own spread, which dwarfs the strategies' differences, drops out)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    strategies = [k for k in rows[0] if isinstance(rows[0][k], dict)]
    start = np.array([r.get("entropy-map", r.get("random", r[strategies[0]]))["inductive"][0] for r in rows])
    fig, (left, right) = plt.subplots(1, 2, figsize=(11, 4.2))
    for s in strategies:
        budgets = np.array(rows[0][s]["labelled"])
        acc = 100 * np.array([r[s]["inductive"] for r in rows])  # (folds, budgets)
        left.plot(budgets, acc.mean(axis=0), label=s)
        change = np.array([_interval(acc[:, j] - 100 * start) for j in range(len(budgets))])
        right.plot(budgets, change[:, 0], label=s)
        right.fill_between(budgets, change[:, 0] - change[:, 1], change[:, 0] + change[:, 1], alpha=0.15)
    ceiling = 100 * np.array([r["ceiling_inductive"] for r in rows])
    left.axhline(ceiling.mean(), color="k", ls="--", lw=1, label="SoftmaxRegression, every label")
    right.axhline(np.mean(ceiling - 100 * start), color="k", ls="--", lw=1)
    right.axhline(0.0, color="grey", lw=0.5)
    left.set_ylabel("held-out instance accuracy (%), mean over folds")
    right.set_ylabel("change from the bag-labels-only MAP fit (points)")
    for ax in (left, right):
        ax.set_xlabel("instance labels queried")
    left.legend(loc="upper left", fontsize=8)
    fig.suptitle(title)
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--dataset", choices=["hja-union", "letter-frost"], default="hja-union")
    p.add_argument("--folds", type=int, default=5, help="bag-level folds (each one run of every strategy)")
    p.add_argument("--rounds", type=int, default=20, help="query rounds")
    p.add_argument("--batch", type=int, default=10, help="instances queried a round")
    p.add_argument(
        "--strategies",
        default="bald,entropy,entropy-map,random",
        help=f"comma list of {','.join(STRATEGIES)}",
    )
    p.add_argument("--svi-steps", type=int, default=1000, help="SVI steps per posterior refit (from the MAP)")
    p.add_argument("--plot", default=None, help="draw the inductive curves to this image (with --summarise)")
    p.add_argument(
        "--merge",
        type=Path,
        action="append",
        default=[],
        help="with --summarise: add the strategies of another run's saved rows (same folds); repeatable",
    )
    add_part_options(p)
    args = p.parse_args()
    unknown = set(args.strategies.split(",")) - set(STRATEGIES)
    if unknown:
        raise SystemExit(f"--strategies: unknown {sorted(unknown)}; choose from {','.join(STRATEGIES)}")
    settings = {
        k: getattr(args, k) for k in ("dataset", "folds", "rounds", "batch", "strategies", "svi_steps")
    }

    def summary(rows: list[dict[str, Any]], folds: list[int]) -> None:
        for other in args.merge:  # other runs' strategies, on the same folds
            saved = {}
            for line in other.read_text().splitlines():
                record = json.loads(line)
                saved[record["fold"]] = record["row"]
            missing = [f for f in folds if f not in saved]
            if missing:
                raise SystemExit(f"--merge {other}: no rows for folds {missing}")
            rows = [{**row, **saved[f]} for row, f in zip(rows, folds)]
        summarise(rows, folds)
        if args.plot:
            plot(rows, args.plot, f"{args.dataset}: {args.batch} labels a round, {len(rows)} folds")

    from orlr_ppl import enable_compilation_cache

    enable_compilation_cache()  # rounds of one fold share most programs: loaded from disk, not compiled
    run_in_parts(args, settings, lambda train, test, fold: fit_fold(args, train, test, fold), summary)


if __name__ == "__main__":
    main()
