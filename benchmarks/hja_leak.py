"""MLSP-style data with impossible bags, fitted whole with a leak (issue 12).

The MLSP-2013 birds data ship as a MIML relational ARFF in which some bags
name more species than they have segments: impossible under the union, so
until issue 12 they could only be dropped. The HJA labelled segments with
the published bag labels have the same defect: recording 219 names 3 species
for 2 segments, and 62 recordings name a species none of their segments
carries (the paper relabels them by hand: "HJA union"). Here those data go
through the MLSP path: written as a relational ARFF with a Mulan XML
(``write_miml_arff``) and read back (``read_miml_arff``), bags and labels
only; the published instance labels are used to score, matched by bag id.

10-fold split by bag (seed 0, over all 548 bags), ``ORLR`` defaults
(standardised features, EM), three fits:

  * ``drop-impossible``: the union model, recording 219 left out (the paper's HJA);
  * ``whole+leak``: ``ORLR(leak="learn")`` on every bag, 219 included;
  * ``union-relabelled``: the union model on the hand-relabelled sets ("HJA union"),
    the paper's fix, for reference.

Each is scored by inductive accuracy on the test bags' labelled segments and
transductive accuracy on the training bags' (given the label sets each fit
was trained on: the relabelled ones for ``union-relabelled``). Prints one line
per fold and fit, then mean ± sd over folds, the learnt leak and the median
fit time.

    python benchmarks/hja_leak.py [--hja-path DIR] [--folds 10] [--method em]
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

import numpy as np

from orlr_ppl import ORLR
from orlr_ppl.data.hja import load_hja
from orlr_ppl.data.io import read_miml_arff, write_miml_arff

HERE = Path(__file__).resolve().parent
DEFAULT_HJA = HERE.parent.parent / "shared" / "data" / "hja"


def _accuracy(proba: list[np.ndarray], truth: list[np.ndarray]) -> float:
    p, y = np.concatenate(proba), np.concatenate(truth)
    labelled = y >= 0
    return float(np.mean(p[labelled].argmax(axis=1) == y[labelled]))


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--hja-path", type=Path, default=DEFAULT_HJA)
    parser.add_argument("--folds", type=int, default=10)
    parser.add_argument("--method", default="em", choices=["em", "map"])
    args = parser.parse_args()

    published = load_hja(args.hja_path, "original", "labelled")
    union = load_hja(args.hja_path, "union", "labelled")
    with tempfile.TemporaryDirectory() as tmp:
        left_out = write_miml_arff(published, Path(tmp) / "hja.arff")
        mlsp = read_miml_arff(Path(tmp) / "hja.arff", Path(tmp) / "hja.xml")
    assert [str(b) for b in mlsp.bag_ids] == [str(b) for b in published.bag_ids]
    truth = published.instance_labels  # the ARFF cannot hold them (left_out), so scored from the source
    print(f"ARFF round trip: {mlsp!r}; instance labels kept aside: {left_out}")
    print(
        f"impossible under the union: {[mlsp.bag_ids[b] for b in mlsp.impossible_bags()]}; with a leak: "
        f"{mlsp.impossible_bags(leak=True)}"
    )

    fits = {
        "drop-impossible": (mlsp, lambda: ORLR(method=args.method)),
        "whole+leak": (mlsp, lambda: ORLR(method=args.method, leak="learn")),
        "union-relabelled": (union, lambda: ORLR(method=args.method)),
    }
    rows: dict[str, list[dict[str, float]]] = {name: [] for name in fits}
    for fold, (train, test) in enumerate(mlsp.kfold_indices(args.folds, seed=0)):
        for name, (data, make) in fits.items():
            fit_ids = np.asarray(train)
            if name == "drop-impossible":
                fit_ids = np.setdiff1d(fit_ids, data.impossible_bags())
            tr, te = data.subset(fit_ids), mlsp.subset(test)
            t0 = time.perf_counter()
            model = make().fit(tr)
            seconds = time.perf_counter() - t0
            row = {
                "inductive": _accuracy(model.predict_proba(te), [truth[i] for i in test]),
                "transductive": _accuracy(
                    model.predict_proba(tr, tr.label_sets),
                    [truth[i] for i in fit_ids],
                ),
                "seconds": seconds,
            }
            if getattr(model, "leak_", None) is not None:
                row["leak"] = float(model.leak_)
            rows[name].append(row)
            print(f"fold {fold} {name}: " + " ".join(f"{k}={v:.4f}" for k, v in row.items()), flush=True)
    print(f"\n{args.folds}-fold by bag, method={args.method}; accuracy on labelled segments, mean ± sd")
    for name, per in rows.items():
        stats = " ".join(
            f"{k}={100 * np.mean([r[k] for r in per]):.1f}±{100 * np.std([r[k] for r in per]):.1f}"
            for k in ("inductive", "transductive")
        )
        leak = f" leak={np.mean([r['leak'] for r in per]):.4f}" if "leak" in per[0] else ""
        print(f"{name}: {stats}{leak} median_fit_s={np.median([r['seconds'] for r in per]):.2f}")


if __name__ == "__main__":
    main()
