"""Simulation-based calibration (SBC) of the package's NUTS posterior, full size.

Each replication draws the weights from the priors of ``orlr_model``,
simulates features and label sets for a fixed set of bags, fits NUTS (by
default 500 warmup, 500 draws, 2 chains, target acceptance 0.8; the recorded run
used the package's 4 chains of 300 + 1,000),
thins the draws to L and ranks the true value of every scalar among them.
Uniform ranks are what a correct posterior gives; the chi-square test per
parameter is Holm-corrected over all parameters and the verdict passes when
every corrected p-value exceeds alpha (see ``orlr_ppl.inference.checks.sbc``). The sampler
is the package's NUTS driver, the program ``fit_nuts`` runs.

    python -m benchmarks.bench_sbc --warmup 300 --draws 1000 --chains 4 --out sbc_ranks.png   # the full run
    python -m benchmarks.bench_sbc --replications 10                 # a timing probe
    python -m benchmarks.bench_sbc --broken        # likelihood ** 4 when fitting: must FAIL

``--broken`` is the check of the check: data still come from the model, but
the fit uses ``p(theta) p(Y | theta)**4`` (every bag four times over), an
overconfident posterior whose ranks pile at both ends; with four times the
bags, each replication costs about four times as much.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np

from benchmarks.harness import host_devices, machine


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0], formatter_class=argparse.ArgumentDefaultsHelpFormatter
    )
    p.add_argument("--replications", type=int, default=300, help="SBC replications R")
    p.add_argument("--bags", type=int, default=40, help="bags per simulated data set")
    p.add_argument("--classes", type=int, default=3, help="classes C")
    p.add_argument("--features", type=int, default=2, help="features d")
    p.add_argument("--max-bag-size", type=int, default=5, help="bag sizes cycle through 1..this")
    p.add_argument("--prior-scale", type=float, default=1.0, help="sd of the weights' prior")
    p.add_argument("--intercept-scale", type=float, default=1.0, help="sd of the intercepts' prior")
    p.add_argument("--warmup", type=int, default=500, help="NUTS warmup iterations per chain")
    p.add_argument("--draws", type=int, default=500, help="NUTS draws per chain after warmup")
    p.add_argument(
        "--chains", type=int, default=2, help="NUTS chains (in parallel when JAX has a device per chain)"
    )
    p.add_argument("--thinned", type=int, default=99, help="L: draws kept per replication (L + 1 ranks)")
    p.add_argument("--bins", type=int, default=10, help="chi-square rank bins (must divide L + 1)")
    p.add_argument("--alpha", type=float, default=0.01, help="family-wise level of the verdict")
    p.add_argument("--seed", type=int, default=0, help="base seed")
    p.add_argument(
        "--derived",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="also rank the per-class W and beta",
    )
    p.add_argument(
        "--broken",
        action="store_true",
        help="fit the likelihood to the power 4 (BROKEN_LIKELIHOOD_POWER): a deliberately wrong posterior",
    )
    p.add_argument("--out", type=Path, default=None, help="rank-histogram PNG (default: none)")
    return p


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    host_devices()  # the chains in parallel, before JAX starts
    from orlr_ppl.inference.checks.sbc import (
        BROKEN_LIKELIHOOD_POWER,
        NUTSSettings,
        SBCDesign,
        plot_rank_histograms,
        run_sbc,
    )

    design = SBCDesign(
        args.bags, args.classes, args.features, args.max_bag_size, args.prior_scale, args.intercept_scale
    )
    settings = NUTSSettings(args.warmup, args.draws, args.chains)
    power = BROKEN_LIKELIHOOD_POWER if args.broken else 1.0
    print(machine())
    print(f"design: {design}")
    print(f"NUTS: {settings}; L = {args.thinned}, bins = {args.bins}, seed = {args.seed}")
    if args.broken:
        print(f"BROKEN on purpose: fitting likelihood ** {power:g}; the verdict should be FAIL")

    times: list[float] = []
    every = max(1, args.replications // 10)

    def progress(r: int, seconds: float) -> None:
        times.append(seconds)
        if (r + 1) % every == 0 or r + 1 == args.replications:
            # The first replication includes the compilation; the rest estimate the remaining time.
            per = np.median(times[1:]) if len(times) > 1 else times[0]
            left = (args.replications - r - 1) * per
            print(
                f"  {r + 1}/{args.replications} replications, {sum(times):.0f} s, ~{left:.0f} s left",
                flush=True,
            )

    start = time.perf_counter()
    result = run_sbc(
        args.replications,
        design,
        settings,
        n_draws=args.thinned,
        n_bins=args.bins,
        seed=args.seed,
        derived=args.derived,
        alpha=args.alpha,
        likelihood_power=power,
        progress=progress,
    )
    wall = time.perf_counter() - start
    print()
    print(result.summary())
    print()
    rest = np.asarray(times[1:]) if len(times) > 1 else np.asarray(times)
    print(
        f"wall time: {wall:.1f} s (first replication, with compilation: {times[0]:.1f} s; "
        f"then median {np.median(rest):.2f} s per replication)"
    )
    if args.out is not None:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        plot_rank_histograms(result).savefig(args.out, dpi=120)
        print(f"figure: {args.out}")
    return 0 if result.passed != args.broken else 1


if __name__ == "__main__":
    sys.exit(main())
