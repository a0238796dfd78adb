"""Compile time of the subset DP with its log-space fallback merged across buckets, against one DP a bucket.

    python benchmarks/dp_compile_fallback.py [--repeats 3] [--dtype float64]

``buckets_dp`` reruns every bucket in log space when a bag comes near underflow. Since
``dp.merging`` it first lays buckets of neighbouring sizes side by side (``merge_plan``), so the
fallback holds fewer DPs; this script compiles ``buckets_dp`` (with posteriors, as a gradient
needs it) both ways in one process, alternating, on buckets of 16 bags of 8 instances with
K = 2..5 and K = 2..8 label slots, and prints the median compile seconds of each and their
ratio. Both programs are then run on data that sends one bag to the fallback, and the largest
difference between their results is printed (they must agree to rounding).
"""

from __future__ import annotations

import argparse
import time

import jax
import jax.numpy as jnp
import numpy as np

import orlr_ppl.dp.subset_dp as subset_dp
from orlr_ppl.dp.subset_dp import BucketInputs, buckets_dp

CASES = {"K = 2..5": (2, 3, 4, 5), "K = 2..8": (2, 3, 4, 5, 6, 7, 8)}


def _buckets(slots: tuple[int, ...], dtype: str) -> list[BucketInputs]:
    """16 bags of 8 instances a bucket; bag 0 of the first bucket has a label ~e^-2000 likely."""
    rng = np.random.default_rng(0)
    out = []
    for k in slots:
        lp = rng.normal(size=(8, k, 16)) - 1.0
        out.append(BucketInputs(jnp.asarray(lp, dtype), jnp.ones((8, 16), bool), jnp.ones((k, 16), bool)))
    first = out[0].slot_log_probs.at[:, 0, 0].set(-2000.0)
    out[0] = out[0]._replace(slot_log_probs=first)
    return out


def _program(buckets: list[BucketInputs]) -> tuple[float, jax.stages.Compiled]:
    fn = jax.jit(lambda b: [(r.log_likelihood, r.posteriors) for r in buckets_dp(b, True)])
    t0 = time.perf_counter()
    compiled = fn.lower(buckets).compile()
    return time.perf_counter() - t0, compiled


def _apart(shapes):
    return [[k] for k in range(len(shapes))]


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--repeats", type=int, default=3, help="compiles of each program (medians are printed)")
    p.add_argument("--dtype", default="float64", choices=["float32", "float64"])
    args = p.parse_args()
    jax.config.update("jax_enable_x64", args.dtype == "float64")
    merged_plan = subset_dp.merge_plan
    for name, slots in CASES.items():
        buckets = _buckets(slots, args.dtype)
        times: dict[str, list[float]] = {"merged": [], "apart": []}
        programs = {}
        for _ in range(args.repeats):
            for how in ("merged", "apart"):
                subset_dp.merge_plan = merged_plan if how == "merged" else _apart
                try:
                    seconds, programs[how] = _program(buckets)
                finally:
                    subset_dp.merge_plan = merged_plan
                times[how].append(seconds)
        outs = {how: jax.tree.leaves(programs[how](buckets)) for how in programs}
        diff = max(float(jnp.max(jnp.abs(a - b))) for a, b in zip(outs["merged"], outs["apart"]))
        groups = len(merged_plan([b.slot_log_probs.shape for b in buckets]))
        med = {how: float(np.median(t)) for how, t in times.items()}
        print(
            f"{name} ({len(slots)} buckets; fallback DPs merged: {groups}, apart: {len(slots)}), "
            f"{args.dtype}: "
            f"compile merged {med['merged']:.2f} s, apart {med['apart']:.2f} s, "
            f"merged / apart {med['merged'] / med['apart']:.2f}x (median of {args.repeats}); "
            f"largest difference {diff:.1e}"
        )


if __name__ == "__main__":
    main()
