"""Posterior mean vs MAP, 10-fold, on Letter Frost or HJA union: accuracy, ECE and bag metrics per fold.

In every fold (bag-level, seeded as ``MIMLData.kfold``), features are standardised on the
training bags, then ``ORLR(inference=MAP(max_iter=1000))`` and ``ORLR(inference="nuts")``
(package defaults, same prior) are fitted on the training bags' label sets and scored on the
held-out bags:

- inductive instance accuracy, ECE (top-class confidence, 10 bins) and mean top-class
  confidence of the MAP predictive and of the posterior-mean predictive
  ``E_theta p(y | x, theta)``, and the transductive accuracy on the training bags' instances
  given their label sets;
- the five bag metrics with the paper's bag score (``max_i p(y_i = c | x_i)``)
  and with the model's own ``P(c in Y_b | X_b) = 1 - prod_i (1 - p(y_i = c | x_i))``
  (``bag_scores(rule="model")``); the predicted label set is the union of
  predicted instance labels in both (only the ranking metrics depend on the rule);
- the same for ``ORLR(inference="svi")`` (mean-field guide, package defaults), to set the
  variational posterior beside NUTS's (``--arms map,nuts,svi``, the default);
- the NUTS fit's convergence (max R-hat, min bulk/tail ESS, divergences) and times;
- with ``--extra-prior-scale S``, MAP and NUTS again with ``prior_scale=S`` (arms
  ``map@S``, ``nuts@S``), to test whether the default prior explains the ECE gap.

    python -m reproduction.map_vs_posterior --arms map,nuts --save lf.json
    python -m reproduction.map_vs_posterior --dataset hja-union --arms map,nuts \\
        --standardize quantile-normal --whiten --save hja.json
"""

from __future__ import annotations

import argparse
import json
import time
import warnings
from pathlib import Path

import jax
import numpy as np

from benchmarks.harness import SHARED, host_devices, standardised
from orlr_ppl import MAP, NUTS, ORLR, metrics
from orlr_ppl.data.datasets import load_letter_frost
from orlr_ppl.data.hja import load_hja
from orlr_ppl.inference.diagnostics import ConvergenceWarning

METHODS = ("map", "nuts", "svi")
BAG_METRICS = ("hamming_loss", "ranking_loss", "one_error", "coverage", "average_precision")


def _scores(model: ORLR, test, train) -> dict[str, float]:
    proba = model.predict_proba(test)
    out = {
        "accuracy": metrics.instance_accuracy(test.instance_labels, [p.argmax(1) for p in proba]),
        # Transductive: the training bags' instances, given their bags' label sets.
        "transductive_accuracy": metrics.instance_accuracy(
            train.instance_labels, model.predict(train, train.label_sets)
        ),
        "ece": metrics.expected_calibration_error(test.instance_labels, proba),
        # Above accuracy: overconfident; below: underconfident (ECE alone hides the side).
        "mean_confidence": float(np.mean(np.concatenate([p.max(1) for p in proba]))),
        "hamming_loss": metrics.hamming_loss(test.label_sets, model.predict_bags(test)),
    }
    for rule in ("max", "model"):
        s = model.bag_scores(test, rule=rule)
        for name in BAG_METRICS[1:]:
            out[f"{name}_{rule}"] = getattr(metrics, name)(test.label_sets, s)
    return out


def _mean_sd(values: list[float]) -> list[float]:
    return [float(np.mean(values)), float(np.std(values, ddof=1)) if len(values) > 1 else 0.0]


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.ArgumentDefaultsHelpFormatter
    )
    parser.add_argument("--dataset", choices=["letter-frost", "hja-union"], default="letter-frost")
    parser.add_argument("--uci-path", default=str(SHARED / "letter-recognition.data"))
    parser.add_argument("--hja-path", default=str(SHARED / "hja"))
    parser.add_argument("--arms", default=",".join(METHODS), help="comma list of methods to fit")
    parser.add_argument(
        "--standardize", default="true", help="ORLR(features=...): true (standard), quantile-normal"
    )
    parser.add_argument("--whiten", action="store_true", help="NUTS in Laplace-whitened coordinates")
    parser.add_argument("--folds", type=int, default=10)
    parser.add_argument(
        "--only-folds", type=str, default=None, help="comma list of folds to run (default all)"
    )
    parser.add_argument("--seed", type=int, default=0, help="Letter Frost's draw, and the folds")
    parser.add_argument("--json", action="store_true")
    parser.add_argument(
        "--extra-prior-scale",
        type=float,
        default=None,
        help="also fit MAP and NUTS with this prior_scale (arms map@S, nuts@S), to test the prior's part",
    )
    parser.add_argument(
        "--save", default=None, help="JSON file updated with the per-fold rows after each fold"
    )
    args = parser.parse_args()
    if "nuts" in args.arms or args.extra_prior_scale is not None:
        host_devices()  # the chains in parallel, before JAX starts
    if args.dataset == "letter-frost":
        data = load_letter_frost(args.uci_path, seed=args.seed)
    else:
        data = load_hja(args.hja_path, version="union")
    folds = list(data.kfold(args.folds, seed=args.seed))
    wanted = range(args.folds) if args.only_folds is None else [int(f) for f in args.only_folds.split(",")]
    arms = args.arms.split(",")
    features = "standard" if args.standardize == "true" else args.standardize
    if args.extra_prior_scale is not None:
        arms += [f"map@{args.extra_prior_scale:g}", f"nuts@{args.extra_prior_scale:g}"]
    rows = []
    for k in wanted:
        train, test = folds[k]
        train, test = standardised(train, test)
        row: dict = {"fold": k}
        for name in arms:
            method, _, scale = name.partition("@")
            t0 = time.perf_counter()
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", ConvergenceWarning)  # recorded below
                inference = {"map": MAP(max_iter=1000), "nuts": NUTS(whiten=args.whiten)}.get(method, method)
                extra = {"prior_scale": float(scale)} if scale else {}
                model = ORLR(inference=inference, random_state=k, features=features, **extra).fit(train)
            row[f"{name}_seconds"] = round(time.perf_counter() - t0, 1)
            row[name] = _scores(model, test, train)
            if method == "nuts":
                table = model.diagnostics().table
                stats = model.posterior_.sample_stats
                row[f"{name}_convergence"] = {
                    "max_rhat": float(table["r_hat"].max()),
                    "min_ess_bulk": float(table["ess_bulk"].min()),
                    "min_ess_tail": float(table["ess_tail"].min()),
                    "divergences": int(np.asarray(stats["diverging"]).sum()),
                }
        rows.append(row)
        if args.save:
            Path(args.save).write_text(json.dumps(rows, indent=1))  # kept fold by fold: a long run
        jax.clear_caches()  # each fold compiles for its own bag shapes
        if not args.json:
            cells = [f"{name} acc {row[name]['accuracy']:.3f} ECE {row[name]['ece']:.3f}" for name in arms]
            if "nuts" in arms:
                cells.append(f"NUTS {row['nuts_seconds']} s, {row['nuts_convergence']}")
            print(f"fold {k}: " + " | ".join(cells), flush=True)
    keys = rows[0]["map"].keys()
    summary = {name: {key: _mean_sd([r[name][key] for r in rows]) for key in keys} for name in arms}
    if args.json:
        print(json.dumps({"folds": rows, "mean_sd": summary}, indent=1))
        return
    print("mean ± sd over folds:")
    for key in keys:
        cells = "   ".join(f"{m} {summary[m][key][0]:.4f} ± {summary[m][key][1]:.4f}" for m in arms)
        print(f"  {key:<28} {cells}")


if __name__ == "__main__":
    main()
