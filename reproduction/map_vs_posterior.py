"""Point estimates against posteriors by proper scores: EM, MAP, Laplace, SVI and NUTS, two priors.

On held-out bags (the demo's one split, or 10 bag-level folds of Letter Frost or HJA union, seeded
as ``MIMLData.kfold``), each arm is fitted on the training bags' label sets with the package's
defaults for its method (features standardised on the training bags, inside the fit) and scored on
the held-out instances (``metrics.instance_scores``):

- accuracy, the two proper scores, log loss (NLL) and Brier, ECE, and accuracy on the 80 % most
  confident instances; a posterior's predictive is the mean over its draws, ``E p(y | x, theta)``;
- the transductive accuracy on the training bags' instances given their label sets;
- seconds, the prior scale used, and the method's own check: the MAP's first-order residual, the
  Laplace and SVI draws' importance k-hat, NUTS's max R-hat, min bulk/tail ESS and divergences.

Arms are ``METHOD@PRIOR``: PRIOR is a number, ``evidence`` (``prior_scale="evidence"``: the scale
that maximises the Laplace evidence of the training bags, chosen inside each fit) or ``cv``
(``ORLRCV``: the scale of the default grid with the best held-out bag log-likelihood in 3-fold
bag-level cross-validation of MAP fits, then the method at it). The
summary gives each arm's mean and sd over folds, and each posterior's NLL minus the MAP's under the
same prior, fold by fold.

    python -m reproduction.map_vs_posterior --dataset demo
    python -m reproduction.map_vs_posterior --dataset letter-frost --save lf.jsonl
    python -m reproduction.map_vs_posterior --dataset hja-union --arms em,map,laplace,svi \\
        --priors 1,evidence --save hja.jsonl
"""

from __future__ import annotations

import argparse
import json
import time
import warnings

import jax
import numpy as np

from benchmarks.harness import add_part_options, host_devices, machine, run_in_parts
from orlr_ppl import ORLR, ORLRCV, metrics
from orlr_ppl.data.datasets import make_miml_digits

METHODS = ("em", "map", "laplace", "svi", "nuts")
POSTERIORS = ("laplace", "svi", "nuts")
SCORES = (*metrics.INSTANCE_SCORES, "transductive_accuracy")


def demo_split():
    """``orlr-ppl demo``'s data: 300 training bags, 100 test bags of a disjoint image pool, blank pixels
    dropped."""
    train = make_miml_digits(300, max_size=4, seed=0, split="train")
    test = make_miml_digits(100, max_size=4, seed=1, split="test")
    blank = train.linear_dependencies().redundant
    return train.drop_features(blank), test.drop_features(blank)


def arms(args: argparse.Namespace) -> list[tuple[str, str, float | str]]:
    """``(name, method, prior_scale)`` for each of ``--arms`` under each of ``--priors``."""
    out = []
    for prior in args.priors.split(","):
        scale: float | str = prior if prior in ("evidence", "cv") else float(prior)
        for method in args.arms.split(","):
            if method not in METHODS:
                raise SystemExit(f"--arms: {method!r} is not one of {METHODS}")
            out.append((f"{method}@{prior}", method, scale))
    return out


def check(model: ORLR, method: str) -> dict:
    """The method's own check of its fit."""
    if method in ("em", "map"):
        return {"optimality": float(model.optimality_), "converged": bool(model.converged_)}
    report = model.diagnostics()
    if method == "nuts":
        table = report.table
        return {
            "max_rhat": float(table["r_hat"].max()),
            "min_ess_bulk": float(table["ess_bulk"].min()),
            "min_ess_tail": float(table["ess_tail"].min()),
            "divergences": int(report.sampler["n_divergent"]),
        }
    return {"importance_k": report.sampler["approximation_k"], "converged": report.converged}


def fit_fold(args: argparse.Namespace):
    def run(train, test, fold: int) -> dict:
        row: dict = {}
        for name, method, scale in arms(args):
            t0 = time.perf_counter()
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")  # each fit's checks are recorded below
                if scale == "cv":  # the scale by bag-level cross-validation, then the method at it
                    model = ORLRCV(inference=method, progress_bar=False, random_state=fold)
                else:
                    model = ORLR(inference=method, prior_scale=scale, random_state=fold)
                model.fit(train)
            seconds = time.perf_counter() - t0
            proba = model.predict_proba(test)
            scores = metrics.instance_scores(test.instance_labels, proba)
            scores["transductive_accuracy"] = metrics.instance_accuracy(
                train.instance_labels, model.predict(train, train.label_sets)
            )
            row[name] = {
                **scores,
                "seconds": round(seconds, 1),
                "prior_scale": float(model.prior_scale_),
                "check": check(model, method),
            }
            jax.clear_caches()  # each fold compiles for its own shapes; keep the memory flat
        return row

    return run


def summarise(rows: list[dict], folds: list[int]) -> None:
    """Each arm's mean (sd) of every score over the folds, and each posterior's NLL less the MAP's."""
    names = list(rows[0])
    print(f"mean (sd) over {len(rows)} fold(s):")
    print(f"{'arm':<18}" + "".join(f"{s:>22}" for s in (*SCORES, "seconds")))
    for name in names:
        cells = []
        for s in (*SCORES, "seconds"):
            v = np.array([r[name][s] for r in rows], float)
            cells.append(f"{v.mean():.4f} ({v.std(ddof=1) if len(v) > 1 else 0:.4f})")
        print(f"{name:<18}" + "".join(f"{c:>22}" for c in cells))
    for name in names:
        method, _, prior = name.partition("@")
        base = f"map@{prior}"
        if method in POSTERIORS and base in names:
            d = np.array([r[name]["log_loss"] - r[base]["log_loss"] for r in rows])
            print(
                f"NLL {name} - {base}: {d.mean():+.4f} (sd {d.std(ddof=1) if len(d) > 1 else 0:.4f}), "
                f"lower in {int((d < 0).sum())} of {len(d)} folds"
            )


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--dataset", choices=["demo", "letter-frost", "hja-union"], default="demo")
    parser.add_argument("--arms", default=",".join(METHODS), help=f"comma list of {METHODS}")
    parser.add_argument("--priors", default="1,evidence", help="comma list of prior scales, evidence, cv")
    parser.add_argument("--folds", type=int, default=10)
    add_part_options(parser)
    args = parser.parse_args()
    if "nuts" in args.arms:
        host_devices()  # the chains in parallel, before JAX starts
    print(machine(), flush=True)
    settings = {"dataset": args.dataset, "arms": args.arms, "priors": args.priors, "folds": args.folds}
    if args.dataset == "demo":
        row = fit_fold(args)(*demo_split(), 0)
        print(json.dumps(row), flush=True)
        if args.save is not None:
            with args.save.open("a") as out:
                out.write(json.dumps({"settings": settings, "fold": 0, "row": row}) + "\n")
        summarise([row], [0])
        return
    run_in_parts(args, settings, fit_fold(args), summarise)


if __name__ == "__main__":
    main()
