"""What ``whiten=True`` costs before sampling: the Laplace whitening's Hessian, time and memory.

    python benchmarks/whitening_cost.py [--sizes 30,100,300] [--fold 0]

On HJA union fold ``--fold``'s training bags (``MIMLData.kfold(10, seed=0)``, features
standardised), kernel ORLR's features: RBF similarities to a random dictionary of m training
instances (width by the median heuristic), Normal prior of sd 3, 13 classes, so P = 12 (m + 1)
weights and intercepts are whitened. For each m, in a fresh process each (peak memory is per
process): ``chain_setup.laplace_whitening`` (the Hessian from Hessian-vector products, 64 at a
time, then an eigendecomposition) against the reference, ``jax.hessian`` of the same potential over
all P at once (what the package did before) followed by the same eigendecomposition and Cholesky
factor, timed from the first call (compiling included), with the process's peak resident memory.
Prints both and their ratios, and the trace of the Hessian each implies (they must agree).
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import time

import numpy as np


def _one(size: int, fold: int, how: str) -> dict[str, float]:
    import jax
    import jax.numpy as jnp
    from kernel_orlr import load_dataset  # benchmarks/ is on the path

    from orlr_ppl.data.kernel import fit_kernel_map, median_gamma
    from orlr_ppl.inference import chain_setup
    from orlr_ppl.model.log_density import potential, prior_scales
    from orlr_ppl.model.numpyro_model import make_model_data, split_model_data

    train, _ = list(load_dataset("hja-union").kfold(10, seed=0))[fold]
    x = train.fit_standardizer().transform(train).bags
    flat_x = np.concatenate(x)
    kmap = fit_kernel_map(flat_x, "rbf", median_gamma(flat_x), dictionary_size=size, seed=fold)
    data = make_model_data([kmap.transform(b) for b in x], train.label_sets, 13)
    arrays, shape = split_model_data(data)
    scales = prior_scales(3.0, 10.0)
    start = {"W_raw": np.zeros((size, 12), np.float32), "beta_raw": np.zeros(12, np.float32)}
    t0 = time.perf_counter()
    if how == "rows":
        white, spec = chain_setup.laplace_whitening(start, arrays, scales, shape, True)
        chol = np.asarray(white.chol, np.float64)
    else:  # the same steps with autodiff's Hessian
        spec = (("W_raw", (size, 12)), ("beta_raw", (12,)))

        def flat_potential(v):
            return potential(chain_setup._unflat(v, spec), arrays, scales, shape, True)

        flat = jnp.concatenate([jnp.ravel(start[k]) for k, _ in spec])
        hess = np.asarray(jax.jit(jax.hessian(flat_potential))(flat), np.float64)
        chol = chain_setup.laplace_factor(hess)
    seconds = time.perf_counter() - t0
    # Both give chol chol^T = H^-1 (no eigenvalue is floored at this start): compare traces of H.
    check = float(np.trace(np.linalg.inv(chol @ chol.T)))
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1e6  # kB on Linux -> GB
    return {"size": size, "params": 12 * (size + 1), "seconds": seconds, "peak_gb": peak, "trace": check}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--sizes", default="30,100,300", help="dictionary sizes m, comma-separated")
    p.add_argument("--fold", type=int, default=0)
    p.add_argument("--one", nargs=2, metavar=("SIZE", "HOW"), help=argparse.SUPPRESS)  # the child process
    args = p.parse_args()
    if args.one:
        print(json.dumps(_one(int(args.one[0]), args.fold, args.one[1])))
        return
    print(
        "dictionary m | P | row-by-row s | autodiff s | time ratio | row-by-row GB | autodiff GB | mem. ratio"
    )
    for size in (int(s) for s in args.sizes.split(",")):
        res = {}
        for how in ("rows", "autodiff"):
            cmd = [sys.executable, __file__, "--fold", str(args.fold), "--one", str(size), how]
            out = subprocess.run(cmd, capture_output=True, text=True, check=True).stdout
            res[how] = json.loads(out.strip().splitlines()[-1])
        r, a = res["rows"], res["autodiff"]
        print(
            f"{size} | {r['params']:,} | {r['seconds']:.1f} | {a['seconds']:.1f} | "
            f"{r['seconds'] / a['seconds']:.2f} | {r['peak_gb']:.2f} | {a['peak_gb']:.2f} | "
            f"{r['peak_gb'] / a['peak_gb']:.2f}"
        )
        print(f"  trace of H from each: {r['trace']:.6g} (row-by-row), {a['trace']:.6g} (autodiff)")


if __name__ == "__main__":
    main()
