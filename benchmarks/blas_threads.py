"""Host L-BFGS-B with BLAS threaded against one thread (``inference.lbfgs.minimize_lbfgs``), one run.

    python benchmarks/blas_threads.py [--repeats 5] [--threads 2]

The package runs SciPy's L-BFGS-B under ``threadpool_limits(1, "blas")``. This times the
fits it serves, on fold 0 of Letter Frost and HJA union (bag-level folds, seed 0), both
ways in the same run, interleaved: each fit as the package runs it, and the same fit with
the optimiser's BLAS limit lifted to ``--threads`` (``minimize_lbfgs`` swapped for a copy
without the limit). Prints the median seconds of ``--repeats`` warm fits and their ratio.

- K-SLR: ``SoftmaxRegression(kernel="rbf", gamma=0.05, prior_scale=10)``, every training
  instance in the dictionary (Letter Frost: 509 features, 24 classes).
- softmax: linear ``SoftmaxRegression()`` on HJA union's 38 features.
- MAP: ``ORLR(method="map")`` (Normal prior; HJA union), the JAX objective between
  L-BFGS-B's steps.
- ``--synthetic``: instead, ``softmax_solver.fit_softmax`` (100 L-BFGS iterations at most) on
  Gaussian features of 20,000 x 300 and 100,000 x 500, 13 classes: where threads pay.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable
from functools import partial

import numpy as np
from kernel_orlr import load_dataset, timed_fit  # benchmarks/ is on a script's path

from orlr_ppl import ORLR, SoftmaxRegression
from orlr_ppl.estimators import softmax_solver
from orlr_ppl.inference import map as map_module


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument("--threads", type=int, default=2, help="BLAS threads of the unlimited runs")
    p.add_argument("--synthetic", action="store_true", help="large Gaussian softmax fits instead")
    args = p.parse_args()
    if args.synthetic:
        cases = [(f"{n}x{r}", "gaussian", _synthetic(n, r)) for n, r in ((20_000, 300), (100_000, 500))]
        _compare(cases, args)
        return
    cases = [
        ("K-SLR", "letter-frost", lambda: SoftmaxRegression(kernel="rbf", gamma=0.05, prior_scale=10.0)),
        ("softmax", "hja-union", SoftmaxRegression),
        ("MAP", "hja-union", lambda: ORLR(method="map")),
    ]
    _compare(cases, args)


def _synthetic(n: int, r: int, k: int = 13) -> Callable:
    """A maker whose ``fit(None)`` runs ``fit_softmax`` on fixed Gaussian data (n, r), k classes."""
    rng = np.random.default_rng(0)
    x = rng.normal(size=(n, r))
    y = (x[:, :k] + rng.normal(size=(n, k))).argmax(axis=1)

    class _Fit:
        def fit(self, _):
            return softmax_solver.fit_softmax(x, y, k, 1.0, max_iter=100)

    return _Fit


def _compare(cases: list, args: argparse.Namespace) -> None:
    """Time each case both ways, interleaved, and print the medians and their ratio."""
    limited = softmax_solver.minimize_lbfgs
    print(f"{'fit':12} {'dataset':13} {'one thread s':>13} {f'{args.threads} threads s':>12} {'ratio':>6}")
    for name, dataset, make in cases:
        train = None if dataset == "gaussian" else next(iter(load_dataset(dataset).kfold(10, seed=0)))[0]
        times: dict[str, list[float]] = {"one": [], "many": []}
        for i in range(args.repeats + 1):  # the first round compiles: not counted
            for key, fn in (("one", limited), ("many", partial(limited, blas_threads=args.threads))):
                softmax_solver.minimize_lbfgs = map_module.minimize_lbfgs = fn
                seconds = timed_fit(make(), train)[1]
                if i:
                    times[key].append(seconds)
        softmax_solver.minimize_lbfgs = map_module.minimize_lbfgs = limited
        one, many = np.median(times["one"]), np.median(times["many"])
        print(f"{name:12} {dataset:13} {one:13.2f} {many:12.2f} {many / one:6.2f}", flush=True)


if __name__ == "__main__":
    main()
