"""What ``standardize="quantile-normal"`` costs against ``standardize=True``, on HJA union.

    python benchmarks/feature_map_cost.py [--repeats 5] [--max-iter 200]

Times, median of ``--repeats`` runs in one process: the map alone on all 4,998 instances (fit and
apply: ``fit_quantiles`` + ``quantile_normal`` against scikit-learn's ``StandardScaler`` fit and
transform), then an ``ORLR(method="em", max_iter=...)`` fit and an inductive ``predict_proba`` of
every bag under each option. Prints each time and the ratio quantile-normal / standardised. The
first fit of each kind is a warm-up (it compiles) and is not counted. Last, the heavy-tail check a
NUTS or SVI fit on linear features runs before sampling (``extreme_z``), against the same
standardisation.
"""

from __future__ import annotations

import argparse
import time
import warnings
from collections.abc import Callable
from pathlib import Path

import numpy as np
from sklearn.preprocessing import StandardScaler

from orlr_ppl import ORLR
from orlr_ppl.data.datasets import load_hja
from orlr_ppl.data.quantile_normal import extreme_z, fit_quantiles, quantile_normal
from orlr_ppl.inference.diagnostics import ConvergenceWarning

HJA = Path(__file__).resolve().parents[2] / "shared" / "data" / "hja"


def median_seconds(run: Callable[[], object], repeats: int) -> float:
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        run()
        times.append(time.perf_counter() - start)
    return float(np.median(times))


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--repeats", type=int, default=5, help="timed runs of each step (median)")
    parser.add_argument("--max-iter", type=int, default=200, help="EM iterations of each ORLR fit")
    args = parser.parse_args()
    data = load_hja(HJA, "union", "labelled")
    x = np.concatenate(data.bags)
    print(f"HJA union: {data.n_bags} bags, {x.shape[0]} instances, {x.shape[1]} features")
    rows = {
        "map alone (fit + apply)": (
            lambda: quantile_normal(x, fit_quantiles(x)),
            lambda: StandardScaler().fit(x).transform(x),
        )
    }
    fits = {}
    for option in ("quantile-normal", True):
        model = ORLR(method="em", max_iter=args.max_iter, standardize=option)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", ConvergenceWarning)
            fits[option] = (model, lambda m=model: m.fit(data))
            fits[option][1]()  # warm-up: compiles
    rows["ORLR EM fit"] = (fits["quantile-normal"][1], fits[True][1])
    rows["predict_proba, every bag"] = (
        lambda: fits["quantile-normal"][0].predict_proba(data),
        lambda: fits[True][0].predict_proba(data),
    )
    rows["heavy-tail check"] = (lambda: extreme_z(x), rows["map alone (fit + apply)"][1])
    print(f"{'step':28s} {'quantile-normal s':>18s} {'standardised s':>15s} {'ratio':>6s}")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        for name, (mapped, plain) in rows.items():
            a, b = median_seconds(mapped, args.repeats), median_seconds(plain, args.repeats)
            print(f"{name:28s} {a:18.4f} {b:15.4f} {a / b:6.2f}")


if __name__ == "__main__":
    main()
