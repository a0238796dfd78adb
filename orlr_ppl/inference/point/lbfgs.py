"""SciPy's L-BFGS-B with BLAS on one thread: the host-side optimiser of the MAP and softmax fits."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
from scipy.optimize import OptimizeResult, minimize
from threadpoolctl import threadpool_limits


def minimize_lbfgs(
    fun: Callable[..., tuple[float, np.ndarray]],
    x0: np.ndarray,
    args: tuple[Any, ...] = (),
    *,
    max_iter: int,
    gtol: float,
    ftol: float,
    blas_threads: int = 1,
) -> OptimizeResult:
    """Minimise ``fun(x, *args) -> (value, gradient)`` from ``x0`` (p,) by L-BFGS-B.

    ``max_iter``, ``gtol`` (bound on the largest gradient component) and
    ``ftol`` (relative change of the value) are SciPy's stopping rules. Returns
    SciPy's ``OptimizeResult`` (``x`` (p,), ``fun``, ``nit``, ``status``, ``success``).
    ``blas_threads``: BLAS's thread limit while it runs (1 is right for every fit
    the package makes; BENCHMARKS.md, "One BLAS thread for host L-BFGS-B").
    """
    # SciPy's wheel bundles an OpenBLAS of its own, whose idle threads spin and
    # fight whatever computes the objective between its calls: numpy's OpenBLAS
    # (K-SLR's matmuls) or XLA's thread pool (the MAP). With one BLAS thread, whole
    # fits ran 1.5-9x faster on the package's datasets (2-core CPU, BENCHMARKS.md);
    # it cost 23% on a 100,000 x 500 softmax fit. user_api="blas" leaves OpenMP alone.
    with threadpool_limits(limits=blas_threads, user_api="blas"):
        return minimize(
            fun,
            x0,
            args=args,
            jac=True,
            method="L-BFGS-B",
            options={"maxiter": int(max_iter), "gtol": gtol, "ftol": ftol},
        )
