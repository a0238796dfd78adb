"""Can the NUTS posterior be trusted, and what does it cost? (issue 8)

Fits ``ORLR(method="nuts")`` with its defaults (or the settings given) on all
144 Letter Frost bags (features standardised) and on the MIML-digits demo's
training bags, and prints, per dataset: wall time, the sampler's settings,
max R-hat and min bulk/tail ESS over every weight and intercept, divergences,
tree-depth counts, step sizes, E-BFMI, the PSIS-LOO k-hat share, the worst
parameters, the minimum ESS per class, and, for the worst class, how often the
chains switch the instance that carries it in the bags where it occurs (the
signature of a multimodal posterior: which instance is the rare class is not
identified by the bag labels).

    python benchmarks/bench_posterior.py                      # both datasets, defaults
    python benchmarks/bench_posterior.py --dataset letter-frost --num-samples 1000 --json
    python benchmarks/bench_posterior.py --dataset letter-frost --seed 1   # other chains
    python benchmarks/bench_posterior.py --dataset letter-frost --compilation-cache /tmp/c  # twice

Not a test: machines are shared, so wall times are for the record only.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import time
import warnings
from pathlib import Path

import jax
import numpy as np

import orlr_ppl
from orlr_ppl import ORLR
from orlr_ppl.data.datasets import load_letter_frost, make_miml_digits
from orlr_ppl.inference.diagnostics import ConvergenceWarning

SHARED = Path(__file__).resolve().parents[2] / "shared" / "data"


def _datasets(which: str, uci_path: str) -> dict[str, tuple[list, list, list[str]]]:
    out = {}
    if which in ("letter-frost", "both"):
        data = load_letter_frost(uci_path, seed=0)
        data = data.fit_standardizer().transform(data)
        out["letter-frost"] = (data.bags, data.label_sets, list(data.class_names))
    if which in ("digits", "both"):
        train = make_miml_digits(200, seed=0, split="train")
        out["digits"] = (train.bags, train.label_sets, [str(c) for c in range(10)])
    return out


def _mode_switching(model: ORLR, bags: list, sets: list, cls: int) -> list[dict]:
    """Per bag holding class ``cls``: which instance the draws give it, and how often that changes."""
    post = model.posterior_.posterior
    w = np.asarray(post["W"])
    b = np.asarray(post["beta"])
    rows = []
    for i, s in enumerate(sets):
        if cls not in list(s):
            continue
        per_chain = []
        for c in range(w.shape[0]):
            logits = [bags[i] @ w[c, t] + b[c, t] for t in range(0, w.shape[1], 5)]
            p = np.stack([q[:, cls] for q in orlr_ppl.instance_posteriors(logits, [s] * len(logits))])
            carrier = p.argmax(axis=1)
            per_chain.append(
                {
                    "share_by_instance": np.round(
                        np.bincount(carrier, minlength=len(bags[i])) / len(carrier), 2
                    ).tolist(),
                    "switches_per_100_thinned_draws": round(
                        100 * float(np.mean(carrier[1:] != carrier[:-1])), 1
                    ),
                }
            )
        rows.append({"bag": i, "n_instances": len(bags[i]), "chains": per_chain})
    return rows


def run(name: str, bags: list, sets: list, class_names: list[str], params: dict, seed: int = 0) -> dict:
    model = ORLR(method="nuts", random_state=seed, **params)
    t0 = time.perf_counter()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)  # reported below, in full
        model.fit(bags, sets)
    wall = time.perf_counter() - t0
    diag = model.diagnostics()
    table = diag.table
    stats = model.posterior_.sample_stats
    depth = np.asarray(stats["tree_depth"]).ravel()
    cls_of = {}
    for row in table.index:
        inside = row[row.index("[") + 1 : -1].split(", ")
        cls_of[row] = inside[-1]
    per_class = table.assign(cls=[cls_of[r] for r in table.index]).groupby("cls")[
        ["ess_bulk", "ess_tail", "r_hat"]
    ]
    per_class = per_class.agg({"ess_bulk": "min", "ess_tail": "min", "r_hat": "max"}).sort_values("ess_bulk")
    worst_cls = per_class.index[0]
    cls_index = class_names.index(worst_cls) if worst_cls in class_names else int(worst_cls)
    depths, counts = np.unique(depth, return_counts=True)
    return {
        "dataset": name,
        "n_bags": len(bags),
        "n_instances": int(sum(len(x) for x in bags)),
        "n_parameters": int(
            sum(
                np.prod(model.posterior_.posterior[v].shape[2:])
                for v in ("W_raw", "beta_raw")
                if v in model.posterior_.posterior
            )
        ),
        "settings": {
            k: model.get_params()[k]
            for k in ("num_warmup", "num_samples", "num_chains", "prior_scale", "random_state")
        },
        "chain_method": stats.attrs.get("chain_method"),
        "wall_s": round(wall, 1),
        "max_rhat": float(table["r_hat"].max()),
        "min_ess_bulk": float(table["ess_bulk"].min()),
        "median_ess_bulk": float(table["ess_bulk"].median()),
        "min_ess_tail": float(table["ess_tail"].min()),
        "divergences": int(np.asarray(stats["diverging"]).sum()),
        "tree_depth_counts": {int(d): int(c) for d, c in zip(depths, counts)},
        "mean_n_steps": float(np.asarray(stats["n_steps"]).mean()),
        "step_size_per_chain": [float(v) for v in np.asarray(stats["step_size"])[:, -1]],
        "sampler": {k: v for k, v in diag.sampler.items() if not isinstance(v, np.ndarray)},
        "worst_parameters": table.sort_values("ess_bulk")
        .head(8)[["mean", "sd", "r_hat", "ess_bulk", "ess_tail"]]
        .round(3)
        .reset_index()
        .to_dict(orient="records"),
        "per_class_min_ess_bulk": per_class.round(3).reset_index().to_dict(orient="records"),
        "worst_class": worst_cls,
        "worst_class_mode_switching": _mode_switching(model, bags, sets, cls_index),
        "problems": list(diag.problems),
        "goal_met": bool(
            table["r_hat"].max() <= 1.01
            and table["ess_bulk"].min() >= 400
            and table["ess_tail"].min() >= 400
            and int(np.asarray(stats["diverging"]).sum()) == 0
        ),
    }


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.ArgumentDefaultsHelpFormatter
    )
    parser.add_argument("--dataset", choices=["letter-frost", "digits", "both"], default="both")
    parser.add_argument("--uci-path", default=str(SHARED / "letter-recognition.data"))
    parser.add_argument("--num-warmup", type=int, default=None, help="default: ORLR's")
    parser.add_argument("--num-samples", type=int, default=None, help="default: ORLR's")
    parser.add_argument("--num-chains", type=int, default=None, help="default: ORLR's")
    parser.add_argument("--prior-scale", type=float, default=None, help="default: ORLR's")
    parser.add_argument(
        "--seed", type=int, default=0, help="ORLR's random_state: the chains' keys and jitter"
    )
    parser.add_argument(
        "--compilation-cache",
        default=None,
        metavar="DIR",
        help="keep compiled programs in DIR (JAX's persistent cache, as the CLI does); "
        "run twice to time a warm cache",
    )
    parser.add_argument("--json", action="store_true", help="print JSON only")
    args = parser.parse_args()
    if args.compilation_cache:
        orlr_ppl.enable_compilation_cache(args.compilation_cache)
    params = {
        k: v
        for k, v in {
            "num_warmup": args.num_warmup,
            "num_samples": args.num_samples,
            "num_chains": args.num_chains,
            "prior_scale": args.prior_scale,
        }.items()
        if v is not None
    }
    machine = {
        "platform": platform.platform(),
        "processor": platform.processor() or platform.machine(),
        "cpu_count": os.cpu_count(),
        "jax": jax.__version__,
        "devices": [str(d) for d in jax.devices()],
    }
    results = [
        run(name, *ds, params, args.seed) for name, ds in _datasets(args.dataset, args.uci_path).items()
    ]
    if args.json:
        print(json.dumps({"machine": machine, "results": results}, indent=1, default=str))
        return
    print(f"machine: {machine}")
    for r in results:
        print(
            f"\n== {r['dataset']}: {r['n_bags']} bags, {r['n_instances']} instances, "
            f"{r['n_parameters']} parameters"
        )
        print(f"settings {r['settings']}, chains {r['chain_method']}; wall {r['wall_s']} s")
        print(
            f"max R-hat {r['max_rhat']:.3f}, min bulk ESS {r['min_ess_bulk']:.0f} (median "
            f"{r['median_ess_bulk']:.0f}), min tail ESS {r['min_ess_tail']:.0f}, "
            f"divergences {r['divergences']}"
        )
        print(f"tree depth counts {r['tree_depth_counts']}, mean leapfrog steps {r['mean_n_steps']:.1f}")
        print(f"step size per chain {np.round(r['step_size_per_chain'], 4).tolist()}")
        print("worst parameters:")
        for row in r["worst_parameters"]:
            print("  ", row)
        print("min bulk ESS per class:", {d["cls"]: d["ess_bulk"] for d in r["per_class_min_ess_bulk"]})
        print(f"worst class {r['worst_class']!r}: which instance carries it, per bag and chain:")
        for row in r["worst_class_mode_switching"]:
            print("  ", row)
        print("problems:", r["problems"] or "none")
        print(
            "goal (R-hat <= 1.01, bulk and tail ESS >= 400, no divergences):",
            "met" if r["goal_met"] else "missed",
        )


if __name__ == "__main__":
    main()
