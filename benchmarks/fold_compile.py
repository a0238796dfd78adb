"""A user's own cross-validation loop: fit time per fold, and why a fold compiled (issue 53, item 3).

In a fresh process with the persistent compilation cache off, ``ORLR(method=...)`` with its
defaults is fitted on each of the 10 training folds in turn (``MIMLData.kfold``, seed 0), as a
user's loop would. A fold that takes seconds compiled a new program. Each row gives the fold's
packing as the estimator made it (``dp.packing.canonical_layout``: the layout of an earlier fold
wherever a fold fits it) and, for EM, the M-step's row count (``log_density.flat_rows``), and
says which of them no fold before it had.

    python benchmarks/fold_compile.py --method em
    python benchmarks/fold_compile.py --method map --dataset hja-union
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
from orlr_ppl.data.hja import load_hja  # noqa: E402
from orlr_ppl.dp.packing import canonical_size  # noqa: E402
from orlr_ppl.model.numpyro_model import make_model_data  # noqa: E402

SHARED = Path(__file__).resolve().parents[2] / "shared" / "data"


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--method", choices=["em", "map"], default="em")
    parser.add_argument("--dataset", choices=["letter-frost", "hja-union"], default="letter-frost")
    parser.add_argument("--uci-path", default=str(SHARED / "letter-recognition.data"))
    parser.add_argument("--hja-path", default=str(SHARED / "hja"))
    args = parser.parse_args()
    if args.dataset == "letter-frost":
        data = load_letter_frost(args.uci_path)
    else:
        data = load_hja(args.hja_path, version="union")
    seen: set[tuple] = set()
    print(f"{args.dataset}, method={args.method}")
    print("| fold | fit s | iterations | buckets (bags x instances, K) | M-step rows | new |")
    print("| --- | --- | --- | --- | --- | --- |")
    for k, (train, _) in enumerate(data.kfold(10, seed=0)):
        t0 = time.perf_counter()
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # a fold that stops short of tol is not the point here
            model = ORLR(method=args.method).fit(train)
        seconds = time.perf_counter() - t0
        # The same packing as the fit's: the estimator's layout for these bags is the one recalled.
        packed = make_model_data(train.bags, train.label_sets, train.n_classes, canonical_shapes=True)
        buckets = tuple((b.mask.shape, b.max_labels) for b in packed.buckets)
        rows = canonical_size(max(train.n_instances, packed.max_instances), steps=8)  # as ``flat_rows``
        keys = [("buckets", ("b", buckets))] + ([("rows", ("r", rows))] if args.method == "em" else [])
        new = [what for what, key in keys if key not in seen]
        seen |= {key for _, key in keys}
        text = ", ".join(f"{b}x{n} K={m}" for (b, n), m in buckets)
        shown = rows if args.method == "em" else "-"
        print(f"| {k} | {seconds:.2f} | {model.n_iter_} | {text} | {shown} | {', '.join(new) or '-'} |")


if __name__ == "__main__":
    main()
