"""``orlr-ppl evaluate`` without ``--model``: the cross-validated comparison of every method."""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable

from ..inference.methods import NUTS
from .commands import estimator_from_args, fittable
from .sources import load_dataset

COMPARED = (
    "orlr-em",
    "orlr-nuts",
    "orlr-novel",
    "korlr",
    "korlr-l21",
    "mimm",
    "softmax",
    "kslr",
    "majority",
    "sim",
)
"""``--methods`` names, in the order the table lists them."""
DEFAULT_METHODS = ("orlr-em", "orlr-nuts", "softmax", "majority", "sim")
"""``--methods``' default: the paper's linear methods (the others are asked for by name)."""
PAPER_EM_ITERATIONS = 50
"""The comparison's ORLR-EM iterations, the paper's."""
COMPARISON_NUTS = NUTS(num_chains=2, num_warmup=100, num_samples=100)
"""The comparison's ORLR-NUTS run by default: short, as it is fitted once a fold (``--num-*``)."""
TRAINED_ON_INSTANCE_LABELS = ("softmax", "kslr", "majority")
"""The reference methods, fitted on instance labels: bag-labelled data cannot train them."""


def chosen_methods(text: str) -> list[str]:
    """``--methods``' comma list, checked: unknown names and an empty list are errors."""
    chosen = [m.strip() for m in text.split(",") if m.strip()]
    if not chosen:
        raise ValueError(f"--methods is empty: choose one or more of {','.join(COMPARED)}")
    unknown = sorted(set(chosen) - set(COMPARED))
    if unknown:
        raise ValueError(f"--methods: unknown {unknown}; choose from {','.join(COMPARED)}")
    return chosen


def compared_models(args: argparse.Namespace, chosen: list[str] | None = None) -> dict[str, Callable]:
    """Display name -> a factory of a fresh, unfitted model, for each chosen method (default: those
    of ``--methods``)."""
    from ..estimators import MIMM, ORLR, ORLRCV, SIM, MajorityClass, SoftmaxRegression
    from ..inference.methods import EM

    chosen = chosen_methods(args.methods) if chosen is None else chosen
    scoring = getattr(args, "cv_scoring", "log_likelihood")  # the kernel fits' CV score
    factories = {
        # As published: PAPER_EM_ITERATIONS EM iterations, plain maximum likelihood. ``cross_validate``
        # gives every ORLR one packing layout that all training folds fit: each compiles once for ten folds.
        "orlr-em": (
            "ORLR-EM",
            lambda: ORLR(
                inference=EM(max_iter=PAPER_EM_ITERATIONS, m_steps=args.em_m_steps),
                prior_scale=None,
                intercept_scale=None,
            ),
        ),
        "orlr-nuts": ("ORLR-NUTS", lambda: estimator_from_args(args, "nuts")),
        # Issue 12: a novel (background) class and a learnt leak, EM with ORLR's default prior. Its
        # instance accuracy counts a labelled instance predicted novel as wrong.
        "orlr-novel": ("ORLR-novel", lambda: ORLR(novel_class=True, leak="learn")),
        # Issue 13: kernel ORLR, gamma and the prior's scale chosen inside each fit by bag-level CV
        # (no instance labels), EM; with the Normal prior, or the l2,1 (group Laplace) one.
        "korlr": ("K-ORLR", lambda: ORLRCV(features="rbf", random_state=args.seed, scoring=scoring)),
        "korlr-l21": (
            "K-ORLR-l21",
            lambda: ORLRCV(features="rbf", prior="l21", random_state=args.seed, scoring=scoring),
        ),
        # Issue 13: the generative counterpart, a Gaussian per class (full covariance), EM.
        "mimm": ("MIMM", lambda: MIMM(covariance="full", random_state=args.seed)),
        "softmax": ("SoftmaxRegression", lambda: SoftmaxRegression()),
        # Issue 13: K-SLR, the kernel upper bound: softmax on RBF features of the instance labels, its
        # width and prior scale chosen by CV over the training bags' instances.
        "kslr": (
            "K-SLR",
            lambda: SoftmaxRegression(
                features="rbf", gammas="auto", prior_scale="auto", random_state=args.seed
            ),
        ),
        "majority": ("MajorityClass", lambda: MajorityClass()),
        "sim": ("SIM", lambda: SIM(random_state=args.seed)),
    }
    return dict(factories[m] for m in COMPARED if m in chosen)


def compare(args: argparse.Namespace) -> int:
    """Cross-validated comparison (``evaluate`` without ``--model``)."""
    from tqdm import tqdm

    from ..data.datasets import published_figures
    from ..evaluation.cross_validation import cross_validate

    models = compared_models(args)  # checked before the data are read
    data = load_dataset(args)
    if data.instance_labels is None:
        models = _bag_labelled(args)
    data, dropped = fittable(data, args)
    bar = tqdm(
        total=args.folds * len(models), desc=f"{args.protocol} CV", disable=args.quiet, file=sys.stderr
    )

    def step(name: str, fold: int) -> None:
        bar.set_postfix_str(f"fold {fold + 1}: {name}")
        bar.update()

    result = cross_validate(data, models, args.protocol, args.folds, args.seed, on_fold=step)
    bar.close()
    name = _dataset_name(args)
    wanted = ("inductive", "transductive") if args.protocol == "both" else (args.protocol,)
    published = {p: published_figures(name, p) for p in wanted}
    if args.json:
        out = {
            "dataset": name,
            "dropped_bags": dropped,
            "settings": settings_line(args, models),
            **result.to_json(),
            "published": published,
        }
        print(json.dumps(out, indent=2))
        return 0
    print(f"{name}: {data!r}")
    scored = (
        f"{args.protocol} (seed {args.seed}); instance accuracy in %"
        if data.instance_labels is not None
        else f"(seed {args.seed}); no instance labels: the bag metrics on the held-out bags"
    )
    print(f"{args.folds}-fold {scored}, mean ± sd over folds")
    print(f"settings: {settings_line(args, models)}")
    print(result.table())
    for protocol, figures in published.items():
        if figures:
            print(f"published {protocol} accuracy (%): " + ", ".join(f"{k} {v}" for k, v in figures.items()))
    return 0


def settings_line(args: argparse.Namespace, models: dict[str, Callable]) -> str:
    """The compared ORLRs' settings, which are the paper's protocol and not ``fit``'s defaults."""
    parts = []
    if "ORLR-EM" in models:
        parts.append(
            f"ORLR-EM as published: {PAPER_EM_ITERATIONS} iterations, no prior, "
            f"{args.em_m_steps} M-step(s) a pass"
        )
    if "ORLR-NUTS" in models:
        parts.append(
            f"ORLR-NUTS {args.num_chains} chains x ({args.num_warmup} + {args.num_samples}) draws, "
            f"prior sd {args.prior_scale:g} (fit's default: {NUTS.num_chains} x ({NUTS.num_warmup} + "
            f"{NUTS.num_samples}))"
        )
    return "; ".join(parts) or "each method's defaults"


def _bag_labelled(args: argparse.Namespace) -> dict[str, Callable]:
    """The models a comparison of data without instance labels can fit and score: by the bag metrics
    of the held-out bags. Asked-for methods that train on instance labels, or an accuracy protocol,
    are errors; the default methods' reference models are left out with a warning line."""
    if args.protocol != "inductive":
        raise ValueError(
            f"--protocol {args.protocol} scores instance labels, and these data have none: leave it out "
            "to compare the methods by the bag metrics of the held-out bags"
        )
    chosen = chosen_methods(args.methods)
    trained = [m for m in chosen if m in TRAINED_ON_INSTANCE_LABELS]
    if trained and args.methods != ",".join(DEFAULT_METHODS):
        raise ValueError(
            f"--methods {','.join(trained)} train on instance labels, and these data have none: "
            "choose among the others"
        )
    if trained:
        print(
            f"warning: these data have no instance labels: comparing by the bag metrics of the held-out "
            f"bags, without {', '.join(trained)} (they train on instance labels)",
            file=sys.stderr,
        )
    return compared_models(args, [m for m in chosen if m not in TRAINED_ON_INSTANCE_LABELS])


def _dataset_name(args: argparse.Namespace) -> str:
    """The dataset's name as ``published_figures`` knows it (HJA by version), or the data path."""
    if args.dataset == "hja":
        return "hja-union" if args.version == "union" else "hja"
    return args.dataset or str(args.data)
