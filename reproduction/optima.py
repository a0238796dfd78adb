"""Where EM and MAP stop: the log posterior, its gradient, iterations and seconds, and other optima.

On four data sets (the README's 60 digit bags, the demo's 300 with blank pixels dropped, all Letter
Frost bags, all HJA-union bags; features standardised; Normal prior of sd 1, intercepts' 10), in
float64 as the estimators fit:

- ``MAP()`` and ``EM()`` from zero weights with their defaults: the log posterior reached, the
  first-order residual (the gradient's largest component), iterations and seconds (the first fit of
  a process, compiling included, then the median of ``--repeats`` more);
- EM with a budget of ``--em-max-iter`` iterations, to show how many it needs;
- MAP from ``--starts`` random starts (every raw weight ``Normal(0, --start-scale)``): the distinct
  optima they reach (log posteriors within 1e-4 of each other are one optimum) and how many starts
  reached each.

    python -m reproduction.optima --save reproduction/results/optima.json
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
import warnings
from pathlib import Path

import jax
import numpy as np

from benchmarks.harness import SHARED, load_dataset, machine, standardised
from orlr_ppl import EM, MAP
from orlr_ppl.data.datasets import make_miml_digits
from orlr_ppl.inference.point.em import fit_em
from orlr_ppl.inference.point.map import fit_map
from orlr_ppl.model.numpyro_model import make_model_data

DATASETS = ("readme", "demo", "letter-frost", "hja-union")


def dataset(name: str):
    """The training bags of ``name`` (``DATASETS``), standardised, and the class count."""
    if name == "readme":
        data = make_miml_digits(60, max_size=4, seed=0, split="train")
    elif name == "demo":
        data = make_miml_digits(300, max_size=4, seed=0, split="train")
        data = data.drop_features(data.linear_dependencies().redundant)
    else:
        data = load_dataset(name, SHARED)
    return standardised(data)[0], len(data.class_names)


def timed(fn):
    t0 = time.perf_counter()
    out = fn()
    return out, time.perf_counter() - t0


def run(name: str, args: argparse.Namespace) -> dict:
    train, c = dataset(name)
    with jax.enable_x64(True), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        data = make_model_data(train.bags, train.label_sets, c, dtype=np.float64)
        row: dict = {"dataset": name, "bags": len(train.bags), "instances": train.n_instances}
        for method, fit in (
            ("map", lambda: fit_map(data, 1.0, 10.0, MAP.max_iter, MAP.tol)),
            ("em", lambda: fit_em(data, 1.0, 10.0, EM.max_iter, EM.tol)),
        ):
            res, first = timed(fit)
            rest = [timed(fit)[1] for _ in range(args.repeats)]
            row[method] = {
                "log_posterior": res.log_posterior,
                "optimality": res.optimality,
                "n_iter": res.n_iter,
                "converged": res.converged,
                "first_seconds": round(first, 2),
                "seconds": round(statistics.median(rest), 2) if rest else None,
            }
        long = fit_em(data, 1.0, 10.0, args.em_max_iter, EM.tol)
        row["em_long"] = {
            "max_iter": args.em_max_iter,
            "log_posterior": long.log_posterior,
            "optimality": long.optimality,
            "n_iter": long.n_iter,
            "converged": long.converged,
        }
        rng = np.random.default_rng(args.seed)
        reached = []
        for _ in range(args.starts):
            init = {"W_raw": args.start_scale * rng.standard_normal((data.n_features, c - 1))}
            init["beta_raw"] = args.start_scale * rng.standard_normal(c - 1)
            res = fit_map(data, 1.0, 10.0, MAP.max_iter, MAP.tol, init=init)
            reached.append(res.log_posterior)
        optima: list[list[float]] = []
        for value in sorted(reached, reverse=True):
            if optima and abs(optima[-1][0] - value) <= 1e-4:
                optima[-1][1] += 1
            else:
                optima.append([value, 1])
        row["starts"] = {"scale": args.start_scale, "optima": optima}
    return row


def table(rows: list[dict]) -> str:
    """The guide's table: one line per data set."""
    lines = [
        "| data | bags | MAP: log posterior, residual, iterations, s "
        "| EM: log posterior, residual, iterations, s | EM, longer "
        "| MAP from random starts: optima (starts) |",
        "| --- | --- | --- | --- | --- | --- |",
    ]
    for r in rows:
        cells = []
        for m in ("map", "em"):
            x = r[m]
            cells.append(
                f"{x['log_posterior']:.3f}, {x['optimality']:.1e}, {x['n_iter']}, "
                f"{x['first_seconds']:.1f} ({x['seconds']})"
            )
        lo = r["em_long"]
        longer = f"{lo['log_posterior']:.3f}, {lo['optimality']:.1e} after {lo['n_iter']}"
        optima = ", ".join(f"{v:.3f} ({n})" for v, n in r["starts"]["optima"][:4])
        lines.append(f"| {r['dataset']} | {r['bags']} | {cells[0]} | {cells[1]} | {longer} | {optima} |")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--datasets", default=",".join(DATASETS))
    parser.add_argument("--repeats", type=int, default=2, help="timed fits after the first, per method")
    parser.add_argument("--em-max-iter", type=int, default=3000)
    parser.add_argument("--starts", type=int, default=8)
    parser.add_argument("--start-scale", type=float, default=0.1)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--save", default=None, help="JSON file for the rows")
    args = parser.parse_args()
    print(machine(), flush=True)
    rows = []
    for name in args.datasets.split(","):
        rows.append(run(name, args))
        print(json.dumps(rows[-1]), flush=True)
        if args.save:
            Path(args.save).write_text(json.dumps(rows, indent=1))
        jax.clear_caches()
    print(table(rows))


if __name__ == "__main__":
    main()
