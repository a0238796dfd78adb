"""The group-horseshoe posterior (NUTS) against the l2,1 MAP (issue 13): accuracy, sparsity, diagnostics.

    python benchmarks/shrinkage_vs_l21.py [--dataset letter-frost|hja-union] [--folds 10]
        [--slab 3.0] [--num-chains 4] [--num-warmup 300] [--num-samples 1000] [--dense-mass] [--progress-bar]
        [--run-folds 0,1,2] [--save rows.jsonl] [--summarise]

Same bag-level folds (seed 0) as ``orlr-ppl evaluate``, linear features standardised on each
training fold. l2,1 MAP: ``ORLR(method="map", prior="l21", prior_scale="auto")``, the penalty
chosen inside each fit by 3-fold bag-level CV (bag labels only). Posterior: ``ORLR(method="nuts",
prior="group_horseshoe", prior_scale=SLAB)``, the slab fixed beforehand (3: a feature moving a
class logit by at most a few nats per sd), its predictions the posterior mean of p(y | x) over
the draws kept. Prints per fold both inductive accuracies, the rows each keeps (MAP: non-zero;
posterior: row_inclusion >= 0.5), the posterior's worst R-hat, least bulk/tail ESS and
divergences, and the fit seconds; then means and sds, and the folds where each is ahead.

As in ``kernel_orlr.py``: ``--run-folds`` fits only those folds, ``--save`` appends each fold's row
to a JSON-lines file (each fold seeded by its number, so parts give what one run would), and
``--summarise`` prints the summary from that file, refusing a missing fold.
"""

from __future__ import annotations

import argparse

import numpy as np
from kernel_orlr import add_part_options, run_in_parts, timed_fit  # benchmarks/ is on the path

from orlr_ppl import ORLR


def _fold(train, test, args, fold: int) -> dict[str, float]:
    # Warnings silenced: a CV choice at the grid's edge and the diagnostics are reported in the row.
    l21, t_map = timed_fit(ORLR(method="map", prior="l21", prior_scale="auto", random_state=fold), train)
    post = ORLR(
        method="nuts",
        prior="group_horseshoe",
        prior_scale=args.slab,
        num_chains=args.num_chains,
        num_warmup=args.num_warmup,
        num_samples=args.num_samples,
        dense_mass=args.dense_mass,
        random_state=fold,
        progress_bar=args.progress_bar,
    )
    post, t_nuts = timed_fit(post, train)
    diag = post.diagnostics()
    table = diag.table[diag.table["sd"] > 0]
    return {
        "l21_map": l21.score(test),
        "horseshoe_nuts": post.score(test),
        "l21_scale": l21.prior_scale_,
        "l21_rows": int(np.any(np.asarray(l21.coef_) != 0, axis=1).sum()),
        "hs_rows": int((post.row_inclusion() >= 0.5).sum()),
        "r_hat": float(table["r_hat"].max()),
        "worst": str(table["ess_bulk"].idxmin()),
        "ess_bulk": float(table["ess_bulk"].min()),
        "ess_tail": float(table["ess_tail"].min()),
        "divergent": int(diag.sampler["n_divergent"]),
        "t_map": t_map,
        "t_nuts": t_nuts,
    }


def _summarise(rows: list[dict[str, float]]) -> None:
    """Means and sds of both accuracies, the paired difference, and the worst diagnostics over folds."""
    for key in ("l21_map", "horseshoe_nuts"):
        acc = 100 * np.array([r[key] for r in rows])
        print(f"{key}: {acc.mean():.1f} ± {acc.std(ddof=1):.1f} over {len(rows)} folds")
    diff = 100 * np.array([r["horseshoe_nuts"] - r["l21_map"] for r in rows])
    print(
        f"posterior - MAP: {diff.mean():+.1f} points (sd {diff.std(ddof=1):.1f}); posterior ahead in "
        f"{int((diff > 0).sum())}, behind in {int((diff < 0).sum())} of {len(rows)} folds"
    )
    print(
        f"worst over folds: R-hat {max(r['r_hat'] for r in rows):.3f}, ESS bulk/tail "
        f"{min(r['ess_bulk'] for r in rows):.0f}/{min(r['ess_tail'] for r in rows):.0f}, "
        f"divergences {sum(r['divergent'] for r in rows)}"
    )


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--dataset", choices=["letter-frost", "hja-union"], default="letter-frost")
    p.add_argument("--folds", type=int, default=10)
    p.add_argument("--slab", type=float, default=3.0)
    p.add_argument("--num-chains", type=int, default=4)
    p.add_argument("--num-warmup", type=int, default=300)
    p.add_argument("--num-samples", type=int, default=1000)
    p.add_argument("--dense-mass", action="store_true", help="NUTS adapts a dense mass matrix")
    p.add_argument("--progress-bar", action="store_true", help="a tqdm bar over NUTS's iterations, on stderr")
    add_part_options(p)
    args = p.parse_args()
    names = ("dataset", "folds", "slab", "num_chains", "num_warmup", "num_samples", "dense_mass")
    settings = {k: getattr(args, k) for k in names}
    run_in_parts(args, settings, lambda train, test, fold: _fold(train, test, args, fold), _summarise)


if __name__ == "__main__":
    main()
