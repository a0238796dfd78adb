"""Fit time of ORLR's point fits: EM against scikit-learn's LogisticRegression, and a user's fold loop.

Default: ``ORLR(inference=EM(...))`` fitted in one process, with the comparison's settings (no
prior, 50 iterations, one line-searched gradient step per M-step: ``orlr-ppl evaluate``'s
ORLR-EM), on

  (i) Letter Frost folds (10-fold by bag, data seed 0; needs the UCI letters file),
  (ii) HJA-shaped synthetic bags (``harness.hja_shaped``: 548 bags, 13 classes, 39 features), and
  (iii) HJA union's labelled segments (the published files, 10-fold by bag), with the comparison's
       settings and with ``ORLR()``'s defaults (a Normal(0, 1) prior, 10 steps per M-step) at
       50 iterations:

a first fit (which compiles), a second fit of the same data (which reuses what the first
compiled), a fit on the next fold (other bags: it reuses the program when the folds' buckets
pack alike), and for Letter Frost the other eight folds, so that ``letter_ten_folds`` is what a
10-fold EM comparison spends fitting. The reference is ``LogisticRegression`` fitted on the same
training instances, standardised, with their true labels, timed in the same run.

    python -m benchmarks.bench_em [--compilation-cache DIR]

``--folds-loop``: a user's own cross-validation loop instead. In a process with the persistent
compilation cache off, ``ORLR(inference=...)`` with its defaults is fitted on each of the 10
training folds in turn (``MIMLData.kfold``, seed 0), timed around ``fit``. A fold that takes
seconds compiled a new program; each row gives the fold's packing (the layout of an earlier fold
wherever a fold fits it) and, for EM, the M-step's row count, and says which of them no fold
before it had.

    python -m benchmarks.bench_em --folds-loop --inference em|map [--dataset letter-frost|hja-union]

The default run's last line is ``letter_first=<s> letter_again=<s> letter_next=<s>
letter_ten_folds=<s> hja_first=<s> hja_again=<s>`` and, with the HJA files, ``hja_real_*`` and
``hja_defaults_*`` (first, again, next).
"""

from __future__ import annotations

import argparse
import os
import time
import warnings
from pathlib import Path

import numpy as np

from benchmarks.harness import SHARED, hja_shaped, machine

COMPARISON = {"prior_scale": None, "intercept_scale": None}
"""``orlr-ppl evaluate``'s ORLR-EM, the published EM: no prior, with ``EM(max_iter=50, m_steps=1)``."""


def _model(n_classes: int, comparison: bool):
    """The comparison's EM, or ``ORLR()``'s defaults at 50 iterations."""
    from orlr_ppl import EM, ORLR

    if comparison:
        return ORLR(inference=EM(max_iter=50, m_steps=1), n_classes=n_classes, **COMPARISON)
    return ORLR(inference=EM(max_iter=50), n_classes=n_classes)


def _timed_fit(bags, sets, n_classes, comparison: bool = True) -> tuple[float, float]:
    model = _model(n_classes, comparison)
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
    from sklearn.linear_model import LogisticRegression

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


def against_logistic_regression(args: argparse.Namespace) -> None:
    """The default run: first, again and next fits, each beside LogisticRegression."""
    import orlr_ppl
    from orlr_ppl.data.datasets import load_letter_frost

    if args.compilation_cache:
        orlr_ppl.enable_compilation_cache(args.compilation_cache)
    print(machine())
    out = {}
    data = load_letter_frost(args.uci_path, seed=0)
    folds = list(data.kfold(10, seed=0))
    print("Letter Frost, 90 % folds, 26 classes:")
    runs = (("first fit (fold 0)", folds[0]), ("again (fold 0)", folds[0]), ("next fold (fold 1)", folds[1]))
    for label, (train, _) in runs:
        ref = _reference(train.bags, train.instance_labels)
        seconds, lp = _timed_fit(train.bags, train.label_sets, 26)
        _row(label, seconds, lp, ref)
        out["letter_" + label.split()[0]] = seconds
    rest = [_timed_fit(train.bags, train.label_sets, 26)[0] for train, _ in folds[2:]]
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
    from orlr_ppl.data.hja import load_hja

    data = load_hja(folder, version="union")
    folds = list(data.kfold(10, seed=0))
    runs = (("first", folds[0]), ("again", folds[0]), ("next", folds[1]))
    for key, comparison in (("hja_real", True), ("hja_defaults", False)):
        what = "comparison settings" if comparison else "ORLR() defaults"
        print(f"HJA union, labelled segments, 90 % folds, 13 classes, {what}:")
        for label, (train, _) in runs:
            ref = _reference(train.bags, train.instance_labels)
            seconds, lp = _timed_fit(train.bags, train.label_sets, 13, comparison)
            _row(f"{label} (fold {0 if label != 'next' else 1})", seconds, lp, ref)
            out[f"{key}_{label}"] = seconds


def folds_loop(args: argparse.Namespace) -> None:
    """``--folds-loop``: the ten training folds fitted in turn, and what each fold compiled."""
    os.environ["ORLR_PPL_COMPILATION_CACHE"] = "0"  # compile in this process, whatever the caller set
    from orlr_ppl import ORLR
    from orlr_ppl.data.datasets import load_letter_frost
    from orlr_ppl.data.hja import load_hja
    from orlr_ppl.dp.packing import canonical_size
    from orlr_ppl.model.numpyro_model import make_model_data

    if args.dataset == "letter-frost":
        data = load_letter_frost(args.uci_path)
    else:
        data = load_hja(args.hja_path, version="union")
    seen: set[tuple] = set()
    print(machine())
    print(f"{args.dataset}, inference={args.inference}")
    print("| fold | fit s | iterations | buckets (bags x instances, K) | M-step rows | new |")
    print("| --- | --- | --- | --- | --- | --- |")
    for k, (train, _) in enumerate(data.kfold(10, seed=0)):
        t0 = time.perf_counter()
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # a fold that stops short of tol is not the point here
            model = ORLR(inference=args.inference).fit(train)
        seconds = time.perf_counter() - t0
        # The same packing as the fit's: the estimator's layout for these bags is the one recalled.
        packed = make_model_data(train.bags, train.label_sets, train.n_classes, canonical_shapes=True)
        buckets = tuple((b.mask.shape, b.max_labels) for b in packed.buckets)
        rows = canonical_size(max(train.n_instances, packed.max_instances), steps=8)  # as ``flat_rows``
        keys = [("buckets", ("b", buckets))] + ([("rows", ("r", rows))] if args.inference == "em" else [])
        new = [what for what, key in keys if key not in seen]
        seen |= {key for _, key in keys}
        text = ", ".join(f"{b}x{n} K={m}" for (b, n), m in buckets)
        shown = rows if args.inference == "em" else "-"
        print(f"| {k} | {seconds:.2f} | {model.n_iter_} | {text} | {shown} | {', '.join(new) or '-'} |")


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--uci-path", default=str(SHARED / "letter-recognition.data"))
    parser.add_argument("--hja-path", default=str(SHARED / "hja"), help="published HJA folder ('' skips)")
    parser.add_argument(
        "--compilation-cache", metavar="DIR", help="JAX's persistent compilation cache in DIR (default: off)"
    )
    parser.add_argument("--folds-loop", action="store_true", help="a user's 10-fold loop, fold by fold")
    parser.add_argument("--inference", choices=["em", "map"], default="em", help="with --folds-loop")
    parser.add_argument(
        "--dataset", choices=["letter-frost", "hja-union"], default="letter-frost", help="with --folds-loop"
    )
    args = parser.parse_args()
    if args.folds_loop:
        if args.compilation_cache:
            parser.error("--folds-loop compiles in its own process: it takes no --compilation-cache")
        folds_loop(args)
    else:
        against_logistic_regression(args)


if __name__ == "__main__":
    main()
