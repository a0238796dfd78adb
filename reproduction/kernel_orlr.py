"""Kernel ORLR, K-SLR and MIMM against the linear models (JMLR Table 8): 10-fold accuracy and fit time.

    python -m reproduction.kernel_orlr [--dataset letter-frost|hja-union] [--folds 10]
        [--prior normal|l21] [--dictionary-size N] [--max-iter 200] [--kslr-max-iter 1000]
        [--methods korlr,kslr,mimm] [--gamma-factors 0.25,1,4,16] [--prior-scales 0.1,0.3,1,3,10]
        [--cv-scoring log_likelihood|ranking_loss|average_precision] [--mimm-covariance full|diag]
        [--run-folds 0,1,2] [--save rows.jsonl] [--summarise]
    python -m reproduction.kernel_orlr --methods paper [--dataset ...] [--delta-scales 0.1,0.2,0.5,1,2,5,10]

Same bag-level folds (seed 0) as ``orlr-ppl evaluate``. Features standardised on each training fold
(ORLR's default). K-ORLR (``korlr``): ``ORLRCV(features=rbf_map(N, fold),
inference=EM(max_iter=...))`` (``StandardScaler`` then ``RBFDictionary(n_components=N)``), the RBF
width (``--gamma-factors`` times the median heuristic of the fold's standardised training instances)
and the prior's scale (``--prior-scales``) chosen inside each fit by 3-fold bag-level cross-
validation of the held-out bag log-likelihood (no instance label; ``--cv-scoring`` picks another
held-out bag score, and each row records, as ``choice_<score>``, what every score would have
chosen); linear ORLR: ``ORLR()`` defaults (EM, Normal(0, 1) prior). Prints per fold the accuracies,
the chosen width (as a multiple of the median heuristic) and scale, the kernel rows kept, whether
the final fit met its tolerance (1) or stopped at ``max_iter`` (0; the fits' warnings are silenced),
and the fit seconds; then the means, sds, the count of unconverged final fits and the median fit-
time ratio kernel/linear (the selection included, and without it: the final fit alone).

K-SLR (``kslr``), the upper bound: ``SoftmaxRegression(features=<the same map>, gammas="auto",
prior_scale="auto")`` on the instance labels, both chosen by 3-fold CV over the training bags'
instances, beside linear softmax regression (the time reference). MIMM (``mimm``): the multi-
instance mixture model, ``MIMM(covariance=...)`` with its defaults.

The paper's own protocol (``paper``, JMLR §6.5): the kernel ``exp(-||x - x'||^2 / delta)`` with
``delta = s * (the mean squared distance between two training instances)``, each s of
``--delta-scales``, every training instance in the dictionary, and as the paper's MLR and SLR no
weight prior: K-ORLR by the paper's generalised EM (one gradient step an M-step, ``EM(m_steps=1)``)
for ``--max-iter`` iterations (the paper: 500), K-SLR by L-BFGS (``--kslr-max-iter``) with a
Normal(0, 100) prior, all but flat (``SoftmaxRegression`` needs one). The mean squared distance is
of the fold's standardised training instances (the paper: of the dataset's). Each s is
scored on the test bags; the summary reports every s and the best, which is **chosen on test
accuracy**, as the paper reports "the highest accuracy" over delta.

``--run-folds`` fits only those folds, and ``--save`` appends each fold's row to a JSON-lines file,
so that a run too long for one sitting is done in parts; ``--summarise`` then prints the summary
from that file (``benchmarks.harness.run_in_parts``). The rows behind REPRODUCTION.md are in
``reproduction/results/``."""

from __future__ import annotations

import argparse
from typing import Any

import numpy as np

from benchmarks.harness import add_part_options, run_in_parts, standardised, timed_fit
from orlr_ppl.estimators import model_selection

DEFAULT_GAMMA_FACTORS = (0.25, 1.0, 4.0, 16.0)
"""The width candidates, as multiples of the median heuristic, unless ``--gamma-factors`` says."""
DEFAULT_PRIOR_SCALES = (0.1, 0.3, 1.0, 3.0, 10.0)
"""The prior scale's candidates, strongest prior first, unless ``--prior-scales`` says (the grid of
the saved rows, which record it)."""


def median_heuristic(train, seed: int) -> float:
    """The median heuristic's RBF width on ``train``'s standardised instances, seeded as ORLR seeds it."""
    from orlr_ppl.features import median_gamma

    return median_gamma(np.concatenate(standardised(train)[0].bags), seed)


def rbf_map(size: int | None, seed: int, gamma: float | None = None) -> Any:
    """Kernel ORLR's feature map: standardised features, then RBF similarities to ``size`` of them."""
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import StandardScaler

    from orlr_ppl import RBFDictionary

    return make_pipeline(StandardScaler(), RBFDictionary(gamma=gamma, n_components=size, random_state=seed))


def _korlr(train, test, args: argparse.Namespace, fold: int) -> dict[str, Any]:
    """Linear ORLR and K-ORLR on one fold: accuracies, choices and fit seconds."""
    from orlr_ppl import EM, ORLR, ORLRCV

    linear, t_lin = timed_fit(ORLR(), train)
    base = median_heuristic(train, fold)
    em = EM(max_iter=args.max_iter)
    kernel = ORLRCV(
        features=rbf_map(args.dictionary_size, fold),
        prior=args.prior,
        inference=em,
        prior_scales=args.prior_scales,
        gammas=[base * f for f in args.gamma_factors],
        scoring=args.cv_scoring,
        random_state=fold,
        progress_bar=False,
    )
    kernel, t_kern = timed_fit(kernel, train)
    # The final fit alone: the same model at the width and scale the selection chose.
    chosen = rbf_map(args.dictionary_size, fold, gamma=kernel.kernel_gamma_)
    final = ORLR(
        features=chosen, prior=args.prior, prior_scale=kernel.prior_scale_, inference=em, random_state=fold
    )
    t_final = timed_fit(final, train)[1]
    choices = {}  # what each held-out score would have chosen: (gamma x median, scale)
    for name in model_selection.CV_SCORINGS if hasattr(kernel, "cv_results_") else ():  # a grid of one
        best = kernel.cv_results_[model_selection.best_index(kernel.cv_results_, name)]
        choices[f"choice_{name}"] = [best["gamma"] / base, best["prior_scale"]]
    return {
        "linear": linear.score(test),
        "kernel": kernel.score(test),
        "gamma_x_median": kernel.kernel_gamma_ / base,
        "scale": kernel.prior_scale_,
        "rows": kernel.coef_.shape[0],
        "kernel_converged": float(kernel.converged_),
        "t_linear": t_lin,
        "t_kernel": t_kern,
        "t_kernel_final": t_final,
        **choices,
    }


def _kslr(train, test, args: argparse.Namespace, fold: int) -> dict[str, Any]:
    """Linear softmax regression and K-SLR on one fold's instance labels: accuracies, choices, seconds."""
    from orlr_ppl import SoftmaxRegression

    softmax, t_soft = timed_fit(SoftmaxRegression(), train)
    kslr = SoftmaxRegression(
        features=rbf_map(args.dictionary_size, fold),
        gammas="auto",
        prior_scale="auto",
        max_iter=args.kslr_max_iter,
        random_state=fold,
    )
    kslr, t_kslr = timed_fit(kslr, train)
    chosen = {
        "features": rbf_map(args.dictionary_size, fold, gamma=kslr.kernel_gamma_),
        "gammas": None,
        "prior_scale": kslr.prior_scale_,
    }
    t_final = timed_fit(SoftmaxRegression(**{**kslr.get_params(deep=False), **chosen}), train)[1]
    base = min(r["gamma"] for r in kslr.cv_results_) / min(model_selection.GAMMA_FACTORS)
    return {
        "softmax": softmax.score(test),
        "kslr": kslr.score(test),
        "kslr_gamma_x_median": kslr.kernel_gamma_ / base,
        "kslr_scale": kslr.prior_scale_,
        "kslr_converged": float(kslr.converged_),
        "t_softmax": t_soft,
        "t_kslr": t_kslr,
        "t_kslr_final": t_final,
    }


DELTA_SCALES = (0.1, 0.2, 0.5, 1.0, 2.0, 5.0, 10.0)
"""The paper's s in ``delta = s * mean squared distance`` (JMLR §6.5)."""
FLAT_SCALE = 100.0
"""K-SLR's prior sd in the paper's protocol: ``SoftmaxRegression`` needs one; at 100 it is all but flat."""


def mean_squared_distance(x: np.ndarray) -> float:
    """The mean of ``||x_i - x_j||^2`` over the pairs ``i != j`` of the rows of ``x`` (n, d)."""
    n = len(x)
    return float(2 * n / (n - 1) * x.var(axis=0).sum())


def _paper(train, test, args: argparse.Namespace, fold: int) -> dict[str, Any]:
    """K-ORLR and K-SLR at each delta of the paper's grid, no prior, scored on the test bags."""
    from orlr_ppl import EM, ORLR, SoftmaxRegression

    d2 = mean_squared_distance(np.concatenate(standardised(train)[0].bags))
    row: dict[str, Any] = {"mean_squared_distance": d2}
    for s in args.delta_scales:
        features = rbf_map(None, fold, gamma=1.0 / (s * d2))
        em = EM(max_iter=args.max_iter, m_steps=1)
        korlr, seconds = timed_fit(ORLR(features=features, prior_scale=None, inference=em), train)
        row[f"korlr_s{s:g}"], row[f"t_korlr_s{s:g}"] = korlr.score(test), seconds
        kslr = SoftmaxRegression(features=features, prior_scale=FLAT_SCALE, max_iter=args.kslr_max_iter)
        kslr, seconds = timed_fit(kslr, train)
        row[f"kslr_s{s:g}"], row[f"t_kslr_s{s:g}"] = kslr.score(test), seconds
    return row


def _summarise_paper(rows: list[dict[str, Any]], scales: tuple[float, ...]) -> None:
    """Every s's mean accuracy over the folds, and the best s, chosen on test accuracy."""
    for model in ("korlr", "kslr"):
        means = {s: np.array([r[f"{model}_s{s:g}"] for r in rows]) for s in scales}
        print(f"{model}: " + ", ".join(f"s={s:g} {100 * v.mean():.1f}" for s, v in means.items()))
        best = max(scales, key=lambda s: means[s].mean())
        acc = means[best]
        print(
            f"{model}, delta chosen on test accuracy (paper's protocol): s={best:g}, "
            f"{100 * acc.mean():.1f} ± {100 * acc.std(ddof=1):.1f} over {len(rows)} folds; "
            f"median fit {np.median([r[f't_{model}_s{best:g}'] for r in rows]):.1f} s"
        )


def _mimm(train, test, args: argparse.Namespace, fold: int) -> dict[str, Any]:
    """MIMM on one fold: inductive instance accuracy, convergence and fit seconds."""
    from orlr_ppl import MIMM
    from orlr_ppl.evaluation.metrics import instance_accuracy

    model, seconds = timed_fit(MIMM(covariance=args.mimm_covariance), train)
    return {
        "mimm": instance_accuracy(test.instance_labels, model.predict(test.bags)),
        "mimm_converged": float(model.converged_),
        "t_mimm": seconds,
    }


def _summarise(rows: list[dict[str, Any]], folds: list[int]) -> None:
    """Means and sds of the accuracies over ``folds`` (one row each), and the median fit-time ratios."""
    print(f"folds {folds}")
    for key in ("linear", "kernel", "softmax", "kslr", "mimm"):
        if key in rows[0]:
            acc = np.array([r[key] for r in rows])
            print(f"{key}: {100 * acc.mean():.1f} ± {100 * acc.std(ddof=1):.1f} over {len(rows)} folds")
    for key in ("kernel_converged", "kslr_converged"):
        if key in rows[0]:  # rows saved before this field have no record of it
            stopped = sum(not r[key] for r in rows)
            print(
                f"{key.split('_')[0]}: {stopped} of {len(rows)} final fits stopped at max_iter, unconverged"
            )
    for name, slow, fast in (
        ("kernel/linear ORLR", "t_kernel", "t_linear"),
        ("K-SLR/softmax", "t_kslr", "t_softmax"),
    ):
        if slow in rows[0]:
            ratio = np.median([r[slow] / r[fast] for r in rows])
            final = np.median([r[slow + "_final"] / r[fast] for r in rows])
            print(
                f"median fit-time ratio {name}: {ratio:.1f} with the selection, {final:.1f} final fit alone"
            )
    if "t_mimm" in rows[0]:
        print(f"median MIMM fit: {np.median([r['t_mimm'] for r in rows]):.2f} s")


def _grid(given: str | None, default: tuple[float, ...]) -> tuple[float, ...]:
    return tuple(float(v) for v in given.split(",")) if given else tuple(default)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--dataset", choices=["letter-frost", "hja-union"], default="letter-frost")
    p.add_argument("--folds", type=int, default=10)
    p.add_argument("--prior", choices=["normal", "l21"], default="normal")
    p.add_argument("--dictionary-size", type=int, default=None, help="default: every training instance")
    p.add_argument("--max-iter", type=int, default=200, help="K-ORLR's EM iterations")
    p.add_argument("--kslr-max-iter", type=int, default=1000, help="K-SLR's L-BFGS-B iterations at most")
    p.add_argument(
        "--methods", default="korlr,kslr", help="comma list of korlr, kslr, mimm; or paper (alone)"
    )
    p.add_argument(
        "--delta-scales", default=None, help="paper: comma list of s (default 0.1,0.2,0.5,1,2,5,10)"
    )
    p.add_argument("--gamma-factors", default=None, help="comma list (default 0.25,1,4,16)")
    p.add_argument("--prior-scales", default=None, help="comma list (default 0.1,0.3,1,3,10)")
    p.add_argument(
        "--cv-scoring",
        choices=list(model_selection.CV_SCORINGS),
        default="log_likelihood",
        help="K-ORLR: the held-out bag score that decides its selection",
    )
    p.add_argument("--mimm-covariance", choices=["full", "diag"], default="full", help="MIMM's covariance")
    add_part_options(p)
    args = p.parse_args()
    args.gamma_factors = _grid(args.gamma_factors, DEFAULT_GAMMA_FACTORS)
    args.prior_scales = _grid(args.prior_scales, DEFAULT_PRIOR_SCALES)
    # K-SLR's "auto" reads the module's grids: the same candidates for both estimators.
    model_selection.GAMMA_FACTORS, model_selection.PRIOR_SCALES = args.gamma_factors, args.prior_scales
    print(f"gamma factors {args.gamma_factors}, prior scales {args.prior_scales}", flush=True)
    settings = {
        k: getattr(args, k)
        for k in ("dataset", "folds", "prior", "dictionary_size", "max_iter", "kslr_max_iter", "methods")
    }
    settings.update(gamma_factors=args.gamma_factors, prior_scales=args.prior_scales)
    if args.cv_scoring != "log_likelihood":  # rows saved before the option carry no such key
        settings["cv_scoring"] = args.cv_scoring
    methods = set(args.methods.split(","))
    if "mimm" in methods:
        settings["mimm_covariance"] = args.mimm_covariance
    if "paper" in methods:
        if methods != {"paper"}:
            raise SystemExit("--methods paper runs alone: the paper's protocol, not a selection")
        args.delta_scales = _grid(args.delta_scales, DELTA_SCALES)
        settings = {k: settings[k] for k in ("dataset", "folds", "max_iter", "kslr_max_iter", "methods")}
        settings["delta_scales"] = args.delta_scales
        run_in_parts(
            args,
            settings,
            lambda train, test, fold: _paper(train, test, args, fold),
            lambda rows, folds: _summarise_paper(rows, args.delta_scales),
        )
        return

    def fit_fold(train, test, fold: int) -> dict[str, Any]:
        row: dict[str, Any] = {}
        if "korlr" in methods:
            row.update(_korlr(train, test, args, fold))
        if "kslr" in methods:
            row.update(_kslr(train, test, args, fold))
        if "mimm" in methods:
            row.update(_mimm(train, test, args, fold))
        return row

    run_in_parts(args, settings, fit_fold, _summarise)


if __name__ == "__main__":
    main()
