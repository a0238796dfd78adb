"""Accuracy and fit time of ORLR-EM with pruning and with stochastic EM (Pham, Raich & Fern 6.6), 10-fold.

``ORLR(prune=f)`` leaves out the fraction ``f`` of the training bags with the most DP work
(``n_b |Y_b| 2^|Y_b|``, 6.6.2); ``ORLR(inference=EM(bag_fraction=s))`` runs stochastic EM on the
fraction ``s`` of the bags per iteration (6.6.1). For each setting, a 10-fold cross-validation (seed 0) of
ORLR-EM with the comparison's settings (50 iterations, no prior, one Armijo step per M-step)
prints the mean inductive and transductive instance accuracy, the share of the DP work per
iteration, and the fit time per fold: the median (folds whose shape family was compiled before)
and the total (compiles included). Every setting runs in the same process, after the previous.

    python -m benchmarks.bench_prune [--fractions 0,0.05,0.1,0.2] [--bag-fractions 0.5,0.2,0.1]
        [--uci-path P] [--hja-path P]
"""

from __future__ import annotations

import argparse
import warnings

import numpy as np

from benchmarks.harness import SHARED, machine
from orlr_ppl import EM, ORLR
from orlr_ppl.data.datasets import load_hja, load_letter_frost
from orlr_ppl.dp.packing import dp_work
from orlr_ppl.evaluation.cross_validation import cross_validate


def _work_left(data, fraction: float) -> float:
    """Share of the DP work the pruned training set keeps (all bags, as one fit would see them)."""
    work = dp_work([len(x) for x in data.bags], [len(s) for s in data.label_sets])
    n_out = int(np.floor(fraction * len(work)))
    return float(np.sort(work)[: len(work) - n_out].sum() / work.sum())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--fractions", default="0,0.05,0.1,0.2", help="prune fractions, comma list")
    parser.add_argument(
        "--bag-fractions", default="0.5,0.2,0.1", help="stochastic EM's bag fractions, comma list ('' none)"
    )
    parser.add_argument("--uci-path", default=str(SHARED / "letter-recognition.data"))
    parser.add_argument("--hja-path", default=str(SHARED / "hja"))
    args = parser.parse_args()
    settings = [("prune", float(f)) for f in args.fractions.split(",") if f]
    settings += [("sample", float(f)) for f in args.bag_fractions.split(",") if f]
    print(machine())
    datasets = {
        "Letter Frost": load_letter_frost(args.uci_path, seed=0),
        "HJA union": load_hja(args.hja_path, version="union"),
    }
    for name, data in datasets.items():
        print(f"{name}: {data!r}")
        print(
            f"  {'setting':>14} {'work left':>10} {'inductive %':>12} {'transductive %':>15} "
            f"{'fit s median':>13} {'fit s total':>12}"
        )
        for kind, f in settings:
            em = EM(max_iter=50, m_steps=1, bag_fraction=f if kind == "sample" else 1.0)
            option = {"prune": f} if kind == "prune" else {"random_state": 0}
            model = {
                "ORLR-EM": lambda em=em, option=option: ORLR(
                    inference=em, prior_scale=None, intercept_scale=None, **option
                )
            }
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")  # 50 iterations rarely meet tol: the budget is the point
                res = cross_validate(data, model, "both", 10, 0).to_json()
            per = res["folds"]["ORLR-EM"]
            seconds = np.asarray(per["fit_seconds"])
            left = _work_left(data, f) if kind == "prune" else f
            print(
                f"  {kind + f' {f:g}':>14} {left:>10.2f} {100 * np.mean(per['accuracy_inductive']):>12.1f} "
                f"{100 * np.mean(per['accuracy_transductive']):>15.1f} {np.median(seconds):>13.2f} "
                f"{seconds.sum():>12.1f}"
            )


if __name__ == "__main__":
    main()
