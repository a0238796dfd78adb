"""The subcommands: ``demo``, ``fit``, ``predict``, ``query``, ``evaluate --model`` and ``info``.

Each takes the parsed arguments and returns the exit code; a ``ValueError``
from anywhere below becomes one line and exit code 2 (``main``). Heavy
imports happen inside the commands, so ``--help`` stays fast.
"""

from __future__ import annotations

import argparse
import csv
import io
import json
import re
import sys
import time
import warnings
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .sources import load_dataset, read_data

if TYPE_CHECKING:
    from ..data import MIMLData


FEATURE_OPTIONS: dict[str, str | None] = {
    "standard": "standard",
    "quantile-normal": "quantile-normal",
    "none": None,
}
"""``fit --features``: each choice's estimator ``features`` value."""


def features_value(args: argparse.Namespace) -> Any:
    """The estimators' ``features`` for ``--features`` and the kernel options (commands without them:
    "standard"): with ``--kernel rbf``, a pipeline of that map and ``RBFDictionary`` or ``Nystroem``."""
    features = FEATURE_OPTIONS[getattr(args, "features", "standard")]
    if getattr(args, "kernel", "none") == "none":
        return features
    from sklearn.kernel_approximation import Nystroem
    from sklearn.pipeline import Pipeline

    from ..features import RBFDictionary, make_feature_map

    gamma = None if getattr(args, "gamma", None) in (None, "auto") else float(args.gamma)
    size, seed = getattr(args, "dictionary_size", None), getattr(args, "seed", None)
    kernel = (
        Nystroem(kernel="rbf", gamma=gamma, n_components=size or 100, random_state=seed)
        if getattr(args, "nystroem", False)
        else RBFDictionary(gamma=gamma, n_components=size, random_state=seed)
    )
    before = make_feature_map(features)
    steps = [] if before is None else getattr(before, "steps", [("standard", before)])
    return Pipeline([*steps, ("kernel", kernel)])


def prior_scale(value: float | str) -> float | str | None:
    """``--prior-scale``: a scale, "auto", or None (no prior: plain maximum likelihood) for values <= 0."""
    if value == "auto":
        return value
    return None if float(value) <= 0 else float(value)


WHITEN = {"auto": "auto", "always": True, "never": False}
"""``--whiten``'s choices as ``NUTS(whiten=...)``'s values."""


def inference_from_args(args: argparse.Namespace, method: str) -> Any:
    """The settings object of ``method`` ("map", "em", "laplace", "nuts", "svi") from the fit options."""
    from ..inference.methods import EM, MAP, NUTS, SVI, Laplace

    max_iter = getattr(args, "max_iter", None)
    iterations = {} if max_iter is None else {"max_iter": max_iter}
    flags = ("dense_mass", "whiten", "target_accept")
    given = {k: getattr(args, k, None) not in (None, False, "auto") for k in flags}
    nuts_only = [f"--{k.replace('_', '-')}" for k in flags if given[k]]
    if nuts_only and method != "nuts":
        raise ValueError(f"{', '.join(nuts_only)}: NUTS settings, which --method {method} does not take")
    if getattr(args, "bag_fraction", 1.0) != 1.0 and method != "em":
        raise ValueError(f"--bag-fraction: stochastic EM takes --method em, not {method}")
    if method == "em":
        return EM(**iterations, bag_fraction=getattr(args, "bag_fraction", EM.bag_fraction))
    if method == "map":
        return MAP(**iterations)
    if method == "laplace":
        return Laplace(**iterations, num_draws=args.num_samples)
    if method == "svi":
        return SVI(num_draws=args.num_samples, progress_bar=not args.quiet)
    return NUTS(
        num_warmup=args.num_warmup,
        num_samples=args.num_samples,
        num_chains=args.num_chains,
        max_num_samples=args.max_num_samples,
        dense_mass=getattr(args, "dense_mass", False),
        whiten=WHITEN[getattr(args, "whiten", "auto")],
        target_accept=getattr(args, "target_accept", None),
        progress_bar=not args.quiet,
    )


def estimator_from_args(args: argparse.Namespace, method: str | None = None) -> Any:
    """The ``ORLR`` that ``fit``/``demo``/the comparison's ORLR-NUTS describe with their options.

    ``--prior-scale auto`` or ``--gamma auto`` make it an ``ORLRCV``, which
    chooses them by bag-level cross-validation (``--cv-scoring``).
    """
    from ..estimators import ORLR, ORLRCV, model_selection

    scale, gamma = prior_scale(args.prior_scale), getattr(args, "gamma", None)
    kernel = getattr(args, "kernel", "none") != "none"
    common = {
        "inference": inference_from_args(args, method or args.method),
        "random_state": args.seed,
        "prune": getattr(args, "prune", 0.0),
        "novel_class": getattr(args, "novel_class", False),
        "leak": getattr(args, "leak", None),
        "prior": getattr(args, "prior", "normal"),
        "features": features_value(args),
    }
    if scale != "auto" and not (kernel and gamma == "auto"):
        scoring = getattr(args, "cv_scoring", "log_likelihood")
        if scoring != "log_likelihood":
            raise ValueError(
                f"--cv-scoring {scoring}: it decides --prior-scale auto or --gamma auto, and neither is auto"
            )
        return ORLR(prior_scale=scale, **common)
    return ORLRCV(
        prior_scales=model_selection.PRIOR_SCALES if scale == "auto" else [scale],
        scoring=getattr(args, "cv_scoring", "log_likelihood"),
        progress_bar=not args.quiet,
        **common,
    )


def fit_quietly(model: Any, *fit_args: Any) -> Any:
    """``model.fit(*fit_args)`` with its ``ConvergenceWarning`` held back, its ``CollinearityWarning`` a line.

    The command line reports the fit's problems itself, as ``warning: ...``
    lines (``warn_lines``), rather than as a Python warning with a source line:
    the convergence verdict after the fit, the collinear features here.
    """
    from ..data.collinearity import CollinearityWarning
    from ..inference.checks.diagnostics import ConvergenceWarning

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("ignore", ConvergenceWarning)
        warnings.simplefilter("always", CollinearityWarning)
        fitted = model.fit(*fit_args)
    for w in caught:
        if issubclass(w.category, CollinearityWarning):
            warn_lines([str(w.message)])
        else:  # not ours to format: re-issued as it came
            warnings.warn_explicit(w.message, w.category, w.filename, w.lineno)
    return fitted


def warn_lines(problems: Sequence[str]) -> None:
    for problem in problems:
        print(f"warning: {problem}", file=sys.stderr)


def warn_unconverged(diagnostics: Any) -> None:
    """One ``warning:`` line for a fit that failed a check: a posterior's short paragraph
    (``diagnostics.warning_message``), an optimiser's sentence; its advice in flags (``as_flags``)."""
    if not diagnostics.problems:
        return
    if hasattr(diagnostics, "sampler"):
        from ..inference.checks.diagnostics import warning_message

        warn_lines([as_flags(warning_message(diagnostics))])
    else:
        warn_lines([as_flags(p) for p in diagnostics.problems])


FLAG_SPELLINGS: tuple[tuple[str, str], ...] = (
    (r"NUTS\(num_chains=(\d+), num_samples=(\d+)\)", r"--num-chains \1 --num-samples \2"),
    (r"NUTS\(num_chains=(\d+)\)", r"--num-chains \1"),
    (r"NUTS\(num_samples=\.\.\., max_num_samples=0\)", "--num-samples N --max-num-samples 0"),
    (r"NUTS\(target_accept=\.\.\.\)", "--target-accept"),
    (r"NUTS\(dense_mass=True, num_warmup=(\d+)\)", r"--dense-mass --num-warmup \1"),
    (r"\(num_warmup=(\d+)\)", r"(--num-warmup \1)"),
    (r"ORLR\(features='([\w-]+)'\)", r"--features \1"),
    (r"fit the guide longer \(SVI\(num_steps=\.\.\.\)\), try SVI\(guide='lowrank'\), or use", "use"),
    (r"inference='(\w+)', '(\w+)' or '(\w+)'", r"--method \1, \2 or \3"),
    (r"inference='(\w+)' or '(\w+)'", r"--method \1 or \2"),
    (r"inference='(\w+)'", r"--method \1"),
    (r"max_iter=(\d+)", r"--max-iter \1"),
    (r"raise max_iter", "raise --max-iter"),
    (r"\btol=", "the tolerance "),  # EM's and MAP's; no flag sets it
    (r"try a prior_scale", "try --prior-scale"),
    (r"fit with MAP \(L-BFGS\)", "fit with --method map (L-BFGS)"),
    (r"ORLR\.diagnostics\(\) reports every check in full\.", "The lines above report every check."),
)
"""The Python spellings of the diagnostics' advice (``inference.checks.diagnostics``, the estimator's notes)
and the ``fit`` flags that do the same, in the order they are tried."""


def as_flags(advice: str) -> str:
    """``advice`` with each Python spelling of a remedy replaced by the command line's flags."""
    for pattern, flags in FLAG_SPELLINGS:
        advice = re.sub(pattern, flags, advice)
    return advice


def report(model, data: MIMLData) -> dict[str, float]:
    """Instance- and bag-level metrics of ``model`` on ``data`` (unlabelled instances, -1, are skipped)."""
    from ..evaluation import metrics

    out: dict[str, float] = {}
    if data.instance_labels is not None:
        proba = model.predict_proba(data)
        predicted = [p.argmax(1) for p in proba]
        out["instance_accuracy_inductive"] = metrics.instance_accuracy(data.instance_labels, predicted)
        out["log_loss_inductive"] = metrics.log_loss(data.instance_labels, proba)
        out["brier_inductive"] = metrics.brier_score(data.instance_labels, proba)
        out["ece_inductive"] = metrics.expected_calibration_error(data.instance_labels, proba)
        out["selective_accuracy_inductive"] = metrics.selective_accuracy(data.instance_labels, proba)
        out["macro_f1_inductive"] = metrics.macro_f1(data.instance_labels, predicted)
        if getattr(model, "novel_class", False):
            out.update(novel_scores(data.instance_labels, proba))
        if data.label_sets is not None:
            out["instance_accuracy_transductive"] = metrics.instance_accuracy(
                data.instance_labels, model.predict(data, data.label_sets)
            )
    if data.label_sets is not None:
        scores = model.bag_scores(data)
        out["hamming_loss"] = metrics.hamming_loss(data.label_sets, model.predict_bags(data))
        out["ranking_loss"] = metrics.ranking_loss(data.label_sets, scores)
        out["one_error"] = metrics.one_error(data.label_sets, scores)
        out["coverage"] = metrics.coverage(data.label_sets, scores)
        out["average_precision"] = metrics.average_precision(data.label_sets, scores)
    return out


def novel_scores(instance_labels: Sequence[Any], proba: Sequence[Any]) -> dict[str, float]:
    """A novel-class model's scores: accuracy over the named classes alone (its last column, p(novel),
    left out of the argmax), and ``metrics.novel_auc`` when labelled and unlabelled instances both occur."""
    from ..evaluation import metrics

    out = {
        "instance_accuracy_named_classes": metrics.instance_accuracy(
            instance_labels, [p[:, :-1].argmax(axis=1) for p in proba]
        )
    }
    labelled = [int((y >= 0).sum()) for y in instance_labels]
    if 0 < sum(labelled) < sum(len(y) for y in instance_labels):
        out["auc_novel_unlabelled"] = metrics.novel_auc(instance_labels, [p[:, -1] for p in proba])
    return out


DEMO_MODELS = ("map", "laplace", "nuts")
"""The demo's fits, saved under ``--out`` in folders of these names: the posterior mode, the Gaussian
at it, and the posterior NUTS samples."""


def demo(args: argparse.Namespace) -> int:
    from tqdm import tqdm

    from ..data.datasets import make_miml_digits
    from ..evaluation import metrics

    if args.max_digits < 2:
        raise ValueError(f"--max-digits {args.max_digits}: a demo bag holds 2 digits or more; give 2 or more")
    steps = tqdm(total=len(DEMO_MODELS) + 1, desc="demo", disable=args.quiet, file=sys.stderr)
    # Disjoint image pools: the inductive accuracy is on digits the models never saw.
    train = make_miml_digits(args.n_bags, max_size=args.max_digits, seed=args.seed, split="train")
    test = make_miml_digits(
        max(args.n_bags // 3, 1), max_size=args.max_digits, seed=args.seed + 1, split="test"
    )
    # Pixels blank in every training digit (the image's border) leave weights only the prior
    # determines: dropped, as the collinearity warning would advise.
    blank = train.linear_dependencies().redundant
    train, test = train.drop_features(blank), test.drop_features(blank)
    out = Path(args.out)
    _refuse_overwrite([out / name for name in DEMO_MODELS], args.force)
    models, seconds = {}, {}
    for name in DEMO_MODELS:
        steps.set_postfix_str(name)
        steps.update()
        t0 = time.perf_counter()
        models[name] = fit_quietly(estimator_from_args(args, name), train)
        seconds[name] = time.perf_counter() - t0
    rows = []
    labels = {"map": "MAP", "laplace": "Laplace posterior", "nuts": "NUTS posterior"}
    for name, model in models.items():
        scores = metrics.instance_scores(test.instance_labels, model.predict_proba(test))
        transductive = metrics.instance_accuracy(
            train.instance_labels, model.predict(train, train.label_sets)
        )
        rows.append((labels[name], scores, transductive))
    for name, model in models.items():
        model.save(out / name, overwrite=args.force)
    steps.update()
    steps.close()
    mode, laplace, nuts = (models[n] for n in DEMO_MODELS)
    diagnostics = nuts.diagnostics()  # the checks' own table: the figures the warning quotes
    table = diagnostics.table[diagnostics.table["sd"] > 0]
    k_hat = laplace.diagnostics().sampler["approximation_k"]
    print(
        f"MIML digits: {len(train.bags)} training bags ({train.n_instances} instances), "
        f"{len(test.bags)} test bags, 10 classes, {len(train.feature_names)} pixels "
        f"({len(blank)} left out: the same in every training digit)"
    )
    print(
        f"MAP: {mode.n_iter_} L-BFGS iterations in {seconds['map']:.1f}s; "
        f"Laplace: {seconds['laplace']:.1f}s, "
        f"importance k-hat {k_hat:.2f}; NUTS: {args.num_chains} chains x ({args.num_warmup} warmup + "
        f"{args.num_samples} draws) in {seconds['nuts']:.1f}s, max R-hat {table['r_hat'].max():.3f}, "
        f"min bulk ESS {table['ess_bulk'].min():.0f}"
    )
    print("held-out digits (accuracy, log loss, Brier, ECE, accuracy on the 80% most confident); training")
    print(f"{'model':<20}{'acc':>7}{'NLL':>8}{'Brier':>8}{'ECE':>8}{'acc@80%':>9}{'transductive':>14}")
    for label, s, trans in rows:
        print(
            f"{label:<20}{s['accuracy']:>7.3f}{s['log_loss']:>8.3f}{s['brier']:>8.3f}{s['ece']:>8.3f}"
            f"{s['selective_accuracy']:>9.3f}{trans:>14.3f}"
        )
    print(f"saved: {', '.join(str(out / name) for name in DEMO_MODELS)}")
    warn_unconverged(mode.diagnostics())  # its sentence starts "MAP (L-BFGS) stopped after ..."
    warn_unconverged(laplace.diagnostics())
    warn_unconverged(diagnostics)
    return 0


def _refuse_overwrite(folders: Sequence[Path], force: bool) -> None:
    """Say before a long fit, not after it, that its save would overwrite a model."""
    from ..estimators.persistence import MODEL_FILES

    taken = [str(f) for f in folders if any((f / name).exists() for name in MODEL_FILES)]
    if taken and not force:
        raise ValueError(f"{', '.join(taken)} already hold(s) a saved model: pass --force to overwrite")


def fittable(data: MIMLData, args: argparse.Namespace) -> tuple[MIMLData, list[str]]:
    """``data`` checked for bags the union model cannot explain; with ``--drop-impossible`` without them.

    Returns the data to fit and the ids of the bags left out (also printed as a warning line).
    """
    if data.label_sets is None:
        raise ValueError("fitting needs bag labels, and these data have none")
    relaxed = {"leak": getattr(args, "leak", None) is not None, "novel": getattr(args, "novel_class", False)}
    return _without_impossible(data, relaxed, args, True, "union model")


def _remedies(data: MIMLData, relaxed: dict[str, bool], relaxable: bool) -> str:
    """The flags that would make the impossible bags fittable, and only those: ``--drop-impossible``
    always; where a fit can still relax the model (``relaxable``), ``--leak`` for more labels than
    instances and ``--novel-class`` for an empty label set."""
    flags = ["--drop-impossible"]
    if relaxable:
        sizes = [(len(data.label_sets[b]), len(data.bags[b])) for b in data.impossible_bags(**relaxed)]
        if not relaxed["leak"] and any(n_labels > n > 0 for n_labels, n in sizes):
            flags.append("--leak")
        if not relaxed["novel"] and any(n_labels == 0 < n for n_labels, n in sizes):
            flags.append("--novel-class")
    return ", ".join(flags[:-1]) + " or " + flags[-1] if len(flags) > 1 else flags[0]


def _without_impossible(
    data: MIMLData, relaxed: dict[str, bool], args: argparse.Namespace, relaxable: bool, judge: str
) -> tuple[MIMLData, list[str]]:
    """The impossible bags under ``relaxed``: an error naming the flags that fix them (``_remedies``),
    or, with ``--drop-impossible``, left out and named in a warning line. Returns the data kept and
    the ids left out."""
    if not getattr(args, "drop_impossible", False):
        try:
            data.check_fittable(**relaxed)
        except ValueError as err:
            options = _remedies(data, relaxed, relaxable)
            raise ValueError(f"{err} (on the command line: {options})") from None
        return data, []
    clean, dropped = data.drop_impossible(**relaxed)
    ids = [str(data.bag_ids[b]) for b in dropped]
    if ids:
        print(f"warning: left out {len(ids)} bag(s) the {judge} cannot explain: {ids}", file=sys.stderr)
    return clean, ids


def fit(args: argparse.Namespace) -> int:
    data, _ = fittable(load_dataset(args), args)
    model, name = _model_to_fit(args)
    default = "mimm" if args.method == "mimm" else f"orlr-{args.method}"
    folder = Path("models") / default if args.out is None else Path(args.out)
    _refuse_overwrite([folder], args.force)
    given = _instance_labels(args, data)
    model = fit_quietly(model, data) if given is None else fit_quietly(model, data, None, given)
    folder = model.save(folder, overwrite=args.force)
    print(f"fitted {name} on {data.n_bags} bags ({data.n_instances} instances); saved to {folder}")
    if given is not None:
        print(f"with {sum(int((g >= 0).sum()) for g in given)} instance labels from {args.instance_labels}")
    if getattr(model, "pruned_bags_", None):
        pruned = model.pruned_bags_
        where = "positions among the bags fitted"
        print(f"pruned {len(pruned)} bag(s) with the most DP work ({where}): {pruned}")
    diagnostics = model.diagnostics()
    print("\n".join(as_flags(line) for line in diagnostics.summary_lines()))
    # A fit that ran but did not converge still succeeds (exit 0): its problems are a warning.
    warn_unconverged(diagnostics)
    return 0


def _instance_labels(args: argparse.Namespace, data: MIMLData) -> list | None:
    """``--instance-labels FILE`` read against ``data``'s bags and classes (``read_annotations``), or None."""
    if getattr(args, "instance_labels", None) is None:
        return None
    if args.method == "mimm":
        raise ValueError("--instance-labels: ORLR takes hand-given instance labels; --method mimm does not")
    if getattr(args, "prune", 0.0) > 0:
        raise ValueError("--instance-labels with --prune: pruning leaves bags out; give one or the other")
    return read_instance_labels(args.instance_labels, data, getattr(args, "novel_class", False))


def read_instance_labels(paths: Sequence[str], data: MIMLData, novel_class: bool = False) -> list:
    """The labels of one or more annotation files (``read_annotations``), merged; two files that label
    one instance differently are an error naming both. ``novel_class``: a novel-class model's, whose
    files may name its extra class."""
    import numpy as np

    from ..data.io import read_annotations
    from ..estimators.relaxed import NOVEL_CLASS_NAME

    novel = NOVEL_CLASS_NAME if novel_class else None
    merged: list = []
    for k, path in enumerate(paths):
        labels = read_annotations(path, data, novel)
        for b, (before, now) in enumerate(zip(merged, labels)):
            clash = np.flatnonzero((before >= 0) & (now >= 0) & (before != now))
            if clash.size:
                i = int(clash[0])
                names = [*data.class_names, *([novel] if novel else [])]
                raise ValueError(
                    f"bag {data.bag_ids[b]}, instance {i} is labelled {names[before[i]]!r} in "
                    f"{', '.join(paths[:k])} and {names[now[i]]!r} in {path}: keep one"
                )
            labels[b] = np.where(now >= 0, now, before)
        merged = labels
    return merged


_ORLR_ONLY = {
    "prior": "normal",
    "kernel": "none",
    "novel_class": False,
    "leak": None,
    "prune": 0.0,
    "bag_fraction": 1.0,
    "prior_scale": 1.0,
}
"""``fit``'s ORLR options, at their defaults: ``--method mimm`` refuses any other value."""


def _model_to_fit(args: argparse.Namespace) -> tuple[Any, str]:
    """``fit``'s estimator and its display name: ORLR by ``--method``, or MIMM."""
    if args.method != "mimm":
        return estimator_from_args(args), f"ORLR ({args.method})"
    from ..estimators import MIMM

    given = [k for k, default in _ORLR_ONLY.items() if getattr(args, k, default) != default]
    if given:
        shown = ", ".join("--" + k.replace("_", "-") for k in given)
        raise ValueError(f"{shown}: ORLR options, which --method mimm does not take; leave them out")
    max_iter = MIMM().max_iter if args.max_iter is None else args.max_iter
    model = MIMM(
        covariance=args.covariance,
        max_iter=max_iter,
        random_state=args.seed,
        features=features_value(args),
    )
    return model, "MIMM"


def _load_model(path: str):
    from ..estimators.base import BagClassifier

    return BagClassifier.load(path)


def _class_names(model, data: MIMLData) -> list[str]:
    """The model's class names, after checking that the data's (if they have their own) agree."""
    names = list(getattr(model, "class_names_", None) or [str(c) for c in range(model.n_classes_)])
    default = [str(c) for c in range(data.n_classes)]
    if list(data.class_names) != default and list(data.class_names) != names:
        raise ValueError(
            f"the data's classes {data.class_names} are not the model's {names}: "
            "predict with data labelled in the model's classes"
        )
    return names


def _explainable(data: MIMLData, model: Any, args: argparse.Namespace) -> MIMLData:
    """``data`` checked for bags the saved model cannot explain (under its own leak and novel class);
    with ``--drop-impossible`` without them, as ``fittable``."""
    if data.label_sets is None:
        return data
    relaxed = {
        "leak": getattr(model, "leak", None) is not None,
        "novel": bool(getattr(model, "novel_class", False)),
    }
    return _without_impossible(data, relaxed, args, False, "model")[
        0
    ]  # a saved model's relaxations are fixed


def predict(args: argparse.Namespace) -> int:
    model = _load_model(args.model)
    data = load_dataset(args, split="test")
    if args.transductive and data.label_sets is None:
        raise ValueError("--transductive needs the bags' label sets, and these data have none")
    if args.transductive or args.drop_impossible:  # inductive predictions read no label set
        data = _explainable(data, model, args)
    names = _class_names(model, data)
    given = data.label_sets if args.transductive else None
    proba = model.predict_proba(data, given)
    if getattr(model, "novel_class", False):
        from ..estimators.relaxed import NOVEL_CLASS_NAME

        names = [*names, NOVEL_CLASS_NAME]
    # A posterior's instance-level uncertainty: the predicted label's credible interval, and the
    # label's entropy and mutual information with the weights. A point fit has none to write.
    posterior = hasattr(model, "posterior_")
    intervals = model.predict_interval(data, label_sets=given) if posterior else None
    uncertainty = model.predict_uncertainty(data, given) if posterior else None
    buffer = io.StringIO()
    writer = csv.writer(buffer, lineterminator="\n")
    extra = ["p_lower", "p_upper", "entropy", "mutual_information"] if posterior else []
    writer.writerow(["bag_id", "instance", "label", *[f"p({n})" for n in names], *extra])
    n_rows = 0
    for b, (bag_id, p) in enumerate(zip(data.bag_ids, proba)):
        for i, row in enumerate(p):
            top = int(row.argmax())
            cells = [bag_id, i, names[top], *[f"{v:.6g}" for v in row]]
            if posterior:
                cells += [f"{v:.6g}" for v in (*intervals[b][i, top], *uncertainty[b][i])]
            writer.writerow(cells)
            n_rows += 1
    if args.out:
        Path(args.out).write_text(buffer.getvalue())
        print(f"wrote {n_rows} instance predictions of {data.n_bags} bags to {args.out}")
    else:
        sys.stdout.write(buffer.getvalue())
    return 0


def query(args: argparse.Namespace) -> int:
    """The instances a person should label next (``ORLR.query``), as a CSV with an empty ``label`` column
    to fill in and give back to ``fit --instance-labels``."""
    model = _load_model(args.model)
    if not hasattr(model, "query"):
        raise ValueError(f"{args.model} holds a {type(model).__name__}: query needs an ORLR model")
    data = load_dataset(args)
    if data.label_sets is None:
        raise ValueError("query scores instances given their bags' labels, and these data have none")
    data = _explainable(data, model, args)
    _class_names(model, data)
    strategy = args.strategy
    novel = bool(getattr(model, "novel_class", False))
    given = None if args.instance_labels is None else read_instance_labels(args.instance_labels, data, novel)
    table = model.query(data, args.n, strategy, instance_labels=given)
    table["label"] = ""
    text = table.to_csv(index=False, float_format="%.6g", lineterminator="\n")
    if args.out:
        Path(args.out).write_text(text)
        print(f"wrote {len(table)} instances to label ({strategy}) to {args.out}: fill in its label column")
    else:
        sys.stdout.write(text)
    return 0


def evaluate_model(args: argparse.Namespace) -> int:
    model = _load_model(args.model)
    data = _explainable(load_dataset(args, split="test"), model, args)
    _class_names(model, data)
    result = report(model, data)
    if not result:
        raise ValueError("these data have neither instance labels nor bag label sets: nothing to score")
    seen = model.fitted_on(data)
    if seen is not None and seen.any():
        warn_lines(
            [
                f"{int(seen.sum())} of {seen.size} bags here are bags the model was fitted on: the "
                "figures are in-sample for them, not held out (evaluate on bags left out of the fit)"
            ]
        )
    if args.json:
        print(json.dumps(result, indent=2))
    else:
        for k, v in result.items():
            print(f"{k:<34}{v:.4f}")
    return 0


def info(args: argparse.Namespace) -> int:
    if (args.path is None) == (args.data is None):
        raise ValueError("give the data once: orlr-ppl info PATH, or orlr-ppl info --data PATH")
    path = args.path if args.path is not None else args.data
    data = read_data(path, args.xml)
    print(f"{path}: {data!r}")
    print("\n".join(data.summary().lines()))
    return 0
