"""The ``orlr-ppl`` command line."""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Sequence

import numpy as np


def _accuracy(probas: Sequence[np.ndarray], labels: Sequence[np.ndarray]) -> float:
    return float(np.mean(np.concatenate([p.argmax(axis=1) == y for p, y in zip(probas, labels)])))


def _demo(args: argparse.Namespace) -> int:
    from tqdm import tqdm

    from .datasets import make_miml_digits
    from .infer_map import fit_map
    from .objective import make_flat_data
    from .predict import predict_proba_inductive, predict_proba_transductive

    steps = tqdm(total=3, desc="demo", disable=args.quiet, file=sys.stderr)
    train = make_miml_digits(args.n_bags, seed=args.seed)
    test = make_miml_digits(max(args.n_bags // 3, 1), seed=args.seed + 1)
    data = make_flat_data(train.bags, train.label_sets, train.n_classes)
    steps.update()
    t0 = time.perf_counter()
    fit = fit_map(data, prior_scale=args.prior_scale)
    elapsed = time.perf_counter() - t0
    steps.update()
    inductive = _accuracy(predict_proba_inductive(fit.W, fit.beta, test.bags), test.instance_labels)
    transductive = _accuracy(
        predict_proba_transductive(fit.W, fit.beta, train.bags, train.label_sets), train.instance_labels
    )
    steps.update()
    steps.close()
    n_inst = sum(len(b) for b in train.bags)
    print(f"MIML digits: {len(train.bags)} training bags, {n_inst} instances, 10 classes")
    print(
        f"MAP (prior_scale={args.prior_scale}): {fit.n_iter} L-BFGS iterations in {elapsed:.1f}s, "
        f"log posterior {fit.log_posterior:.2f}"
    )
    print(f"instance accuracy, inductive (held-out bags): {inductive:.3f}")
    print(f"instance accuracy, transductive (training bags, given their label sets): {transductive:.3f}")
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="orlr-ppl", description="Instance annotation from bag labels with the ORed-logistic model."
    )
    sub = parser.add_subparsers(dest="command", required=True)
    demo = sub.add_parser("demo", help="fit the embedded MIML digits data and report instance accuracy")
    demo.add_argument("--n-bags", type=int, default=300, help="training bags (default 300)")
    demo.add_argument("--prior-scale", type=float, default=1.0, help="sd of the weight prior")
    demo.add_argument("--seed", type=int, default=0)
    demo.add_argument("--quiet", action="store_true", help="no progress bar")
    demo.set_defaults(func=_demo)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    return args.func(args)


if __name__ == "__main__":
    raise SystemExit(main())
