"""Why the posterior mean is less calibrated than MAP: one table, both datasets.

On the demo's data (200 MIML-digits training bags, 66 test bags from a disjoint image pool) and on a
70/30 bag split of Letter Frost (seed 0), ``ORLR(inference="map")`` and ``ORLR(inference=NUTS(...))`` are
fitted under the same Normal prior, twice: from the bags' label sets (the package's use), and with
every training instance's label given (``instance_labels``), where the bag DP has nothing left to
resolve. Each row reports, on the test instances:

- accuracy, ECE (top class, 10 bins) and mean top-class confidence (below accuracy: underconfident);
- ``|W|``: the MAP's weight norm, or the mean norm of the posterior draws;
- for NUTS, the average single draw's accuracy and confidence (each draw's own softmax), and the
  fit's max R-hat and min bulk ESS.

If the bag model's ambiguity (which instance carries which of the bag's labels) caused the
underconfidence, the instance-labelled posterior would be calibrated. The prior's volume is the
other candidate: with ``d (C - 1)`` weights (576 on the digits, 368 on Letter Frost), draws lie at
the typical radius of the posterior, several times the MAP's norm, in directions the data leave to
the prior; each such draw is confident and the draws disagree, so their average is not.

    python -m reproduction.calibration --prior-scale 1.0
"""

from __future__ import annotations

import argparse
import time
import warnings

import numpy as np

from benchmarks.harness import SHARED, host_devices
from orlr_ppl import NUTS, ORLR, metrics
from orlr_ppl.data.datasets import load_letter_frost, make_miml_digits
from orlr_ppl.inference.checks.diagnostics import ConvergenceWarning


def datasets(uci_path: str) -> dict:
    """(train, test) of the demo (``orlr-ppl demo``'s defaults) and of Letter Frost's 70/30 split."""
    demo = (
        make_miml_digits(200, max_size=8, seed=0, split="train"),
        make_miml_digits(66, max_size=8, seed=1, split="test"),
    )
    return {"demo digits": demo, "Letter Frost": load_letter_frost(uci_path).train_test_split(0.3, seed=0)}


def draw_probabilities(model: ORLR, bags: list[np.ndarray]) -> np.ndarray:
    """(S, n, C) each kept posterior draw's softmax on the test instances (standardised as in fit)."""
    x = (np.concatenate(bags) - model.feature_mean_) / model.feature_scale_
    logits = np.einsum("nd,sdc->snc", x, model.coef_draws_) + model.intercept_draws_[:, None, :]
    logits -= logits.max(-1, keepdims=True)
    p = np.exp(logits)
    return p / p.sum(-1, keepdims=True)


def row(model: ORLR, test, seconds: float) -> dict[str, float]:
    proba = model.predict_proba(test)
    y = np.concatenate(test.instance_labels)
    out = {
        "accuracy": metrics.instance_accuracy(test.instance_labels, [p.argmax(1) for p in proba]),
        "ece": metrics.expected_calibration_error(test.instance_labels, proba),
        "confidence": float(np.mean(np.concatenate([p.max(1) for p in proba]))),
        "seconds": seconds,
    }
    if hasattr(model, "coef_draws_"):
        draws = draw_probabilities(model, test.bags)
        out["norm"] = float(np.linalg.norm(model.coef_draws_.reshape(len(draws), -1), axis=1).mean())
        out["draw_accuracy"] = float(np.mean(draws.argmax(-1) == y))
        out["draw_confidence"] = float(draws.max(-1).mean())
        table = model.diagnostics().table
        out["max_rhat"], out["min_ess_bulk"] = float(table["r_hat"].max()), float(table["ess_bulk"].min())
    else:
        out["norm"] = float(np.linalg.norm(model.coef_))
    return out


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--uci-path", default=str(SHARED / "letter-recognition.data"))
    parser.add_argument("--prior-scale", type=float, default=1.0, help="the Normal prior's sd")
    parser.add_argument("--num-warmup", type=int, default=300, help="NUTS warmup per chain")
    parser.add_argument("--num-samples", type=int, default=500, help="NUTS draws per chain")
    parser.add_argument("--num-chains", type=int, default=2, help="NUTS chains")
    args = parser.parse_args()
    host_devices()  # the chains in parallel, before JAX starts
    print(
        "| data | labels | fit | accuracy | ECE | mean confidence | ‖W‖ | one draw: acc / conf | R-hat, ESS |"
    )
    print("| --- | --- | --- | --- | --- | --- | --- | --- | --- |")
    for name, (train, test) in datasets(args.uci_path).items():
        for labels in ("bags", "instances"):
            known = train.instance_labels if labels == "instances" else None
            for method in ("map", "nuts"):
                nuts = NUTS(
                    num_warmup=args.num_warmup,
                    num_samples=args.num_samples,
                    num_chains=args.num_chains,
                    max_num_samples=0,  # never extended: a fixed cost
                    progress_bar=False,
                )
                model = ORLR(inference=nuts if method == "nuts" else "map", prior_scale=args.prior_scale)
                t0 = time.perf_counter()
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore", ConvergenceWarning)  # R-hat and ESS are in the row
                    model.fit(train.bags, train.label_sets, instance_labels=known)
                r = row(model, test, time.perf_counter() - t0)
                one = f"{r['draw_accuracy']:.3f} / {r['draw_confidence']:.3f}" if method == "nuts" else ""
                conv = f"{r['max_rhat']:.3f}, {r['min_ess_bulk']:.0f}" if method == "nuts" else ""
                print(
                    f"| {name} | {labels} | {method.upper()} | {r['accuracy']:.3f} | {r['ece']:.3f} | "
                    f"{r['confidence']:.3f} | {r['norm']:.1f} | {one} | {conv} |",
                    flush=True,
                )


if __name__ == "__main__":
    main()
