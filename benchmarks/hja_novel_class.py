"""HJA with every segment (issue 12): ORLR with a novel class, against the labelled-only fit.

The published HJA files hold 10,232 segments, 5,234 of them unlabelled (rain, noise,
species nobody named). The JMLR paper fits the 4,998 labelled ones alone. Here, in the
same 10-fold split by bag (seed 0, ``MIMLData.kfold_indices``), on the published bag
labels ("original"):

  * labelled-only: ``ORLR()`` on the labelled segments (recording 219 dropped: 3 species,
    2 labelled segments, impossible under the union), the paper's protocol;
  * all segments: ``ORLR(novel_class=True)`` and ``ORLR(novel_class=True, leak="learn")``
    on every segment of the training bags.

Each is scored on the test bags' labelled segments (inductive accuracy over the 13
species; a segment predicted novel counts as wrong, and ``acc_species`` is the argmax
over the species alone), and the all-segment fits by the ROC AUC of p(novel) for the
test bags' unlabelled segments against their labelled ones. Features are standardised
on each training fold (``ORLR``'s default). Prints one line per fold and fit, then
the mean and sd over folds, and the median fit time.

    python benchmarks/hja_novel_class.py [--hja-path DIR] [--folds 10] [--method em]
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import numpy as np
from sklearn.metrics import roc_auc_score

from orlr_ppl import ORLR
from orlr_ppl.data.hja import load_hja

HERE = Path(__file__).resolve().parent
DEFAULT_HJA = HERE.parent.parent / "shared" / "data" / "hja"


def _scores(model: ORLR, test, n_classes: int, novel: bool) -> dict[str, float]:
    proba = np.concatenate(model.predict_proba(test))
    truth = np.concatenate(test.instance_labels)
    labelled = truth >= 0
    out = {
        "acc": float(np.mean(proba[labelled].argmax(axis=1) == truth[labelled])),
        "acc_species": float(np.mean(proba[labelled, :n_classes].argmax(axis=1) == truth[labelled])),
    }
    if novel and np.any(~labelled):
        out["auc_novel"] = float(roc_auc_score(~labelled, proba[:, n_classes]))
    return out


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--hja-path", type=Path, default=DEFAULT_HJA)
    parser.add_argument("--folds", type=int, default=10)
    parser.add_argument("--method", default="em", choices=["em", "map"])
    args = parser.parse_args()

    every = load_hja(args.hja_path, "original", "all")
    labelled, dropped = load_hja(args.hja_path, "original", "labelled").drop_impossible()
    position = {bag: i for i, bag in enumerate(labelled.bag_ids)}
    c = every.n_classes
    fits = {
        "labelled-only": lambda: ORLR(method=args.method),
        "all+novel": lambda: ORLR(method=args.method, novel_class=True),
        "all+novel+leak": lambda: ORLR(method=args.method, novel_class=True, leak="learn"),
    }
    rows: dict[str, list[dict[str, float]]] = {name: [] for name in fits}
    for fold, (train, test) in enumerate(every.kfold_indices(args.folds, seed=0)):
        for name, make in fits.items():
            if name == "labelled-only":
                pick = lambda ids: [position[every.bag_ids[i]] for i in ids if every.bag_ids[i] in position]  # noqa: E731
                tr = labelled.subset(pick(train))
            else:
                tr = every.subset(train)
            t0 = time.perf_counter()
            model = make().fit(tr)
            seconds = time.perf_counter() - t0
            # Labelled-only is scored on the same labelled test segments as the others.
            score = _scores(model, every.subset(test), c, name != "labelled-only")
            if getattr(model, "leak_", None) is not None:
                score["leak"] = float(model.leak_)
            rows[name].append({**score, "seconds": seconds})
            print(
                f"fold {fold} {name}: " + " ".join(f"{k}={v:.4f}" for k, v in rows[name][-1].items()),
                flush=True,
            )
    print(f"\n{args.folds}-fold by bag, method={args.method}, dropped from labelled-only: {dropped}")
    for name, per in rows.items():
        keys = [k for k in per[0] if k != "seconds"]
        stats = " ".join(
            f"{k}={100 * np.mean([r[k] for r in per]):.1f}±{100 * np.std([r[k] for r in per]):.1f}"
            if k != "leak"
            else f"leak={np.mean([r[k] for r in per]):.4f}"
            for k in keys
        )
        print(f"{name}: {stats} median_fit_s={np.median([r['seconds'] for r in per]):.2f}")


if __name__ == "__main__":
    main()
