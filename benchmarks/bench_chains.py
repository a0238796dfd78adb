"""NUTS chains on every core: what a Python user's default gets, against the chains one after another.

Each way runs in a fresh Python process with no ``XLA_FLAGS`` (so JAX shows one CPU device, as in
a user's notebook that never called ``set_host_device_count``): ``fit_nuts`` with ``NUTS()``'s
defaults (4 chains of 300 warmup + 1,000 draws, from the MAP, its progress bar, no extension so
that every run does the same work) on ``orlr-ppl demo``'s 300 training bags, timed from the
process's start (imports and compiling included) and around the fit. ``auto`` is what the package chooses
(``chain_setup.resolve_chain_method``: threads on a CPU with fewer devices than chains);
``sequential`` is the reference, measured in the same run; ``vectorized`` (one program, the chains
in step) is measured with ``--all``. The goal: auto at most 0.6 of sequential's wall time.

    python -m benchmarks.bench_chains [--repeats 3] [--all]

Not a test: wall times depend on the machine and its load; the ratio is the figure to quote.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time

from benchmarks.harness import machine

_RUN = """
import json, sys, time
t0 = time.perf_counter()
import jax
from orlr_ppl import NUTS, datasets
from orlr_ppl.features.maps import make_feature_map
from orlr_ppl.inference.posterior.nuts import fit_nuts
from orlr_ppl.model.numpyro_model import make_model_data

train = datasets.make_miml_digits(300, max_size=4, seed=0, split="train")
train = train.drop_features(train.linear_dependencies().redundant)
import numpy as np
scaler = make_feature_map("standard").fit(np.concatenate(train.bags))
data = make_model_data([scaler.transform(x) for x in train.bags], train.label_sets, train.n_classes)
t1 = time.perf_counter()
post = fit_nuts(data, NUTS(max_num_samples=0), chain_method=sys.argv[1])
t2 = time.perf_counter()
print(json.dumps({"ran": post.sample_stats.attrs["chain_method"], "devices": jax.local_device_count(),
                  "fit_s": t2 - t1, "process_s": t2 - t0}))
"""


def run_once(method: str) -> dict:
    """One fresh process fitting with ``chain_method=method``; its report."""
    env = {k: v for k, v in os.environ.items() if k != "XLA_FLAGS"}
    t0 = time.perf_counter()
    out = subprocess.run(
        [sys.executable, "-c", _RUN, method], env=env, capture_output=True, text=True, check=True
    )
    report = json.loads(out.stdout.strip().splitlines()[-1])
    report["wall_s"] = time.perf_counter() - t0
    return report


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--repeats", type=int, default=1, help="runs of each way, alternated; medians printed")
    p.add_argument("--all", action="store_true", help="also time vectorized chains")
    args = p.parse_args()
    methods = ["sequential", "auto"] + (["vectorized"] if args.all else [])
    runs: dict[str, list[dict]] = {m: [] for m in methods}
    for _ in range(args.repeats):
        for m in methods:
            runs[m].append(run_once(m))
            print(
                m, json.dumps({k: round(v, 1) if isinstance(v, float) else v for k, v in runs[m][-1].items()})
            )
    print(machine())

    def median(m: str, key: str) -> float:
        values = sorted(r[key] for r in runs[m])
        return values[len(values) // 2]

    base = median("sequential", "wall_s")
    for m in methods:
        print(
            f"{m:>10} ({runs[m][0]['ran']}, {runs[m][0]['devices']} device): "
            f"wall {median(m, 'wall_s'):.1f} s, fit {median(m, 'fit_s'):.1f} s, "
            f"ratio to sequential {median(m, 'wall_s') / base:.2f}"
        )


if __name__ == "__main__":
    main()
