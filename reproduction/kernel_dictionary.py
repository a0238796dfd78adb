"""K-ORLR's accuracy and fit time against its dictionary's size, at a fixed width and prior scale.

    python -m reproduction.kernel_dictionary [--dataset hja-union|letter-frost] [--sizes 300,all]
        [--gamma-factor 4] [--prior-scale 10] [--prior normal|l21] [--max-iter 500]
        [--run-folds 0,1] [--save rows.jsonl] [--summarise]

Same bag-level folds (seed 0) as ``reproduction.kernel_orlr`` and ``orlr-ppl evaluate``. Each fold
fits linear ORLR (``ORLR()``, the time reference) and, for every size in ``--sizes`` ("all":
every training instance), ``ORLR(features=kernel_orlr.rbf_map(size, fold, gamma=g),
prior_scale=s, inference=EM(max_iter=...), random_state=fold)`` with ``g`` = ``--gamma-factor`` times the
median heuristic of the fold's standardised training instances
(``kernel_orlr.median_heuristic``, seeded as ORLR seeds it) and ``s`` = ``--prior-scale``. No
selection runs, so a fold costs one fit per size: this isolates the dictionary, where
``kernel_orlr`` selects width and scale at one size. With ``random_state=fold`` the dictionary
of a given size is the one ``kernel_orlr`` draws, so at the width and scale its selection chose
(HJA union: 4 times the median, scale 10, in every fold) and its ``--max-iter`` a size-300 fit
repeats that script's final fit.

Prints per fold each size's held-out instance accuracy, whether its EM met its tolerance, the
weight rows it kept (fewer than the dictionary where an l2,1 fit zeroed some), and its fit
seconds; then each size's mean ± sd, the paired difference from the first size, and the median
fit-time ratio to linear ORLR. ``--run-folds``/``--save``/``--summarise`` as in
``kernel_orlr``.
"""

from __future__ import annotations

import argparse

import numpy as np

from benchmarks.harness import add_part_options, paired_difference, run_in_parts, timed_fit
from reproduction.kernel_orlr import median_heuristic, rbf_map


def parse_sizes(text: str) -> list[int | None]:
    """``"300,all"`` to ``[300, None]`` (None: every training instance in the dictionary)."""
    sizes: list[int | None] = []
    for item in text.split(","):
        if item == "all":
            sizes.append(None)
        elif item.isdigit() and int(item) > 0:
            sizes.append(int(item))
        else:
            raise SystemExit(f"--sizes: {item!r} is neither a positive integer nor 'all'")
    return sizes


def _key(size: int | None) -> str:
    return "all" if size is None else str(size)


def _summarise(rows: list[dict], folds: list[int]) -> None:
    """Each size's mean ± sd over ``folds``, the paired difference from the first size, the time ratios."""
    print(f"folds {folds}")
    sizes = [k[4:] for k in rows[0] if k.startswith("acc_")]
    lin = np.array([r["linear"] for r in rows])
    print(f"linear: {100 * lin.mean():.1f} ± {100 * lin.std(ddof=1):.1f} over {len(rows)} folds")
    first = np.array([r[f"acc_{sizes[0]}"] for r in rows])
    for s in sizes:
        acc = np.array([r[f"acc_{s}"] for r in rows])
        diff = 100 * (acc - first)
        paired = f"minus dictionary {sizes[0]}: {paired_difference(diff)}; " if s != sizes[0] else ""
        stopped = sum(not r[f"conv_{s}"] for r in rows)
        ratio = np.median([r[f"t_{s}"] / r["t_linear"] for r in rows])
        print(
            f"dictionary {s}: {100 * acc.mean():.1f} ± {100 * acc.std(ddof=1):.1f}; {paired}"
            f"{stopped} of {len(rows)} fits stopped at max_iter; "
            f"median {np.median([r[f't_{s}'] for r in rows]):.1f} s, {ratio:.1f} times linear ORLR"
        )


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--dataset", choices=["letter-frost", "hja-union"], default="hja-union")
    p.add_argument("--folds", type=int, default=10)
    p.add_argument("--sizes", default="300,all", help="comma list of dictionary sizes, or 'all'")
    p.add_argument("--gamma-factor", type=float, default=4.0, help="times the median heuristic")
    p.add_argument("--prior-scale", type=float, default=10.0)
    p.add_argument("--prior", choices=["normal", "l21"], default="normal")
    p.add_argument("--max-iter", type=int, default=500, help="K-ORLR's EM iterations (the paper's 500)")
    add_part_options(p)
    args = p.parse_args()
    sizes = parse_sizes(args.sizes)
    settings = {
        k: getattr(args, k)
        for k in ("dataset", "folds", "sizes", "gamma_factor", "prior_scale", "prior", "max_iter")
    }

    def fit_fold(train, test, fold: int) -> dict:
        from orlr_ppl import EM, ORLR

        linear, t_lin = timed_fit(ORLR(), train)
        row = {"linear": linear.score(test), "t_linear": t_lin}
        gamma = args.gamma_factor * median_heuristic(train, fold)
        for size in sizes:
            model = ORLR(
                features=rbf_map(size, fold, gamma=gamma),
                prior_scale=args.prior_scale,
                prior=args.prior,
                inference=EM(max_iter=args.max_iter),
                random_state=fold,
            )
            model, seconds = timed_fit(model, train)
            row[f"acc_{_key(size)}"] = model.score(test)
            row[f"conv_{_key(size)}"] = float(model.converged_)
            row[f"rows_{_key(size)}"] = int(model.coef_.shape[0])  # the rows an l2,1 fit kept
            row[f"t_{_key(size)}"] = seconds
        return row

    run_in_parts(args, settings, fit_fold, _summarise)


if __name__ == "__main__":
    main()
