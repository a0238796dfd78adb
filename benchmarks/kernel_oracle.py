"""How far kernel hyperparameter selection is from the best fixed setting: a test-set oracle, one run.

    python benchmarks/kernel_oracle.py --method korlr|kslr [--gamma-factors 1,4] [--prior-scales 3,10,30]
        [--data-seeds 0] [--raw] [--linear] [--run-folds 0,1] [--max-iter N]

A diagnosis, not a method: every (gamma, scale) of the grid is fitted on each training fold
of Letter Frost (bag-level folds, seed 0, as ``orlr-ppl evaluate``) and scored on the test
fold's instance labels, which no fit may see. So the best row is what a perfect selection
rule could reach on these folds, and "per-fold oracle" (the best setting picked per test
fold) is optimistic by construction. Beside ``kernel_orlr.py``'s selected figures it splits a
gap to a published figure into the selection's share and the rest.

- ``--method korlr``: ``ORLR(kernel="rbf", gamma=g, prior_scale=s, max_iter=200)``, EM,
  standardised features (the package's default). ``kslr``: ``SoftmaxRegression(kernel="rbf",
  ...)`` on instance labels (max_iter 3000); ``--raw`` fits it on the raw 0-15 features.
- gamma is a multiple of the median heuristic on the training fold's (fitted) features.
- ``--data-seeds``: Letter Frost's letter draws (``load_letter_frost(seed=...)``); the folds
  stay seed 0. ``--linear`` adds the linear model (``ORLR()`` or ``SoftmaxRegression()``)
  on the same folds.
"""

from __future__ import annotations

import argparse
import itertools

import numpy as np
from kernel_orlr import SHARED, timed_fit  # benchmarks/ is on a script's path

from orlr_ppl import ORLR, SoftmaxRegression
from orlr_ppl.data.datasets import load_letter_frost
from orlr_ppl.data.kernel import median_gamma


def _accuracy(model, train, test) -> float:
    return timed_fit(model, train)[0].score(test)


def _model(method: str, gamma: float | None, scale: float | None, raw: bool, max_iter: int | None):
    """The kernel model at (gamma, scale), or with gamma None the linear one (package defaults)."""
    if method == "korlr":
        return (
            ORLR()
            if gamma is None
            else ORLR(kernel="rbf", gamma=gamma, prior_scale=scale, max_iter=max_iter or 200)
        )
    if gamma is None:
        return SoftmaxRegression(standardize=not raw)
    return SoftmaxRegression(
        kernel="rbf", gamma=gamma, prior_scale=scale, standardize=not raw, max_iter=max_iter or 3000
    )


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--method", choices=["korlr", "kslr"], required=True)
    p.add_argument("--gamma-factors", default="1,4")
    p.add_argument("--prior-scales", default="3,10,30")
    p.add_argument("--data-seeds", default="0")
    p.add_argument("--raw", action="store_true", help="kslr only: raw features, not standardised")
    p.add_argument("--linear", action="store_true", help="the linear model on the same folds too")
    p.add_argument("--run-folds", default=None, help="comma list (default: all 10)")
    p.add_argument("--max-iter", type=int, default=None, help="default: 200 (korlr), 3000 (kslr)")
    args = p.parse_args()
    if args.raw and args.method != "kslr":
        p.error("--raw is for --method kslr (ORLR standardises its features)")
    factors = [float(f) for f in args.gamma_factors.split(",")]
    scales = [float(s) for s in args.prior_scales.split(",")]
    run = None if args.run_folds is None else {int(f) for f in args.run_folds.split(",")}
    for seed in (int(s) for s in args.data_seeds.split(",")):
        data = load_letter_frost(SHARED / "letter-recognition.data", seed=seed)
        acc: dict[tuple, dict[int, float]] = {}
        for fold, (train, test) in enumerate(data.kfold(10, seed=0)):
            if run is not None and fold not in run:
                continue
            x = np.concatenate(train.bags).astype(np.float64)
            if not args.raw:
                x = (x - x.mean(0)) / x.std(0)
            base = median_gamma(x, 0)
            grid = list(itertools.product(factors, scales)) + ([(None, None)] if args.linear else [])
            for f, s in grid:
                model = _model(args.method, None if f is None else base * f, s, args.raw, args.max_iter)
                acc.setdefault((f, s), {})[fold] = _accuracy(model, train, test)
            shown = " ".join(f"{k[0] or 'lin'}/{k[1] or '-'}={100 * v[fold]:.1f}" for k, v in acc.items())
            print(f"seed {seed} fold {fold}: {shown}", flush=True)
        print(f"seed {seed}, {args.method}{' raw' if args.raw else ''}: mean ± sd over folds (%)")
        for (f, s), by_fold in acc.items():
            a = 100 * np.array(list(by_fold.values()))
            name = "linear" if f is None else f"gamma {f:g} x median, scale {s:g}"
            print(f"  {name:32} {a.mean():5.1f} ± {a.std(ddof=1):4.1f}  ({len(a)} folds)")
        kernel = [k for k in acc if k[0] is not None]
        best = [max(acc[k][fold] for k in kernel) for fold in acc[kernel[0]]]
        print(f"  {'per-fold oracle (optimistic)':32} {100 * np.mean(best):5.1f}")


if __name__ == "__main__":
    main()
