"""The Laplace approximation's cost against the MAP's, each a user's first fit in a fresh process.

``ORLR(inference="map")`` and ``ORLR(inference="laplace")`` (defaults, Normal prior of sd 1,
standardised features) on every bag of a data set, each fit in its own Python process with the
persistent compilation cache off, so that compiling is counted as a user meets it; ``--repeats``
processes per method, interleaved, and the medians compared. The Laplace fit is its MAP, the exact
Hessian, the draws and their log densities, and the posterior object (with its predictive
simulations). ``--stages`` times the Laplace fit's parts in one more process.

    python -m benchmarks.bench_laplace [--dataset hja-union|letter-frost|demo] [--repeats 3]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
import warnings

import numpy as np

from benchmarks.harness import REPO, SHARED, load_dataset, machine


def dataset(name: str):
    """Every bag of ``name``: HJA union's labelled segments, Letter Frost, or the demo's 300 digit bags."""
    if name == "demo":
        from orlr_ppl.data.datasets import make_miml_digits

        data = make_miml_digits(300, max_size=4, seed=0, split="train")
        return data.drop_features(data.linear_dependencies().redundant)
    return load_dataset(name, SHARED)


def one_fit(name: str, method: str) -> dict:
    """In this process: load, fit once, and report seconds around ``fit``."""
    from orlr_ppl import ORLR

    data = dataset(name)
    t0 = time.perf_counter()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        model = ORLR(inference=method).fit(data)
    out = {"method": method, "seconds": time.perf_counter() - t0}
    if method == "laplace":
        out["importance_k"] = model.diagnostics().sampler["approximation_k"]
    return out


def stages(name: str) -> dict:
    """The Laplace fit's parts, timed in this process: MAP, Hessian (compile + run), draws' densities."""
    import jax
    from sklearn.preprocessing import StandardScaler

    from orlr_ppl.inference.point.map import fit_map
    from orlr_ppl.inference.posterior import laplace
    from orlr_ppl.model import log_density as ld
    from orlr_ppl.model.numpyro_model import make_model_data, split_model_data

    data = dataset(name)
    scaler = StandardScaler().fit(np.concatenate(data.bags))
    bags = [scaler.transform(x) for x in data.bags]
    times = {}
    with jax.enable_x64(True):
        model = make_model_data(
            bags, data.label_sets, len(data.class_names), dtype=np.float64, canonical_shapes=True
        )
        t0 = time.perf_counter()
        mode = fit_map(model, 1.0, 10.0)
        times["map"] = time.perf_counter() - t0
        arrays, shape = split_model_data(model)
        padded, n = ld.hessian_chunks(arrays, shape, True)
        scales = ld.prior_scales(1.0, 10.0, np.float64)
        params = {k: jax.numpy.asarray(v) for k, v in mode.params.items()}
        for label in ("hessian_first", "hessian_again"):
            t0 = time.perf_counter()
            ld.potential_hessian(params, padded, scales, shape, True, False, n)[0].block_until_ready()
            times[label] = time.perf_counter() - t0
        gauss = laplace.laplace_approximation(model, 1.0, 10.0, init=mode.params)
        t0 = time.perf_counter()
        laplace.fit_laplace(model, 1.0, 10.0, gaussian=gauss)
        times["draws_and_posterior_object"] = time.perf_counter() - t0
    return {k: round(v, 2) for k, v in times.items()}


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--dataset", choices=["hja-union", "letter-frost", "demo"], default="hja-union")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--stages", action="store_true", help="also time the Laplace fit's parts")
    parser.add_argument("--one", default=None, help=argparse.SUPPRESS)  # internal: one fit, this process
    args = parser.parse_args()
    if args.one is not None:
        print(json.dumps(stages(args.dataset) if args.one == "stages" else one_fit(args.dataset, args.one)))
        return
    print(machine(), flush=True)
    env = {**os.environ, "ORLR_PPL_COMPILATION_CACHE": "0"}
    runs: dict[str, list[float]] = {"map": [], "laplace": []}
    k_hat = None
    for _ in range(args.repeats):
        for method in runs:
            cmd = [
                sys.executable,
                "-m",
                "benchmarks.bench_laplace",
                "--dataset",
                args.dataset,
                "--one",
                method,
            ]
            out = json.loads(
                subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True, check=True).stdout
            )
            runs[method].append(out["seconds"])
            k_hat = out.get("importance_k", k_hat)
            print(json.dumps(out), flush=True)
    med = {m: statistics.median(v) for m, v in runs.items()}
    print(
        f"{args.dataset}: MAP {med['map']:.1f} s, Laplace {med['laplace']:.1f} s (medians of "
        f"{args.repeats} fresh processes, compiling included); ratio {med['laplace'] / med['map']:.2f}; "
        f"Laplace k-hat {k_hat:.2f}"
    )
    if args.stages:
        cmd = [sys.executable, "-m", "benchmarks.bench_laplace", "--dataset", args.dataset, "--one", "stages"]
        print(
            "stages:",
            subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True, check=True).stdout,
        )


if __name__ == "__main__":
    main()
