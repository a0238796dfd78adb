"""What NUTS's progress bar costs: the same chains with and without it (issue 53, item 5).

With a bar, the sampler's compiled program is called for about ``nuts.PROGRESS_SECONDS`` at a time
instead of a whole block of iterations, so that the bar moves smoothly; the transitions are the
same (``tests/test_nuts_driver.py``). This times ``fit_nuts`` on the demo's data (200 MIML-digits
bags), after one untimed fit that compiles, alternating bar and no bar, and prints each median
and their ratio.

    python benchmarks/progress_cost.py --repeats 3
"""

from __future__ import annotations

import argparse
import io
import statistics
import time
from contextlib import redirect_stderr

import numpy as np

from orlr_ppl.data.datasets import make_miml_digits
from orlr_ppl.inference.nuts import fit_nuts
from orlr_ppl.model.numpyro_model import make_model_data


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--repeats", type=int, default=3, help="timed fits of each kind")
    parser.add_argument("--num-warmup", type=int, default=200)
    parser.add_argument("--num-samples", type=int, default=400)
    args = parser.parse_args()
    train = make_miml_digits(200, max_size=8, seed=0, split="train")
    x = np.concatenate(train.bags)
    mean, sd = x.mean(0), np.where(x.std(0) > 0, x.std(0), 1.0)  # as ORLR standardises
    data = make_model_data([(b - mean) / sd for b in train.bags], train.label_sets, 10)
    settings = {"num_warmup": args.num_warmup, "num_samples": args.num_samples, "num_chains": 2}

    def timed(bar: bool) -> float:
        t0 = time.perf_counter()
        with redirect_stderr(io.StringIO()):  # the bar's own output is not the point here
            fit_nuts(data, progress_bar=bar, **settings)
        return time.perf_counter() - t0

    timed(False)  # compiles
    times: dict[bool, list[float]] = {False: [], True: []}
    for _ in range(args.repeats):
        for bar in (False, True):
            times[bar].append(timed(bar))
    quiet, shown = statistics.median(times[False]), statistics.median(times[True])
    print(f"2 chains x ({args.num_warmup} + {args.num_samples}), medians of {args.repeats}:")
    print(f"no bar {quiet:.1f} s, bar {shown:.1f} s, ratio {shown / quiet:.3f}")


if __name__ == "__main__":
    main()
