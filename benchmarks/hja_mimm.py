"""The multi-instance mixture model (``MIMM``) on HJA union, labelled segments: inductive instance accuracy.

10-fold split by bag (seed 0, ``MIMLData.kfold_indices``): each fold fits
``MIMM`` (defaults: standardised features, Dirichlet(2) weights, the
conjugate prior of ``inference.mimm_steps.make_prior``) on the training bags
and their label sets, and scores ``model.predict(test bags)`` (inductive: no
label set) against the test bags' instance labels. Prints one line per fold,
then the mean ± sd over folds and the median fit time (the first fold's
includes compiling; canonical shapes let later folds reuse its program).

    python benchmarks/hja_mimm.py [--hja-path DIR] [--folds 10] [--covariance diag|full]
"""

from __future__ import annotations

import argparse
import time
import warnings
from pathlib import Path

import numpy as np

from orlr_ppl import MIMM
from orlr_ppl.data.hja import load_hja
from orlr_ppl.evaluation.metrics import instance_accuracy

HERE = Path(__file__).resolve().parent
DEFAULT_HJA = HERE.parent.parent / "shared" / "data" / "hja"


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--hja-path", type=Path, default=DEFAULT_HJA)
    parser.add_argument("--folds", type=int, default=10)
    parser.add_argument("--covariance", default="diag", choices=["diag", "full"])
    args = parser.parse_args()

    data = load_hja(args.hja_path, "union", "labelled")
    print(f"{data}; MIMM(covariance={args.covariance!r}), {args.folds}-fold split by bag")
    accs, times = [], []
    for k, (train_idx, test_idx) in enumerate(data.kfold_indices(args.folds, seed=0)):
        train, test = data.subset(train_idx), data.subset(test_idx)
        model = MIMM(covariance=args.covariance)
        start = time.perf_counter()
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            model.fit(train)
        times.append(time.perf_counter() - start)
        acc = instance_accuracy(test.instance_labels, model.predict(test.bags))
        accs.append(acc)
        note = " (not converged)" if caught and not model.converged_ else ""
        print(f"fold {k}: accuracy {acc:.4f}, {model.n_iter_} iterations, fit {times[-1]:.2f} s{note}")
    accs = np.asarray(accs)
    print(
        f"MIMM {args.covariance}: instance accuracy {accs.mean():.4f} ± {accs.std(ddof=1):.4f} "
        f"over {len(accs)} folds; median fit time {np.median(times):.2f} s"
    )


if __name__ == "__main__":
    main()
