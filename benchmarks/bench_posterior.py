"""What a posterior costs, and whether it can be trusted: NUTS (Laplace and SVI with ``--inference``).

Fits ``ORLR(inference=NUTS(...))`` (the package's defaults unless options say otherwise) and
prints the wall time, max R-hat and least bulk/tail ESS over every weight and intercept,
divergences, leapfrog steps per draw (median, largest, mean), tree-depth counts, step sizes,
E-BFMI, the least bulk ESS per 1,000 leapfrog steps of all chains (the cost measure that does not
depend on the machine), the package's own diagnostics and the worst parameters. Data:

- ``letter-frost``: all 144 Letter Frost bags (features standardised);
- ``digits``: 200 training bags of MIML digits (up to 8 a bag);
- ``demo``: ``orlr-ppl demo``'s 300 training bags (2-4 digits, its blank pixels dropped);
- ``readme``: the README's worked example, 60 bags of 2-4 digits;
- ``both``: ``letter-frost`` and ``digits``, one after the other in one process (the default);
- ``hja-union``: HJA union's labelled segments, fold ``--fold``'s training bags
  (``MIMLData.kfold(10, seed=0)``, as the reproductions), scored on its held-out bags; or all
  548 bags (``--all-bags``). ``--drop-dependent`` first drops the features
  ``MIMLData.linear_dependencies`` names (one of the tied x14-x16, one of the histogram bins).

On Letter Frost and the digits it also prints the minimum ESS per class and, for the worst class,
how often the chains switch the instance that carries it in the bags where it occurs (the
signature of a multimodal posterior: the bag labels do not say which instance is the rare class).

    python -m benchmarks.bench_posterior                                  # both, the defaults
    python -m benchmarks.bench_posterior --dataset letter-frost --seed 1   # other chains
    python -m benchmarks.bench_posterior --dataset letter-frost --compilation-cache /tmp/c  # twice
    python -m benchmarks.bench_posterior --dataset hja-union --num-chains 1 --num-warmup 150 \\
        --num-samples 30 --fixed-draws [--whiten never] [--prior group_horseshoe --prior-scale 3]

``--inference laplace`` or ``svi`` (``--guide lowrank``) fits that approximation with its
defaults instead and prints its wall time and the importance-ratio k̂ of its draws against the
posterior (the check it must pass, at most 0.7).

A short chain (the last line: one chain of 150 + 30) probes the geometry (steps per draw, step
size); it is no posterior to report. Not a test: machines are shared, so wall times are for the
record only.
"""

from __future__ import annotations

import argparse
import json
import time
import warnings

import numpy as np

from benchmarks.harness import SHARED, host_devices, load_dataset, machine, standardised, without_dependent


def _datasets(args: argparse.Namespace) -> dict[str, tuple]:
    """name -> (training data, held-out data or None)."""
    from orlr_ppl.data.datasets import load_letter_frost, make_miml_digits

    out = {}
    if args.dataset in ("letter-frost", "both"):
        data = load_letter_frost(args.uci_path, seed=0)
        out["letter-frost"] = (standardised(data)[0], None)
    if args.dataset in ("digits", "both"):
        out["digits"] = (make_miml_digits(200, seed=0, split="train"), None)
    if args.dataset == "demo":  # orlr-ppl demo's training bags, its blank pixels dropped
        demo = make_miml_digits(300, max_size=4, seed=0, split="train")
        out["demo"] = (demo.drop_features(demo.linear_dependencies().redundant), None)
    if args.dataset == "readme":  # the README's worked example
        out["readme"] = (make_miml_digits(60, max_size=4, seed=0, split="train"), None)
    if args.dataset == "hja-union":
        data = load_dataset("hja-union")
        train, test = list(data.kfold(10, seed=0))[args.fold]
        if args.all_bags:
            train, test = data, None
        if args.drop_dependent:
            train, held_out, dropped = without_dependent(train, train if test is None else test)
            test = None if test is None else held_out
            print(f"dropped {dropped}")
        out["hja-union"] = (train, test)
    return out


def _mode_switching(model, bags: list, sets: list, cls: int) -> list[dict]:
    """Per bag holding class ``cls``: which instance the draws give it, and how often that changes."""
    import orlr_ppl

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


def _model(args: argparse.Namespace, seed: int):
    from orlr_ppl import NUTS, ORLR

    settings = {
        "num_warmup": args.num_warmup,
        "num_samples": args.num_samples,
        "num_chains": args.num_chains,
        "target_accept": args.target_accept,
    }
    settings = {k: v for k, v in settings.items() if v is not None}
    if args.fixed_draws:
        settings["max_num_samples"] = args.num_samples or NUTS().num_samples  # no extension
    from orlr_ppl.cli.commands import WHITEN  # the command line's spelling of NUTS(whiten=...)

    nuts = NUTS(
        dense_mass=args.dense_mass, whiten=WHITEN[args.whiten], progress_bar=args.progress_bar, **settings
    )
    params = {"prior": args.prior, "features": "standard" if args.standardize == "true" else args.standardize}
    if args.prior_scale is not None:
        params["prior_scale"] = args.prior_scale
    return ORLR(inference=nuts, random_state=seed, **params)


def run_approximation(name: str, train, args: argparse.Namespace, seed: int) -> dict:
    """A Laplace or SVI fit (their defaults) of ``train``: the wall time and the k̂ checks."""
    from orlr_ppl import ORLR, SVI, Laplace

    inference = Laplace() if args.inference == "laplace" else SVI(guide=args.guide, progress_bar=False)
    model = ORLR(inference=inference, random_state=seed)
    t0 = time.perf_counter()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the diagnostics are reported below
        model.fit(train)
    wall = time.perf_counter() - t0
    s = model.diagnostics().sampler
    return {
        "dataset": name,
        "n_bags": len(train.bags),
        "inference": repr(inference),
        "wall_s": round(wall, 1),
        "importance_k": s["approximation_k"],
        "loo_high_k_share": s["loo_high_k_share"],
        "problems": list(model.diagnostics().problems),
    }


def run(name: str, train, test, args: argparse.Namespace, seed: int) -> dict:
    """One NUTS fit of ``train`` and its report (``test``: held-out bags to score, or None)."""
    model = _model(args, seed)
    t0 = time.perf_counter()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the diagnostics are reported below, in full
        model.fit(train)
    wall = time.perf_counter() - t0
    diag = model.diagnostics()
    table = diag.table[diag.table["sd"] > 0]
    stats = model.posterior_.sample_stats
    steps = np.asarray(stats["n_steps"])
    depth = np.asarray(stats["tree_depth"]).ravel()
    depths, counts = np.unique(depth, return_counts=True)
    out = {
        "dataset": name,
        "n_bags": len(train.bags),
        "n_instances": int(sum(len(x) for x in train.bags)),
        "n_parameters": int(
            sum(
                np.prod(model.posterior_.unconstrained_posterior[v].shape[2:])
                for v in ("W_raw", "beta_raw")
                if v in model.posterior_.unconstrained_posterior
            )
        ),
        "settings": {
            "inference": repr(model.inference),
            "prior": args.prior,
            "prior_scale": args.prior_scale,
        },
        "seed": seed,
        "chain_method": stats.attrs.get("chain_method"),
        "whitened": bool(stats.attrs.get("whiten")),
        "start_condition": float(stats.attrs.get("start_condition", float("nan"))),
        "wall_s": round(wall, 1),
        "min_ess_bulk_per_s": float(table["ess_bulk"].min()) / wall,
        "max_rhat": float(table["r_hat"].max()),
        "min_ess_bulk": float(table["ess_bulk"].min()),
        "median_ess_bulk": float(table["ess_bulk"].median()),
        "min_ess_tail": float(table["ess_tail"].min()),
        "divergences": int(np.asarray(stats["diverging"]).sum()),
        "tree_depth_counts": {int(d): int(c) for d, c in zip(depths, counts)},
        "steps_median_max_mean": [float(np.median(steps)), int(steps.max()), float(steps.mean())],
        "min_ess_bulk_per_1000_steps": 1000 * float(table["ess_bulk"].min()) / float(steps.sum()),
        "step_size_per_chain": [float(v) for v in np.asarray(stats["step_size"])[:, -1]],
        "sampler": {k: v for k, v in diag.sampler.items() if not isinstance(v, np.ndarray)},
        "worst_parameters": table.sort_values("ess_bulk")
        .head(8)[["mean", "sd", "r_hat", "ess_bulk", "ess_tail"]]
        .round(3)
        .reset_index()
        .to_dict(orient="records"),
        "problems": list(diag.problems),
        "goal_met": bool(
            table["r_hat"].max() <= 1.01
            and table["ess_bulk"].min() >= 400
            and table["ess_tail"].min() >= 400
            and int(np.asarray(stats["diverging"]).sum()) == 0
        ),
    }
    if test is not None:
        out["held_out_accuracy"] = float(model.score(test))
    if name != "hja-union":  # the rare-class modes of Letter Frost and the digits
        cls_of = {row: row[row.index("[") + 1 : -1].split(", ")[-1] for row in table.index}
        per_class = table.assign(cls=[cls_of[r] for r in table.index]).groupby("cls")[
            ["ess_bulk", "ess_tail", "r_hat"]
        ]
        per_class = per_class.agg({"ess_bulk": "min", "ess_tail": "min", "r_hat": "max"})
        per_class = per_class.sort_values("ess_bulk")
        worst = per_class.index[0]
        names = list(train.class_names)
        cls_index = names.index(worst) if worst in names else int(worst)
        out["per_class_min_ess_bulk"] = per_class.round(3).reset_index().to_dict(orient="records")
        out["worst_class"] = worst
        out["worst_class_mode_switching"] = _mode_switching(model, train.bags, train.label_sets, cls_index)
    return out


def _print(r: dict) -> None:
    print(
        f"\n== {r['dataset']}: {r['n_bags']} bags, {r['n_instances']} instances, "
        f"{r['n_parameters']} parameters"
    )
    print(f"settings {r['settings']}, seed {r['seed']}, chains {r['chain_method']}; wall {r['wall_s']} s")
    print(
        f"whitened {r['whitened']} (scaled condition number at the start {r['start_condition']:.3g}); "
        f"least bulk ESS a second {r['min_ess_bulk_per_s']:.2f}"
    )
    print(
        f"max R-hat {r['max_rhat']:.3f}, min bulk ESS {r['min_ess_bulk']:.0f} (median "
        f"{r['median_ess_bulk']:.0f}), min tail ESS {r['min_ess_tail']:.0f}, divergences {r['divergences']}"
    )
    median, largest, mean = r["steps_median_max_mean"]
    print(
        f"leapfrog steps a draw: median {median:.0f}, max {largest}, mean {mean:.1f}; tree depth counts "
        f"{r['tree_depth_counts']}; least bulk ESS per 1,000 steps {r['min_ess_bulk_per_1000_steps']:.2f}"
    )
    print(f"step size per chain {np.round(r['step_size_per_chain'], 4).tolist()}")
    if "held_out_accuracy" in r:
        print(f"held-out accuracy {r['held_out_accuracy']:.3f}")
    print("worst parameters:")
    for row in r["worst_parameters"]:
        print("  ", row)
    if "worst_class" in r:
        print("min bulk ESS per class:", {d["cls"]: d["ess_bulk"] for d in r["per_class_min_ess_bulk"]})
        print(f"worst class {r['worst_class']!r}: which instance carries it, per bag and chain:")
        for row in r["worst_class_mode_switching"]:
            print("  ", row)
    print("problems:", r["problems"] or "none")
    print(
        "goal (R-hat <= 1.01, bulk and tail ESS >= 400, no divergences):",
        "met" if r["goal_met"] else "missed",
    )


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument(
        "--dataset", choices=["letter-frost", "digits", "demo", "readme", "both", "hja-union"], default="both"
    )
    p.add_argument("--uci-path", default=str(SHARED / "letter-recognition.data"))
    p.add_argument("--prior", choices=["normal", "l21", "group_horseshoe"], default="normal")
    p.add_argument(
        "--prior-scale",
        type=float,
        default=None,
        help="the Normal's sd, the l21 scale or the horseshoe's slab",
    )
    p.add_argument(
        "--standardize", default="true", help="ORLR(features=...): true (standard) or quantile-normal"
    )
    p.add_argument("--num-warmup", type=int, default=None, help="default: NUTS's")
    p.add_argument("--num-samples", type=int, default=None, help="default: NUTS's")
    p.add_argument("--num-chains", type=int, default=None, help="default: NUTS's")
    p.add_argument("--fixed-draws", action="store_true", help="no extension of unconverged chains")
    p.add_argument("--target-accept", type=float, default=None, help="default: NUTS's")
    p.add_argument("--dense-mass", action="store_true", help="NUTS(dense_mass=True)")
    p.add_argument(
        "--whiten",
        choices=["always", "auto", "never"],
        default="auto",
        help="NUTS(whiten=...): 'auto' (the default) decides from the curvature at the start",
    )
    p.add_argument("--progress-bar", action="store_true", help="NUTS's bar on stderr")
    p.add_argument("--fold", type=int, default=0, help="hja-union: the fold whose training bags are fitted")
    p.add_argument("--all-bags", action="store_true", help="hja-union: fit all 548 bags (no held-out score)")
    p.add_argument(
        "--drop-dependent", action="store_true", help="hja-union: drop linearly dependent features"
    )
    p.add_argument(
        "--seed", type=int, default=None, help="random_state (default: the fold for hja-union, else 0)"
    )
    p.add_argument(
        "--compilation-cache",
        default=None,
        metavar="DIR",
        help="keep compiled programs in DIR (JAX's persistent cache, as the CLI does); "
        "run twice for a warm cache",
    )
    p.add_argument(
        "--inference",
        choices=["nuts", "laplace", "svi"],
        default="nuts",
        help="laplace / svi: their defaults' wall time and importance-ratio k̂ instead of NUTS's report",
    )
    p.add_argument("--guide", choices=["normal", "lowrank"], default="normal", help="SVI's guide")
    p.add_argument("--json", action="store_true", help="print JSON only")
    args = p.parse_args()
    host_devices()  # the chains in parallel, before JAX starts
    import orlr_ppl

    if args.compilation_cache:
        orlr_ppl.enable_compilation_cache(args.compilation_cache)
    seed = args.seed if args.seed is not None else (args.fold if args.dataset == "hja-union" else 0)
    header = machine()
    if args.inference != "nuts":
        results = [run_approximation(name, train, args, seed) for name, (train, _) in _datasets(args).items()]
    else:
        results = [run(name, train, test, args, seed) for name, (train, test) in _datasets(args).items()]
    if args.json:
        print(json.dumps({"machine": header, "results": results}, indent=1, default=str))
        return
    print(header)
    if args.inference != "nuts":
        for r in results:
            print(
                f"{r['dataset']} ({r['n_bags']} bags), {r['inference']}: {r['wall_s']} s, importance k̂ "
                f"{r['importance_k']:.2f}, PSIS-LOO k̂ > 0.7 for {100 * r['loo_high_k_share']:.1f}% of bags"
            )
        return
    for r in results:
        _print(r)


if __name__ == "__main__":
    main()
