"""``orlr-ppl``'s argument parser and entry point."""

from __future__ import annotations

import argparse
import os
import sys
import warnings
from collections.abc import Sequence
from pathlib import Path
from typing import NoReturn

from .._version import __version__
from ..inference.methods import EM, HORSESHOE_TARGET_ACCEPT, MAP, NUTS, TARGET_ACCEPT
from . import commands
from .compare import COMPARED, COMPARISON_NUTS, DEFAULT_METHODS, PAPER_EM_ITERATIONS, compare

DEMO_DIR = Path("models") / "demo"

FORMATS = """data formats (--data PATH, read by what PATH is; relative paths are from the current directory):
  *.arff      MIML relational ARFF: bag id, relational bag, one {0,1} attribute per label; its Mulan
              XML label file is --xml, or FILE.xml beside FILE.arff
  folder      the HJA birdsong layout as published: <prefix>_features.txt (bag id, features per
              segment), <prefix>_bag_labels.txt (bag id, class ids), optional
              <prefix>_instance_labels.txt (bag id, class id; -1 = unlabelled) and
              <prefix>_class_names.txt (id<TAB>name); or any one of those files
  *.npz       bag archive: features (n, d), bag_ids (n,), optional bag_labels (B, C) 0/1 and
              instance_labels (n,)
named datasets (--dataset): digits (embedded), letter-frost (UCI letter-recognition.data,
  --uci-path), hja (the published folder, --hja-path); their files are looked for in
  $ORLR_PPL_DATA, then in ../shared/data beside the package's checkout and the current directory."""


class _HelpFormatter(argparse.RawDescriptionHelpFormatter):
    """Keeps the epilog's layout and shows each option's default where its help does not say it."""

    def _get_help_string(self, action: argparse.Action) -> str:
        text = action.help or ""
        unset = action.default is None or action.default is False or action.default == argparse.SUPPRESS
        if "default" in text or "None:" in text or unset:
            return text
        if action.option_strings and action.nargs != 0:
            text += " (default: %(default)s)"
        return text


def _parser(sub, name: str, **kwargs) -> argparse.ArgumentParser:
    return sub.add_parser(name, formatter_class=_HelpFormatter, **kwargs)


def _add_data_args(p: argparse.ArgumentParser, n_bags: int, split: str) -> None:
    p.add_argument("--data", help="data file or folder (formats: `orlr-ppl --help`)")
    p.add_argument("--xml", help="Mulan XML label file of an ARFF --data (default: FILE.xml beside it)")
    p.add_argument(
        "--dataset", choices=["digits", "letter-frost", "hja"], help="a named dataset instead of --data"
    )
    p.add_argument(
        "--n-bags", type=int, default=n_bags, help=f"bags of --dataset digits ({split} image pool)"
    )
    p.add_argument("--seed", type=int, default=0, help="seed of the digits bags, folds and samplers")
    p.add_argument(
        "--uci-path", help="UCI letter-recognition.data for --dataset letter-frost (default: searched)"
    )
    p.add_argument(
        "--hja-path", help="folder of the published HJA files for --dataset hja (default: searched)"
    )
    p.add_argument(
        "--version",
        choices=["original", "union"],
        default=None,
        help="--dataset hja (default original), or --data with instance labels: the published bag "
        "labels, or each bag relabelled by the union of its segments' labels (the paper's HJA union)",
    )
    p.add_argument(
        "--drop-impossible",
        action="store_true",
        help="leave out, and name, the bags the union model cannot explain (fewer instances than "
        "labels, an empty label set); without it they are an error",
    )
    p.add_argument(
        "--drop-features",
        metavar="NAMES",
        help="comma-separated features to leave out, e.g. those a posterior fit's warning names as "
        "linear combinations of the others (give the same list to fit, predict and evaluate)",
    )
    p.add_argument(
        "--segments",
        choices=["labelled", "all"],
        default=None,
        help="--dataset hja (default labelled: the paper's 4,998 segments) or --data with instance "
        "labels (default all: every instance read): the labelled instances only, or all",
    )


def _add_fit_args(
    p: argparse.ArgumentParser,
    num_warmup: int = NUTS.num_warmup,
    num_samples: int = NUTS.num_samples,
    num_chains: int = NUTS.num_chains,
    max_num_samples: int | None = NUTS.max_num_samples,
) -> None:
    """Fit options; the NUTS defaults are ``NUTS()``'s."""
    p.add_argument(
        "--prior-scale",
        type=scale_value,
        default=1.0,
        help="scale of the weight prior: the Normal's sd, the group Laplace's or the horseshoe slab's "
        "(<= 0: no prior; auto: chosen by bag-level CV)",
    )
    p.add_argument(
        "--max-iter",
        type=int,
        default=None,
        help=f"EM / L-BFGS iterations (None: {EM.max_iter} for EM, {MAP.max_iter} for MAP and Laplace's MAP)",
    )
    p.add_argument("--num-warmup", type=int, default=num_warmup, help="NUTS warmup iterations per chain")
    p.add_argument(
        "--num-samples", type=int, default=num_samples, help="NUTS draws per chain; SVI's and Laplace's draws"
    )
    p.add_argument("--num-chains", type=int, default=num_chains, help="NUTS chains")
    p.add_argument(
        "--max-num-samples",
        type=int,
        default=max_num_samples,
        help="NUTS draws per chain at most: unconverged chains go on up to this many "
        "(None: twice --num-samples; <= --num-samples: never)",
    )
    p.add_argument(
        "--dense-mass",
        action="store_true",
        help="NUTS adapts a dense mass matrix (for correlated posteriors; give a longer --num-warmup)",
    )
    p.add_argument(
        "--whiten",
        choices=sorted(commands.WHITEN),
        default="auto",
        help="whether NUTS samples the weights in coordinates whitened by the Laplace approximation at "
        "its start: auto decides from the curvature there (for correlated weights), always, never "
        "(default: %(default)s)",
    )
    p.add_argument(
        "--target-accept",
        type=float,
        default=None,
        help=f"NUTS's target acceptance in (0, 1); default: {HORSESHOE_TARGET_ACCEPT} under the horseshoe, "
        f"{TARGET_ACCEPT} otherwise",
    )
    p.add_argument(
        "--quiet", action="store_true", help="no progress bars (they show only when stderr is a terminal)"
    )


def leak_value(text: str) -> float | str | None:
    """``--leak``: "none", "learn", or a probability in (0, 1)."""
    if text in ("none", "learn"):
        return None if text == "none" else text
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r}: give none, learn or a probability in (0, 1)") from None
    if not 0.0 < value < 1.0:
        raise argparse.ArgumentTypeError(f"{text!r}: a leak probability lies in (0, 1)")
    return value


def scale_value(text: str) -> float | str:
    """``--prior-scale`` and ``--gamma``: a number, or "auto" (chosen by bag-level cross-validation)."""
    if text == "auto":
        return text
    try:
        return float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r}: give a number or auto") from None


def _add_cv_scoring_arg(p: argparse.ArgumentParser, what: str) -> None:
    """``--cv-scoring``: the held-out bag score of the bag-level CV (``model_selection.CV_SCORINGS``)."""
    from ..estimators.model_selection import CV_SCORINGS

    p.add_argument(
        "--cv-scoring",
        choices=list(CV_SCORINGS),
        default="log_likelihood",
        help=f"held-out bag score that decides {what}",
    )


def _add_row_args(p: argparse.ArgumentParser) -> None:
    """The weights' rows: prior family, and a kernel step in the feature map (``RBFDictionary``)."""
    p.add_argument(
        "--prior",
        choices=["normal", "l21", "group_horseshoe"],
        default="normal",
        help="prior of the weights' rows: normal (l2), l21 (group Laplace: rows exactly zero at the "
        "MAP), group_horseshoe (nuts/svi only)",
    )
    p.add_argument(
        "--kernel", choices=["none", "rbf"], default="none", help="RBF kernel features (kernel ORLR)"
    )
    p.add_argument(
        "--gamma",
        type=scale_value,
        default="auto",
        help="RBF width, or auto (bag-level CV around the median)",
    )
    p.add_argument(
        "--dictionary-size",
        type=int,
        default=None,
        help="kernel: training instances kept (default: all; Nystroem: 100)",
    )
    p.add_argument("--nystroem", action="store_true", help="kernel: Nystroem features instead of the columns")
    _add_cv_scoring_arg(p, "the auto choices of --gamma and --prior-scale")


def _add_relaxation_args(p: argparse.ArgumentParser) -> None:
    """The model's relaxations of the union (``ORLR(novel_class=, leak=)``)."""
    p.add_argument(
        "--novel-class",
        action="store_true",
        help="a novel (background) class, the last column of the predictions, that any bag may hold "
        "without naming it; bags with no label become possible",
    )
    p.add_argument(
        "--leak",
        type=leak_value,
        default=None,
        metavar="{none,learn,EPS}",
        help="each bag label may be switched on without an instance, with probability EPS, or one "
        "learnt (learn); bags with fewer instances than labels become possible (default: none)",
    )


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="orlr-ppl",
        description="Instance annotation from bag labels with the ORed-logistic model.",
        epilog=FORMATS,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--version", action="version", version=f"orlr-ppl {__version__}")
    sub = parser.add_subparsers(dest="command", required=True)

    demo = _parser(
        sub, "demo", help="fit MAP, Laplace and NUTS on embedded MIML digits; compare them by proper scores"
    )
    demo.add_argument("--n-bags", type=int, default=300, help="training bags (test bags: a third as many)")
    demo.add_argument("--seed", type=int, default=0, help="seed of the bags and the sampler")
    demo.add_argument(
        "--max-digits", type=int, default=4, help="digits per bag at most (bags hold 2 to this many)"
    )
    demo.add_argument(
        "--out", default=str(DEMO_DIR), help="folder for the three saved models (map/, laplace/, nuts/)"
    )
    demo.add_argument("--force", action="store_true", help="overwrite models already saved there")
    # NUTS as ORLR's defaults run it; no extension past them, so the demo's time is bounded.
    _add_fit_args(demo, max_num_samples=0)
    demo.set_defaults(func=commands.demo)

    fit = _parser(sub, "fit", help="fit ORLR (or MIMM) and save it")
    _add_data_args(fit, n_bags=300, split="train")
    _add_fit_args(fit)
    fit.add_argument(
        "--method",
        choices=["map", "em", "laplace", "nuts", "svi", "mimm"],
        default="map",
        help="ORLR's inference method (map, em: the posterior mode; laplace, nuts, svi: the posterior), "
        "or mimm: the multi-instance mixture model (EM)",
    )
    fit.add_argument("--covariance", choices=["diag", "full"], default="diag", help="mimm: class covariances")
    fit.add_argument(
        "--features",
        choices=list(commands.FEATURE_OPTIONS),
        default="standard",
        help="feature map fitted on the training instances and saved with the model: standard (centre and "
        "scale), quantile-normal (each feature through its training quantiles to a Normal, then centre "
        "and scale: for spiked or heavy-tailed features), none (raw); --kernel adds a kernel step after it",
    )
    fit.add_argument(
        "--prune", type=float, default=0.0, help="fraction of bags with the most DP work to leave out"
    )
    fit.add_argument(
        "--bag-fraction",
        type=float,
        default=1.0,
        help="EM: below 1, stochastic EM on this fraction of the bags per iteration",
    )
    _add_relaxation_args(fit)
    _add_row_args(fit)
    fit.add_argument(
        "--instance-labels",
        metavar="FILE",
        nargs="+",
        help="instance labels given by hand, one or more CSV files with bag_id, instance, label columns "
        "(the files `orlr-ppl query` writes, their label column filled in; empty or -1: not labelled)",
    )
    fit.add_argument("--out", default=None, help="model folder (default: models/orlr-<method>, models/mimm)")
    fit.add_argument("--force", action="store_true", help="overwrite a model already saved in --out")
    fit.set_defaults(func=commands.fit)

    pred = _parser(
        sub,
        "predict",
        help="instance labels and probabilities from a saved model (CSV)",
        description="One CSV row per instance: bag id, instance, label and p(class) columns. A NUTS or "
        "SVI model adds the predicted label's 90% credible interval (p_lower, p_upper) and the label's "
        "entropy and mutual information with the weights (nats).",
    )
    pred.add_argument("--model", required=True, help="saved model folder")
    _add_data_args(pred, n_bags=100, split="test")
    pred.add_argument("--transductive", action="store_true", help="condition on the bags' label sets")
    pred.add_argument("--out", help="CSV file (default: stdout)")
    pred.set_defaults(func=commands.predict)

    qry = _parser(
        sub,
        "query",
        help="the instances to label next, from a saved ORLR model (CSV)",
        description="One CSV row per instance to label, best first: bag id, instance, score, the "
        "likeliest classes now with their probabilities, and an empty label column. Fill in the labels "
        "and refit with `fit --instance-labels FILE`; query again with the same file to skip them.",
    )
    qry.add_argument("--model", required=True, help="saved ORLR model folder")
    _add_data_args(qry, n_bags=300, split="train")
    qry.add_argument("-n", type=int, default=20, help="instances to ask for (one per bag first)")
    qry.add_argument(
        "--strategy",
        choices=["entropy", "bald", "margin", "random"],
        default="entropy",
        help="entropy, margin: of each instance's posterior given its bag's labels (entropy measured best); "
        "bald: mutual information with the weights (Laplace, NUTS, SVI models); random",
    )
    qry.add_argument(
        "--instance-labels", metavar="FILE", nargs="+", help="labels given so far (as fit's): not asked again"
    )
    qry.add_argument("--out", help="CSV file (default: stdout)")
    qry.set_defaults(func=commands.query)

    ev = _parser(
        sub,
        "evaluate",
        help="metrics of a saved model (--model), or a cross-validated comparison of the methods",
        description="With --model: instance and bag metrics of a saved model on --data/--dataset. "
        "Without: K-fold comparison of ORLR-EM, ORLR-NUTS, SoftmaxRegression, MajorityClass and SIM "
        "(e.g. --dataset letter-frost --protocol inductive --folds 10). The comparison's ORLR-EM is the "
        f"paper's ({PAPER_EM_ITERATIONS} iterations, no prior, --em-m-steps 1) and its ORLR-NUTS a short "
        f"run ({COMPARISON_NUTS.num_chains} chains x ({COMPARISON_NUTS.num_warmup} + "
        f"{COMPARISON_NUTS.num_samples}) draws), not fit's defaults (MAP; NUTS with {NUTS.num_chains} "
        f"chains x ({NUTS.num_warmup} + {NUTS.num_samples})): set the NUTS flags to match fit's.",
    )
    ev.add_argument("--model", help="saved model folder (without it: a cross-validated comparison)")
    _add_data_args(ev, n_bags=300, split="test with --model, train for a comparison")
    ev.add_argument(
        "--protocol",
        choices=["inductive", "transductive", "both"],
        default="inductive",
        help="instance accuracy on the held-out bags (inductive), or on the training bags given their "
        "label sets (transductive); both come from the same fits",
    )
    ev.add_argument("--folds", type=int, default=10, help="bag-level folds")
    ev.add_argument(
        "--methods",
        default=",".join(DEFAULT_METHODS),
        help=f"comma list of methods to compare, of {','.join(COMPARED)} (orlr-novel: a novel class and "
        "a learnt leak; korlr, korlr-l21: kernel ORLR, its width and prior scale chosen by bag-level CV; "
        "mimm: the multi-instance mixture model; kslr: K-SLR, softmax on kernel features of the "
        "instance labels, the kernel upper bound)",
    )
    ev.add_argument(
        "--em-m-steps", type=int, default=1, help="ORLR-EM gradient steps per M-step (1: classic GEM)"
    )
    ev.add_argument(
        "--prior-scale", type=float, default=1.0, help="ORLR-NUTS weight prior sd (<= 0: no prior)"
    )
    ev.add_argument(
        "--num-warmup", type=int, default=COMPARISON_NUTS.num_warmup, help="ORLR-NUTS warmup per chain"
    )
    ev.add_argument(
        "--num-samples", type=int, default=COMPARISON_NUTS.num_samples, help="ORLR-NUTS draws per chain"
    )
    ev.add_argument("--num-chains", type=int, default=COMPARISON_NUTS.num_chains, help="ORLR-NUTS chains")
    ev.add_argument(
        "--max-num-samples",
        type=int,
        default=0,
        help="ORLR-NUTS draws per chain at most: unconverged chains go on up to this many (0: never)",
    )
    _add_cv_scoring_arg(ev, "korlr's and korlr-l21's choices of gamma and prior scale")
    ev.add_argument(
        "--quiet", action="store_true", help="no progress bar (it shows only when stderr is a terminal)"
    )
    ev.add_argument("--json", action="store_true", help="print JSON")
    ev.set_defaults(func=lambda a: commands.evaluate_model(a) if a.model else compare(a))

    info = _parser(
        sub, "info", help="what a data file holds: bags, classes, unlabelled instances, union checks"
    )
    info.add_argument("path", nargs="?", help="data file or folder (formats: `orlr-ppl --help`)")
    info.add_argument("--data", help="the same, as fit, predict and evaluate take it")
    info.add_argument("--xml", help="Mulan XML label file of an ARFF (default: FILE.xml beside it)")
    info.set_defaults(func=commands.info)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if hasattr(args, "quiet") and not sys.stderr.isatty():
        args.quiet = True  # a bar redrawn into a log or a pipe is hundreds of lines, not progress
    from .. import set_host_device_count
    from ..compilation_cache import enable_compilation_cache

    with warnings.catch_warnings():  # called in a process where JAX has started (tests), it cannot act
        warnings.simplefilter("ignore", RuntimeWarning)
        set_host_device_count()  # before JAX starts: NUTS chains in parallel over the CPU cores

    try:
        enable_compilation_cache()  # a second run loads the compiled programs instead of compiling them
        return args.func(args)
    except ValueError as err:
        print(f"orlr-ppl {args.command}: error: {err}", file=sys.stderr)
        return 2
    except KeyboardInterrupt as err:  # Ctrl-C: one line, no traceback (a sampling NUTS fit keeps its draws)
        why = f" ({err}); nothing saved" if str(err) else ""  # e.g. why NUTS kept no draws
        print(f"\norlr-ppl {args.command}: interrupted{why}", file=sys.stderr)
        return 130


def run() -> NoReturn:
    """The ``orlr-ppl`` command: ``main``, then exit with its code.

    After Ctrl-C (130) it leaves at once, skipping the interpreter's shutdown: Ctrl-C stops the wait
    for a compiled loop (EM's whole fit is one), not the loop, which still runs on XLA's threads, and
    the shutdown would wait for it to end, or crash tearing it down. Saves are atomic, so nothing is
    left half written.
    """
    code = main()
    if code == 130:
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)
    sys.exit(code)
