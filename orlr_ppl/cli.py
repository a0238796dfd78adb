"""The ``orlr-ppl`` command line: demo, fit, predict, evaluate.

Data files for ``fit``/``predict``/``evaluate`` are ``.npz`` archives with
``features`` (n, d) float, ``bag_ids`` (n,) int (instances of a bag need not
be contiguous; bags are taken in order of first appearance), and optionally
``bag_labels`` (B, C) 0/1 (needed to fit, and for transductive prediction)
and ``instance_labels`` (n,) int (for evaluation only). ``--dataset digits``
uses the embedded MIML digits instead of a file.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
import warnings
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # like every heavy import here, the data layer loads on first use
    from .data import MIMLData

DEMO_DIR = Path("models") / "demo"


def _load_data(args: argparse.Namespace, split: str = "train") -> MIMLData:
    """``--data`` as read (``read_bag_npz``), or for ``--dataset digits`` the bags of ``split``.

    Digits training bags (``--n-bags`` of them) come from the train image pool and test bags
    (a third as many) from the disjoint test pool, so a model fitted by ``fit`` is never
    evaluated by ``predict``/``evaluate`` on an image it was trained on. (The cross-validated
    comparison, which splits bags itself, takes the train split.)
    """
    if args.dataset == "digits":
        from .data.datasets import make_miml_digits

        seed = args.seed + (0 if split == "train" else 1)
        n_bags = args.n_bags if split == "train" else max(args.n_bags // 3, 1)
        return make_miml_digits(n_bags, seed=seed, split=split)
    if not args.data:
        raise ValueError("give --data FILE.npz or --dataset digits")
    from .data.io import read_bag_npz

    return read_bag_npz(args.data)


def _estimator_from_args(args: argparse.Namespace, n_classes: int | None):
    from .estimators import ORLR

    return ORLR(
        method=args.method,
        prior_scale=None if args.prior_scale <= 0 else args.prior_scale,
        n_classes=n_classes,
        max_iter=args.max_iter,
        num_warmup=args.num_warmup,
        num_samples=args.num_samples,
        num_chains=args.num_chains,
        max_num_samples=args.max_num_samples,
        progress_bar=not args.quiet,
        random_state=args.seed,
    )


def _nuts_from_args(args: argparse.Namespace):
    from .estimators import ORLR

    return ORLR(
        method="nuts",
        prior_scale=args.prior_scale,
        num_warmup=args.num_warmup,
        num_samples=args.num_samples,
        num_chains=args.num_chains,
        max_num_samples=args.max_num_samples,
        random_state=args.seed,
    )


def _report(model, data: MIMLData, label: str) -> dict[str, float]:
    """Instance- and bag-level metrics of ``model`` on ``data``."""
    from .evaluation import metrics

    out: dict[str, float] = {}
    if data.instance_labels is not None:
        proba = model.predict_proba(data.bags)
        out["instance_accuracy_inductive"] = metrics.instance_accuracy(
            data.instance_labels, [p.argmax(1) for p in proba]
        )
        out["ece_inductive"] = metrics.expected_calibration_error(data.instance_labels, proba)
        out["macro_f1_inductive"] = metrics.macro_f1(data.instance_labels, [p.argmax(1) for p in proba])
        if data.label_sets is not None:
            out["instance_accuracy_transductive"] = metrics.instance_accuracy(
                data.instance_labels, model.predict(data.bags, data.label_sets)
            )
    if data.label_sets is not None:
        scores = model.bag_scores(data.bags)
        out["hamming_loss"] = metrics.hamming_loss(data.label_sets, model.predict_bags(data.bags))
        out["ranking_loss"] = metrics.ranking_loss(data.label_sets, scores)
        out["one_error"] = metrics.one_error(data.label_sets, scores)
        out["coverage"] = metrics.coverage(data.label_sets, scores)
        out["average_precision"] = metrics.average_precision(data.label_sets, scores)
    return {f"{label}{k}": v for k, v in out.items()}


def _demo(args: argparse.Namespace) -> int:
    from tqdm import tqdm

    from .data.datasets import make_miml_digits
    from .estimators import ORLR
    from .evaluation import metrics

    steps = tqdm(total=4, desc="demo", disable=args.quiet, file=sys.stderr)
    # Disjoint image pools: the inductive accuracy is on digits the models never saw.
    train = make_miml_digits(args.n_bags, seed=args.seed, split="train")
    test = make_miml_digits(max(args.n_bags // 3, 1), seed=args.seed + 1, split="test")
    steps.set_postfix_str("EM")
    steps.update()
    t0 = time.perf_counter()
    em = _fit_quietly(
        ORLR(method="em", prior_scale=args.prior_scale, max_iter=args.max_iter), train.bags, train.label_sets
    )
    t_em = time.perf_counter() - t0
    steps.set_postfix_str("NUTS")
    steps.update()
    t0 = time.perf_counter()
    nuts = _fit_quietly(_nuts_from_args(args), train.bags, train.label_sets)
    t_nuts = time.perf_counter() - t0
    steps.update()
    rows = []
    for name, model in (("EM/MAP", em), ("NUTS posterior mean", nuts)):
        proba = model.predict_proba(test.bags)
        rows.append(
            (
                name,
                metrics.instance_accuracy(test.instance_labels, [p.argmax(1) for p in proba]),
                metrics.instance_accuracy(train.instance_labels, model.predict(train.bags, train.label_sets)),
                metrics.expected_calibration_error(test.instance_labels, proba),
            )
        )
    out = Path(args.out)
    em.save(out / "em")
    nuts.save(out / "nuts")
    steps.update()
    steps.close()
    from .inference.inference_data import summary

    table = summary(nuts.posterior_)
    n_inst = sum(len(b) for b in train.bags)
    print(
        f"MIML digits: {len(train.bags)} training bags ({n_inst} instances), "
        f"{len(test.bags)} test bags, 10 classes"
    )
    print(
        f"EM: {em.n_iter_} iterations in {t_em:.1f}s; NUTS: {args.num_chains} chains x "
        f"({args.num_warmup} warmup + {args.num_samples} draws) in {t_nuts:.1f}s, "
        f"max R-hat {table['r_hat'].max():.3f}, min bulk ESS {table['ess_bulk'].min():.0f}"
    )
    print(f"{'model':<22}{'inductive acc':>15}{'transductive acc':>18}{'ECE':>8}")
    for name, ind, trans, ece in rows:
        print(f"{name:<22}{ind:>15.3f}{trans:>18.3f}{ece:>8.3f}")
    print(f"saved: {out / 'em'}, {out / 'nuts'}")
    _warn_lines(em.diagnostics().problems)  # its sentence starts "EM stopped after ..."
    _warn_lines(nuts.diagnostics().problems, prefix="NUTS: ")
    return 0


def _fit_quietly(model: Any, *fit_args: Any) -> Any:
    """``model.fit(*fit_args)`` with its ``ConvergenceWarning`` held back.

    The command line reports the fit's problems itself, as ``warning: ...``
    lines (``_warn_lines``), rather than as a Python warning with a source line.
    """
    from .inference.diagnostics import ConvergenceWarning

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        return model.fit(*fit_args)


def _warn_lines(problems: Sequence[str], prefix: str = "") -> None:
    for problem in problems:
        print(f"warning: {prefix}{problem}", file=sys.stderr)


def _fit(args: argparse.Namespace) -> int:
    data = _load_data(args)
    if data.label_sets is None:
        raise ValueError("fitting needs bag labels ('bag_labels' in the archive)")
    model = _fit_quietly(_estimator_from_args(args, data.n_classes), data.bags, data.label_sets)
    folder = model.save(args.out)
    print(f"fitted ORLR ({args.method}) on {len(data.bags)} bags; saved to {folder}")
    diagnostics = model.diagnostics()
    print("\n".join(diagnostics.summary_lines()))
    # A fit that ran but did not converge still succeeds (exit 0): its problems are warnings.
    _warn_lines(diagnostics.problems)
    return 0


def _predict(args: argparse.Namespace) -> int:
    from .estimators import ORLR

    model = ORLR.load(args.model)
    data = _load_data(args, split="test")
    sets = data.label_sets if args.transductive else None
    if args.transductive and sets is None:
        raise ValueError("--transductive needs 'bag_labels' in the archive")
    proba = model.predict_proba(data.bags, sets)
    lines = ["bag,instance,label," + ",".join(f"p{c}" for c in range(model.n_classes_))]
    for b, p in enumerate(proba):
        for i, row in enumerate(p):
            lines.append(f"{b},{i},{int(row.argmax())}," + ",".join(f"{v:.6g}" for v in row))
    text = "\n".join(lines) + "\n"
    if args.out:
        Path(args.out).write_text(text)
        print(f"wrote {len(lines) - 1} instance predictions to {args.out}")
    else:
        sys.stdout.write(text)
    return 0


def _evaluate(args: argparse.Namespace) -> int:
    if args.model is None:
        return _compare(args)
    from .estimators import ORLR

    model = ORLR.load(args.model)
    result = _report(model, _load_data(args, split="test"), "")
    if args.json:
        print(json.dumps(result, indent=2))
    else:
        for k, v in result.items():
            print(f"{k:<34}{v:.4f}")
    return 0


COMPARED = ("orlr-em", "orlr-nuts", "softmax", "majority", "sim")


def _comparison_data(args: argparse.Namespace) -> MIMLData:
    if args.dataset == "letter-frost":
        from .data.datasets import load_letter_frost

        return load_letter_frost(args.uci_path, seed=args.seed)
    data = _load_data(args)
    if data.label_sets is None or data.instance_labels is None:
        raise ValueError("a comparison needs bag labels and instance labels in the data")
    return data


def _compared_models(args: argparse.Namespace) -> dict:
    from .estimators import ORLR, SIM, MajorityClass, SoftmaxRegression

    chosen = [m.strip() for m in args.methods.split(",") if m.strip()]
    unknown = sorted(set(chosen) - set(COMPARED))
    if unknown:
        raise ValueError(f"--methods: unknown {unknown}; choose from {','.join(COMPARED)}")
    factories = {
        # As published: 50 EM iterations, plain maximum likelihood.
        "orlr-em": (
            "ORLR-EM",
            lambda: ORLR(
                method="em", prior_scale=None, intercept_scale=None, max_iter=50, m_steps=args.em_m_steps
            ),
        ),
        "orlr-nuts": ("ORLR-NUTS", lambda: _nuts_from_args(args)),
        "softmax": ("SoftmaxRegression", lambda: SoftmaxRegression()),
        "majority": ("MajorityClass", lambda: MajorityClass()),
        "sim": ("SIM", lambda: SIM(random_state=args.seed)),
    }
    return dict(factories[m] for m in COMPARED if m in chosen)


def _compare(args: argparse.Namespace) -> int:
    """Cross-validated comparison (``evaluate`` without ``--model``)."""
    from tqdm import tqdm

    from .data.datasets import published_figures
    from .evaluation.cross_validation import cross_validate

    if args.dataset is None and not args.data:
        raise ValueError("give --model to evaluate a saved model, or --dataset/--data for a comparison")
    data = _comparison_data(args)
    models = _compared_models(args)
    bar = tqdm(
        total=args.folds * len(models), desc=f"{args.protocol} CV", disable=args.quiet, file=sys.stderr
    )

    def step(name: str, fold: int) -> None:
        bar.set_postfix_str(f"fold {fold + 1}: {name}")
        bar.update()

    result = cross_validate(data, models, args.protocol, args.folds, args.seed, on_fold=step)
    bar.close()
    wanted = ("inductive", "transductive") if args.protocol == "both" else (args.protocol,)
    published = {p: published_figures(args.dataset, p) for p in wanted}
    if args.json:
        print(
            json.dumps(
                {"dataset": args.dataset or args.data, **result.to_json(), "published": published}, indent=2
            )
        )
        return 0
    print(f"{args.dataset or args.data}: {data!r}")
    print(
        f"{args.folds}-fold {args.protocol} (seed {args.seed}); instance accuracy in %, mean ± sd over folds"
    )
    print(result.table())
    for protocol, figures in published.items():
        if figures:
            print(f"published {protocol} accuracy (%): " + ", ".join(f"{k} {v}" for k, v in figures.items()))
    return 0


def _add_data_args(
    p: argparse.ArgumentParser, n_bags: int = 300, datasets: tuple[str, ...] = ("digits",)
) -> None:
    p.add_argument("--data", help="bag archive (.npz; see `orlr-ppl --help`)")
    p.add_argument("--dataset", choices=list(datasets), help="named dataset instead of --data")
    p.add_argument("--n-bags", type=int, default=n_bags, help="bags of the embedded dataset")
    p.add_argument("--seed", type=int, default=0)


def _add_fit_args(
    p: argparse.ArgumentParser,
    num_warmup: int = 300,
    num_samples: int = 1000,
    num_chains: int = 4,
    max_num_samples: int | None = None,
) -> None:
    """Fit options; the NUTS defaults are ``ORLR``'s (4 chains of 300 warmup + 1,000 draws, up to 2,000)."""
    p.add_argument("--prior-scale", type=float, default=1.0, help="sd of the weight prior (<= 0: none)")
    p.add_argument(
        "--max-iter", type=int, default=None, help="EM / L-BFGS iterations (default: 50 for EM, 500 for MAP)"
    )
    p.add_argument("--num-warmup", type=int, default=num_warmup, help="NUTS warmup per chain")
    p.add_argument("--num-samples", type=int, default=num_samples, help="NUTS draws per chain")
    p.add_argument("--num-chains", type=int, default=num_chains, help="NUTS chains")
    p.add_argument(
        "--max-num-samples",
        type=int,
        default=max_num_samples,
        help="NUTS draws per chain at most: unconverged chains go on up to this many "
        "(default: twice --num-samples; <= --num-samples: never)",
    )
    p.add_argument("--quiet", action="store_true", help="no progress bars")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="orlr-ppl",
        description="Instance annotation from bag labels with the ORed-logistic model.",
        epilog=__doc__.split("\n\n", 1)[1],
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    sub = parser.add_subparsers(dest="command", required=True)

    demo = sub.add_parser("demo", help="fit EM and NUTS on embedded MIML digits; compare MAP and posterior")
    demo.add_argument("--n-bags", type=int, default=200, help="training bags (default 200)")
    demo.add_argument("--seed", type=int, default=0)
    demo.add_argument("--out", default=str(DEMO_DIR), help=f"where to save the models (default {DEMO_DIR})")
    _add_fit_args(demo, num_warmup=200, num_samples=200, num_chains=2, max_num_samples=0)
    demo.set_defaults(func=_demo)

    fit = sub.add_parser("fit", help="fit ORLR and save it under models/")
    _add_data_args(fit)
    _add_fit_args(fit)
    fit.add_argument("--method", choices=["em", "map", "nuts", "svi"], default="em")
    fit.add_argument("--out", default=None, help="model folder (default models/orlr-<method>)")
    fit.set_defaults(func=_fit)

    pred = sub.add_parser("predict", help="instance labels and probabilities from a saved model (CSV)")
    pred.add_argument("--model", required=True, help="saved model folder")
    _add_data_args(pred)
    pred.add_argument("--transductive", action="store_true", help="condition on the bags' label sets")
    pred.add_argument("--out", help="CSV file (default: stdout)")
    pred.set_defaults(func=_predict)

    ev = sub.add_parser(
        "evaluate",
        help="metrics of a saved model (--model), or a cross-validated comparison of all methods",
        description="With --model: instance and bag metrics of a saved model on --data/--dataset. "
        "Without: K-fold comparison of ORLR-EM, ORLR-NUTS, SoftmaxRegression, MajorityClass and SIM "
        "(e.g. --dataset letter-frost --protocol inductive --folds 10).",
    )
    ev.add_argument("--model", help="saved model folder (omit for a cross-validated comparison)")
    _add_data_args(ev, datasets=("digits", "letter-frost"))
    ev.add_argument(
        "--uci-path",
        default=str(Path("..") / "shared" / "data" / "letter-recognition.data"),
        help="UCI letter-recognition.data for --dataset letter-frost (default ../shared/data/...)",
    )
    ev.add_argument(
        "--protocol",
        choices=["inductive", "transductive", "both"],
        default="inductive",
        help="instance accuracy on the held-out bags (inductive), or on the training bags given their "
        "label sets (transductive); both come from the same fits",
    )
    ev.add_argument("--folds", type=int, default=10, help="bag-level folds (default 10)")
    ev.add_argument("--methods", default=",".join(COMPARED), help=f"comma list from {','.join(COMPARED)}")
    ev.add_argument(
        "--em-m-steps", type=int, default=1, help="ORLR-EM gradient steps per M-step (default 1: classic GEM)"
    )
    ev.add_argument("--prior-scale", type=float, default=1.0, help="ORLR-NUTS weight prior sd")
    ev.add_argument("--num-warmup", type=int, default=100, help="ORLR-NUTS warmup per chain")
    ev.add_argument("--num-samples", type=int, default=100, help="ORLR-NUTS draws per chain")
    ev.add_argument("--num-chains", type=int, default=2, help="ORLR-NUTS chains")
    ev.add_argument(
        "--max-num-samples",
        type=int,
        default=0,
        help="ORLR-NUTS draws per chain at most: unconverged chains go on up to this many (0: never)",
    )
    ev.add_argument("--quiet", action="store_true", help="no progress bar")
    ev.add_argument("--json", action="store_true", help="print JSON")
    ev.set_defaults(func=_evaluate)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    from .compilation_cache import enable_compilation_cache

    # A second run loads the compiled programs instead of compiling them again.
    enable_compilation_cache()
    try:
        return args.func(args)
    except ValueError as err:
        print(f"orlr-ppl {args.command}: error: {err}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    raise SystemExit(main())
