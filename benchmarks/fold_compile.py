"""A user's own cross-validation loop: fit time per fold, and why a fold compiled (issue 53, item 3).

In a fresh process with the persistent compilation cache off, ``ORLR(method=...)`` with its
defaults is fitted on each of Letter Frost's 10 training folds in turn (``MIMLData.kfold``, seed
0), as a user's loop would. A fold that takes seconds compiled a new program; each row says what
differs from the folds before it: the set of label-set buckets (``max_labels`` of each, from the
estimator's own canonical packing) or the EM M-step's row count (``log_density.flat_rows``:
the training instances rounded up to a canonical size, 8 steps an octave).

    python benchmarks/fold_compile.py --method em
    python benchmarks/fold_compile.py --method map
"""

from __future__ import annotations

import argparse
import os
import time
import warnings
from pathlib import Path

os.environ["ORLR_PPL_COMPILATION_CACHE"] = "0"  # before orlr_ppl is imported: compile in this process

from orlr_ppl import ORLR  # noqa: E402
from orlr_ppl.data.datasets import load_letter_frost  # noqa: E402
from orlr_ppl.dp.packing import canonical_size  # noqa: E402
from orlr_ppl.model.numpyro_model import make_model_data  # noqa: E402

SHARED = Path(__file__).resolve().parents[2] / "shared" / "data"


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--method", choices=["em", "map"], default="em")
    parser.add_argument("--uci-path", default=str(SHARED / "letter-recognition.data"))
    args = parser.parse_args()
    data = load_letter_frost(args.uci_path)
    seen: set[tuple] = set()
    print("| fold | fit s | iterations | buckets (bags x instances, K) | M-step rows | new |")
    print("| --- | --- | --- | --- | --- | --- |")
    for k, (train, _) in enumerate(data.kfold(10, seed=0)):
        t0 = time.perf_counter()
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # a fold that stops short of tol is not the point here
            model = ORLR(method=args.method).fit(train)
        seconds = time.perf_counter() - t0
        packed = make_model_data(train.bags, train.label_sets, train.n_classes, canonical_shapes=True)
        buckets = tuple((b.mask.shape, b.max_labels) for b in packed.buckets)
        rows = canonical_size(train.n_instances, steps=8) if args.method == "em" else None
        keys = [("buckets", ("b", buckets))] + ([("rows", ("r", rows))] if rows else [])
        new = [what for what, key in keys if key not in seen]
        seen |= {key for _, key in keys}
        text = ", ".join(f"{b}x{n} K={m}" for (b, n), m in buckets)
        print(f"| {k} | {seconds:.2f} | {model.n_iter_} | {text} | {rows or '-'} | {', '.join(new) or '-'} |")


if __name__ == "__main__":
    main()
