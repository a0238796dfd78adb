"""Buckets merged across label-set sizes against one bucket per size: the model path's run time.

    python benchmarks/ab_bucket_merge.py [--repeats 300]

Times the model's potential and gradient (``bench_dp``'s path (a'), flat prior, float32) on the
Letter-shaped and HJA-shaped data of ``shaped_data``, packed twice in one process: as the package
packs them (small buckets merge across sizes, ``dp.packing._merge_small``) and with that merge
switched off. The two are timed interleaved, so machine noise hits both alike; prints each one's
median milliseconds and the median of the per-repeat ratios merged / separate.
"""

from __future__ import annotations

import argparse

import jax
import jax.numpy as jnp
import numpy as np
from bench_dp import _model_objective, _time_interleaved  # benchmarks/ is on a script's path
from shaped_data import hja_shaped, letter_shaped

import orlr_ppl.dp.packing as packing


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeats", type=int, default=300)
    args = parser.parse_args()
    merge = packing._merge_small
    rng = np.random.default_rng(0)
    for name, shaped in (("letter", letter_shaped), ("hja", hja_shaped)):
        feats, sets, _, n_classes = shaped(rng)
        merged = _model_objective(feats, sets, n_classes)
        packing._merge_small = lambda plan, lengths, canonical: plan
        try:
            separate = _model_objective(feats, sets, n_classes)
        finally:
            packing._merge_small = merge
        w0 = np.random.default_rng(1).normal(scale=0.1, size=(feats[0].shape[1], n_classes))
        times = _time_interleaved([separate, merged], jnp.asarray(w0, jnp.float32), args.repeats)
        print(
            f"{name}: separate {1e3 * np.median(times[:, 0]):.3f} ms, "
            f"merged {1e3 * np.median(times[:, 1]):.3f} ms, "
            f"ratio merged/separate {np.median(times[:, 1] / times[:, 0]):.3f} (median of pairs)",
            flush=True,
        )
    print(f"jax {jax.__version__}")


if __name__ == "__main__":
    main()
