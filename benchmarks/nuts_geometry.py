"""How hard a posterior is for NUTS: leapfrog steps per draw and step size on one HJA-union fold.

    python benchmarks/nuts_geometry.py [--prior group_horseshoe|normal|l21] [--scale 3.0]
        [--drop-dependent] [--dense-mass] [--whiten] [--target-accept A] [--num-warmup 150]
        [--num-samples 30] [--fold 0 | --all-bags] [--num-chains 1] [--standardize quantile-normal]

One chain (``--num-chains``) on fold ``--fold``'s training bags (``MIMLData.kfold(10, seed=0)``,
as ``kernel_orlr.py`` and ``shrinkage_vs_l21.py``), features standardised, the package's NUTS
defaults otherwise (target acceptance 0.98 under the horseshoe, 0.8 else; tree depth up to 10, so
1,023 leapfrog steps at most). ``--drop-dependent`` first drops the features ``MIMLData.linear_dependencies``
names (HJA: one of the tied x14-x16, one of the histogram bins x22-x37). Prints the seconds, the
median and largest leapfrog steps per draw, the adapted step size and the held-out accuracy of
these few draws (a chain this short is a probe of the geometry, not a posterior to report).
``--num-chains`` above 1 also prints the worst R-hat, the least bulk and tail ESS over the
weights, the least bulk ESS per 1,000 leapfrog steps of all chains (the cost measure that
does not depend on the machine), and the package's diagnostics in full.
"""

from __future__ import annotations

import argparse
import time
import warnings

import numpy as np
from kernel_orlr import load_dataset, without_dependent  # benchmarks/ is on the path

from orlr_ppl import ORLR


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--prior", choices=["group_horseshoe", "normal", "l21"], default="group_horseshoe")
    p.add_argument(
        "--scale",
        type=float,
        default=3.0,
        help="the Normal's sd, the l21 (group Laplace) scale, or the horseshoe's slab",
    )
    p.add_argument("--drop-dependent", action="store_true", help="drop features that are combinations")
    p.add_argument("--dense-mass", action="store_true")
    p.add_argument("--whiten", action="store_true", help="ORLR(whiten=True): Laplace-whitened weights")
    p.add_argument(
        "--target-accept", type=float, default=None, help="default: the package's (0.98 horseshoe, 0.8 else)"
    )
    p.add_argument("--num-warmup", type=int, default=150)
    p.add_argument("--num-samples", type=int, default=30)
    p.add_argument("--fold", type=int, default=0)
    p.add_argument("--all-bags", action="store_true", help="fit all 548 bags (no held-out accuracy)")
    p.add_argument("--standardize", default="true", help="ORLR(standardize=...): true or quantile-normal")
    p.add_argument("--num-chains", type=int, default=1, help="above 1: also R-hat and ESS per leapfrog step")
    args = p.parse_args()
    data = load_dataset("hja-union")
    train, test = list(data.kfold(10, seed=0))[args.fold]
    if args.all_bags:
        train = data
    if args.drop_dependent:
        train, test, dropped = without_dependent(train, test)
        print(f"dropped {dropped}")
    model = ORLR(
        method="nuts",
        prior=args.prior,
        prior_scale=args.scale,
        num_chains=args.num_chains,
        num_warmup=args.num_warmup,
        num_samples=args.num_samples,
        max_num_samples=args.num_samples,
        dense_mass=args.dense_mass,
        whiten=args.whiten,
        target_accept=args.target_accept,
        random_state=args.fold,
        standardize=True if args.standardize == "true" else args.standardize,
    )
    t0 = time.perf_counter()
    with warnings.catch_warnings():  # a short chain cannot converge: the diagnostics are printed below
        warnings.simplefilter("ignore")
        model.fit(train)
    seconds = time.perf_counter() - t0
    stats = model.posterior_.sample_stats
    steps = stats["n_steps"].values
    print(
        f"{args.prior} scale {args.scale}{' dense' if args.dense_mass else ''}"
        f"{' whitened' if args.whiten else ''} standardize={args.standardize} target accept "
        f"{args.target_accept or 'default'}: {seconds:.0f} s, leapfrog steps per draw median "
        f"{np.median(steps):.0f} max {steps.max()}, step size {float(stats['step_size'].values.mean()):.4f}, "
        f"divergences {int(stats['diverging'].values.sum())}"
        + ("" if args.all_bags else f", held-out accuracy {model.score(test):.3f}")
    )
    if args.num_chains > 1:
        table = model.diagnostics().table
        table = table[table["sd"] > 0]
        per = 1000 * float(table["ess_bulk"].min()) / float(steps.sum())
        print(
            f"{args.num_chains} chains: max R-hat {table['r_hat'].max():.3f}, least bulk ESS "
            f"{table['ess_bulk'].min():.0f} (tail {table['ess_tail'].min():.0f}), median bulk ESS "
            f"{table['ess_bulk'].median():.0f}; least bulk ESS per 1,000 leapfrog steps {per:.2f}"
        )
        for problem in model.diagnostics().problems:
            print(f"  {problem}")


if __name__ == "__main__":
    main()
