"""Wall time of ORLR-EM fits, against scikit-learn's LogisticRegression on the same instances.

Fits ``ORLR(method="em")`` with the comparison's settings (no prior, 50 iterations, one
line-searched gradient step per M-step: ``orlr-ppl evaluate``'s ORLR-EM) in one process on

  (i) Letter Frost folds (10-fold by bag, data seed 0; needs the UCI letters file), and
  (ii) HJA-shaped synthetic bags (``shaped_data.hja_shaped``: 548 bags, 13 classes, 39 features),
  (iii) HJA union's labelled segments (the published files, 10-fold by bag), with the comparison's
       settings and with ``ORLR()``'s defaults (a Normal(0, 1) prior, 10 steps per M-step),

a first fit (which compiles), a second fit of the same data (which reuses what the first
compiled, if the package compiles once per shape family), a fit on the next fold (other bags:
it reuses the program only if the folds' buckets pad to the same canonical shapes), and for
Letter Frost the other eight folds, so that ``letter_ten_folds`` is what a 10-fold EM
comparison spends fitting. The reference is ``LogisticRegression`` fitted on the same
training instances with their true labels, timed in the same run.

    python benchmarks/bench_em.py [--uci-path PATH] [--hja-path DIR] [--compilation-cache DIR]

Runs against whichever ``orlr_ppl`` is importable, so the same script times an older checkout
(``PYTHONPATH=/path/to/old/checkout``). The last line is
``letter_first=<s> letter_again=<s> letter_next=<s> letter_ten_folds=<s> hja_first=<s> hja_again=<s>``
and, with the HJA files, ``hja_real_*`` and ``hja_defaults_*`` (first, again, next).
"""

from __future__ import annotations

import argparse
import importlib
import os
import platform
import sys
import time
import warnings
from pathlib import Path

import jax
import numpy as np
from sklearn.linear_model import LogisticRegression

import orlr_ppl

sys.path.insert(0, str(Path(__file__).resolve().parent))
from shaped_data import hja_shaped  # noqa: E402

SHARED = Path(__file__).resolve().parents[2] / "shared" / "data"


def _datasets():
    for name in ("orlr_ppl.data.datasets", "orlr_ppl.datasets"):  # this layout, then the flat one
        try:
            return importlib.import_module(name)
        except ImportError:
            continue
    raise ImportError("no orlr_ppl datasets module")


COMPARISON = {"prior_scale": None, "intercept_scale": None, "max_iter": 50, "m_steps": 1}
"""``orlr-ppl evaluate``'s ORLR-EM: the published EM."""


def _timed_fit(bags, sets, n_classes, **settings) -> tuple[float, float]:
    model = orlr_ppl.ORLR(method="em", n_classes=n_classes, **(settings or COMPARISON))
    t0 = time.perf_counter()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # 50 iterations rarely meet tol: the budget is the point
        model.fit(bags, sets)
    return time.perf_counter() - t0, float(model.log_posterior_)


def _reference(bags, labels) -> float:
    """LogisticRegression's fit time on the instances, standardised as ORLR standardises them.

    On raw HJA features lbfgs needs over 1,000 iterations (10-12 s, unconverged); scaled, it
    converges, so the reference is the fit a user would run.
    """
    x, y = np.concatenate(bags), np.concatenate(labels)
    x = (x - x.mean(axis=0)) / np.where(x.std(axis=0) > 0, x.std(axis=0), 1.0)
    t0 = time.perf_counter()
    LogisticRegression(max_iter=1000).fit(x, y)
    return time.perf_counter() - t0


def _row(name: str, seconds: float, log_post: float, ref: float) -> None:
    print(
        f"  {name:<20} {seconds:7.2f} s  log posterior {log_post:10.3f}  "
        f"LogisticRegression {ref:5.2f} s, ratio {seconds / ref:6.2f}x"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--uci-path", default=str(SHARED / "letter-recognition.data"))
    parser.add_argument("--hja-path", default=str(SHARED / "hja"), help="published HJA folder ('' skips)")
    parser.add_argument(
        "--compilation-cache", metavar="DIR", help="JAX's persistent compilation cache in DIR (default: off)"
    )
    args = parser.parse_args()
    if args.compilation_cache:
        orlr_ppl.enable_compilation_cache(args.compilation_cache)
    print(
        f"machine: {platform.machine()} cpus={os.cpu_count()} jax={jax.__version__} "
        f"orlr_ppl={Path(orlr_ppl.__file__).parent}"
    )
    out = {}
    data = _datasets().load_letter_frost(args.uci_path, seed=0)
    folds = list(data.kfold(10, seed=0))
    print("Letter Frost, 90 % folds, 26 classes:")
    runs = (("first fit (fold 0)", folds[0]), ("again (fold 0)", folds[0]), ("next fold (fold 1)", folds[1]))
    for label, (train, _) in runs:
        ref = _reference(train.bags, train.instance_labels)
        seconds, lp = _timed_fit(train.bags, train.label_sets, 26)
        _row(label, seconds, lp, ref)
        out["letter_" + label.split()[0]] = seconds
    rest = []
    for train, _ in folds[2:]:
        rest.append(_timed_fit(train.bags, train.label_sets, 26)[0])
    out["letter_ten_folds"] = out["letter_first"] + out["letter_next"] + sum(rest)
    times = " ".join(f"{t:.2f}" for t in rest)
    print(f"  {'folds 2-9':<20} {times} s; all ten folds {out['letter_ten_folds']:.1f} s")
    feats, sets, labels, n_classes = hja_shaped(np.random.default_rng(0))
    print("HJA-shaped, 548 bags, 13 classes:")
    ref = _reference(feats, labels)
    for label in ("first fit", "again"):
        seconds, lp = _timed_fit(feats, sets, n_classes)
        _row(label, seconds, lp, ref)
        out["hja_" + label.split()[0]] = seconds
    if args.hja_path and Path(args.hja_path).is_dir():
        _real_hja(args.hja_path, out)
    print(" ".join(f"{k}={v:.2f}" for k, v in out.items()))


def _real_hja(folder: str, out: dict[str, float]) -> None:
    """Fold 0 twice and fold 1 of HJA union's labelled segments, in the comparison's settings and ORLR()'s."""
    data = _datasets().load_hja(folder, version="union")
    folds = list(data.kfold(10, seed=0))
    runs = (("first", folds[0]), ("again", folds[0]), ("next", folds[1]))
    for key, settings in (("hja_real", {}), ("hja_defaults", {"max_iter": 50})):
        what = "comparison settings" if not settings else "ORLR() defaults"
        print(f"HJA union, labelled segments, 90 % folds, 13 classes, {what}:")
        for label, (train, _) in runs:
            ref = _reference(train.bags, train.instance_labels)
            seconds, lp = _timed_fit(train.bags, train.label_sets, 13, **settings)
            _row(f"{label} (fold {0 if label != 'next' else 1})", seconds, lp, ref)
            out[f"{key}_{label}"] = seconds


if __name__ == "__main__":
    main()
