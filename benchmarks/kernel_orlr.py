"""Kernel ORLR (issue 13) against linear ORLR: 10-fold inductive accuracy and fit time, one run.

    python benchmarks/kernel_orlr.py [--dataset letter-frost|hja-union] [--folds 10] [--prior normal|l21]
        [--dictionary-size N] [--max-iter 200] [--kslr-max-iter 1000] [--methods korlr,kslr]
        [--gamma-factors 0.25,1,4,16] [--prior-scales 0.1,0.3,1,3,10]
        [--cv-scoring log_likelihood|ranking_loss|average_precision]
        [--run-folds 0,1,2] [--save rows.jsonl] [--summarise]

Same bag-level folds (seed 0) as ``orlr-ppl evaluate``. Features standardised on each training
fold (ORLR's default). K-ORLR: ``ORLR(kernel="rbf", gamma="auto", prior_scale="auto")``, both
chosen inside each fit by 3-fold bag-level cross-validation of the held-out bag log-likelihood
(no instance label; ``--cv-scoring`` picks another held-out bag score, and each row records, as
``choice_<score>``, what every score would have chosen); linear ORLR: ``ORLR()`` defaults (EM,
Normal(0, 1) prior). Prints per fold the accuracies, the chosen gamma (as a multiple of the
median heuristic) and scale, the kernel rows kept, whether the final fit met its tolerance (1)
or stopped at ``max_iter`` (0; the fits' warnings are silenced), and the fit seconds; then the
means, sds, the count of unconverged final fits and the median fit-time ratio kernel/linear (the
selection included, and without it: the final fit alone).

K-SLR (``--methods kslr``), the upper bound: ``SoftmaxRegression(kernel="rbf", gamma="auto",
prior_scale="auto")`` on the instance labels, both chosen by 3-fold CV over the training bags'
instances, beside linear softmax regression (scikit-learn's lbfgs, the time reference).

``--gamma-factors`` and ``--prior-scales`` replace the "auto" grids (``GAMMA_FACTORS`` and
``PRIOR_SCALES`` of ``model_selection``, the defaults) for this run: a smaller grid where 60 fits
per fold cost too much. ``--run-folds`` fits only those folds, and ``--save`` appends each fold's
row to a JSON-lines file, so that a run too long for one sitting is done in parts (each fold is
seeded by its number: a part gives what the whole run would, in the same environment);
``--summarise`` then prints the summary from that file, refusing a missing fold (with
``--run-folds``: of those folds, a partial summary). Each saved line also records ``environment()``
(commit, library versions, JAX backend and device count), and the summary names the folds of each
environment when the rows were saved under more than one.
"""

from __future__ import annotations

import argparse
import importlib.metadata
import json
import platform
import subprocess
import time
import warnings
from collections.abc import Callable
from pathlib import Path

import numpy as np
from scipy import stats

from orlr_ppl import ORLR, MIMLData, SoftmaxRegression
from orlr_ppl.data.datasets import load_letter_frost
from orlr_ppl.data.hja import load_hja
from orlr_ppl.estimators import model_selection

HERE = Path(__file__).resolve().parent
SHARED = HERE.parent.parent / "shared" / "data"


def load_dataset(name: str):
    """Letter Frost, or HJA union (labelled segments; bags it cannot explain left out), from ../shared."""
    if name == "letter-frost":
        return load_letter_frost(SHARED / "letter-recognition.data")
    data, _ = load_hja(SHARED / "hja", "union", "labelled").drop_impossible()
    return data


def timed_fit(model, train):
    """``(model fitted on train, seconds)``, its warnings silenced (the rows report what matters)."""
    t0 = time.perf_counter()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        model.fit(train)
    return model, time.perf_counter() - t0


def without_dependent(train, test) -> tuple:
    """``(train, test)`` less the features ``linear_dependencies`` names on ``train``; and those names."""
    dropped = train.linear_dependencies().redundant
    return train.drop_features(dropped), test.drop_features(dropped), dropped


def _refit_seconds(model, train) -> float:
    """Seconds of the final fit alone: the same model at the gamma and scale its selection chose."""
    chosen = {"gamma": model.kernel_gamma_, "prior_scale": model.prior_scale_}
    return timed_fit(type(model)(**{**model.get_params(), **chosen}), train)[1]


def _korlr(train, test, args, fold: int) -> dict[str, float]:
    """Linear ORLR and K-ORLR on one fold: accuracies, choices and fit seconds."""
    linear, t_lin = timed_fit(ORLR(), train)
    kernel = ORLR(
        kernel="rbf",
        gamma="auto",
        prior_scale="auto",
        prior=args.prior,
        dictionary_size=args.dictionary_size,
        max_iter=args.max_iter,
        random_state=fold,
        cv_scoring=args.cv_scoring,
    )
    kernel, t_kern = timed_fit(kernel, train)
    t_final = _refit_seconds(kernel, train)
    base = min(r["gamma"] for r in kernel.cv_results_) / min(model_selection.GAMMA_FACTORS)  # the median's
    choices = {}  # what each held-out score would have chosen: (gamma x median, scale)
    for name in model_selection.CV_SCORINGS:
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


def _kslr(train, test, args, fold: int) -> dict[str, float]:
    """Linear softmax regression and K-SLR on one fold's instance labels: accuracies, choices, seconds."""
    softmax, t_soft = timed_fit(SoftmaxRegression(), train)
    kslr = SoftmaxRegression(
        kernel="rbf",
        gamma="auto",
        prior_scale="auto",
        dictionary_size=args.dictionary_size,
        max_iter=args.kslr_max_iter,
        random_state=fold,
    )
    kslr, t_kslr = timed_fit(kslr, train)
    t_final = _refit_seconds(kslr, train)
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


def _set_grids(gamma_factors: str | None, prior_scales: str | None) -> None:
    """Replace ``model_selection``'s "auto" grids, which both estimators read, in this process."""
    for name, given in (("GAMMA_FACTORS", gamma_factors), ("PRIOR_SCALES", prior_scales)):
        values = tuple(float(v) for v in given.split(",")) if given else getattr(model_selection, name)
        setattr(model_selection, name, values)
        print(f"{name} = {values}", flush=True)


def paired_difference(diff: np.ndarray) -> str:
    """One line on per-fold differences ``diff`` (n_folds,), in points: their mean, sd, the 95 % t
    interval of the mean (folds share training bags, so the interval is optimistic; it still says
    whether the sign is settled) and how many folds each side wins. One fold has neither sd nor
    interval."""
    mean, spread = diff.mean(), ""
    if len(diff) > 1:
        sd = diff.std(ddof=1)
        half = stats.t.ppf(0.975, len(diff) - 1) * sd / np.sqrt(len(diff))
        spread = f" (sd {sd:.1f}; 95 % t interval of the mean [{mean - half:+.1f}, {mean + half:+.1f}])"
    return (
        f"{mean:+.1f} points{spread}, ahead in {int((diff > 0).sum())}, "
        f"behind in {int((diff < 0).sum())}, level in {int((diff == 0).sum())} of {len(diff)} folds"
    )


def _summarise(rows: list[dict[str, float]], folds: list[int]) -> None:
    """Means and sds of the accuracies over ``folds`` (one row each), and the median fit-time ratios."""
    print(f"folds {folds}")
    for key in ("linear", "kernel", "softmax", "kslr"):
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


def cpu() -> str:
    """The processor, as ``/proc/cpuinfo`` names it: model name, family, model, and ``avx512`` when
    it has AVX-512 (XLA compiles for the host, so another CPU may round otherwise; capping XLA at
    AVX2 on one machine left the draws as they were, REPRODUCTION.md).
    ``platform.processor()`` where there is no ``/proc/cpuinfo``."""
    try:
        return cpu_from_cpuinfo(Path("/proc/cpuinfo").read_text())
    except OSError:
        return platform.processor() or platform.machine()


def cpu_from_cpuinfo(text: str) -> str:
    """``cpu()`` from the text of ``/proc/cpuinfo``: its first processor's block."""
    fields: dict[str, str] = {}
    for line in text.splitlines():
        if not line.strip():
            break  # the first processor's block: the others repeat it
        key, _, value = line.partition(":")
        fields[key.strip()] = value.strip()
    parts = [fields.get("model name", platform.machine())]
    parts += [f"{k} {fields[k]}" for k in ("cpu family", "model") if k in fields]
    parts += ["avx512"] if "avx512f" in fields.get("flags", "").split() else []
    return ", ".join(parts)


def environment() -> dict[str, object]:
    """What a saved row depends on beyond its settings: the commit, library versions, JAX's devices
    and the CPU.

    Same-seed NUTS draws were bitwise equal from run to run, for one or two XLA threads, and at
    the library code of 2026-11-25 and of 2026-11-26; they change with the number of JAX devices
    (the chains' layout). Yet runs in other sessions, with the same code and library versions,
    gave other chains (REPRODUCTION.md, "Why the reruns' chains differ", and horseshoe fold 3 at
    0.8). What is left is the machine, whose CPU was not recorded. So each saved line records
    this.
    """
    import jax

    def git(*words: str) -> str:
        return subprocess.run(["git", *words], cwd=HERE, capture_output=True, text=True, check=True).stdout

    try:
        commit = git("rev-parse", "--short", "HEAD").strip()
        if git("status", "--porcelain", "--untracked-files=no").strip():
            commit += "+changes"  # tracked files edited since that commit: the commit alone does not say
    except (OSError, subprocess.CalledProcessError):
        commit = None  # not a git checkout
    libraries = ("jax", "jaxlib", "numpyro", "numpy", "scipy")
    versions = {name: importlib.metadata.version(name) for name in libraries}
    return {
        "commit": commit,
        "python": platform.python_version(),
        **versions,
        "backend": jax.default_backend(),
        "devices": jax.device_count(),
        "cpu": cpu(),
    }


def saved_lines(path: Path, settings: dict) -> dict[int, tuple[dict, dict | None]]:
    """Each fold saved in ``path`` (JSON lines) for ``settings``: its row and ``environment()`` (None
    where a line predates it); refuses lines saved with other settings and folds saved twice."""
    lines: dict[int, tuple[dict, dict | None]] = {}
    for number, line in enumerate(path.read_text().splitlines(), 1):
        record = json.loads(line)
        if record["settings"] != settings:
            raise SystemExit(
                f"{path}:{number}: saved with other settings {record['settings']}, not {settings}"
            )
        if record["fold"] in lines:
            raise SystemExit(f"{path}:{number}: fold {record['fold']} saved twice; keep one line per fold")
        lines[record["fold"]] = (record["row"], record.get("env"))
    return lines


def _saved_rows(path: Path, settings: dict, folds: list[int]) -> tuple[list[dict], list[dict | None]]:
    """The rows of ``folds`` saved in ``path`` for ``settings`` (``saved_lines``), and each row's
    environment: refuses missing folds too."""
    lines = saved_lines(path, settings)
    missing = sorted(set(folds) - set(lines))
    if missing:
        raise SystemExit(f"{path}: folds {missing} not saved yet; run them with --run-folds")
    return [lines[f][0] for f in folds], [lines[f][1] for f in folds]


def environments_note(envs: list[dict | None], folds: list[int]) -> str | None:
    """A line naming the folds saved under each environment, when they were not all saved under one
    recorded environment (rows from other environments may differ by more than chance)."""
    groups: dict[str, list[int]] = {}
    for fold, env in zip(folds, envs, strict=True):
        label = "not recorded" if env is None else " ".join(f"{k}={v}" for k, v in env.items())
        groups.setdefault(label, []).append(fold)
    if len(groups) == 1 and None not in envs:
        return None
    return "note: the rows' environments differ or are unknown; " + "; ".join(
        f"folds {fs}: {label}" for label, fs in groups.items()
    )


def add_part_options(p: argparse.ArgumentParser) -> None:
    """``--run-folds``, ``--save`` and ``--summarise``: a run too long for one sitting, done in parts."""
    p.add_argument("--run-folds", default=None, help="comma list of the folds to fit (default: all)")
    p.add_argument("--save", type=Path, default=None, help="append each fold's row here (JSON lines)")
    p.add_argument(
        "--summarise",
        action="store_true",
        help="fit nothing: summarise the folds in --save (all, or those of --run-folds: a partial summary)",
    )


def _shown(value) -> str:
    """A row's value as printed: numbers to 4 significant digits, names as they are, None as "-"."""
    if value is None:
        return "-"
    if isinstance(value, list):
        return "[" + ", ".join(_shown(v) for v in value) + "]"
    return value if isinstance(value, str) else f"{value:.4g}"


def as_saved(settings: dict) -> dict:
    """``settings`` as a saved line reads back: tuples become JSON lists, so the two compare equal."""
    return json.loads(json.dumps(settings))


def run_folds(args: argparse.Namespace) -> list[int]:
    """The folds ``--run-folds`` names (a comma list), or every one of ``--folds``, in order."""
    if args.run_folds is None:
        return list(range(args.folds))
    return sorted({int(f) for f in args.run_folds.split(",")})


def run_in_parts(
    args: argparse.Namespace,
    settings: dict,
    fit_fold: Callable[[MIMLData, MIMLData, int], dict[str, float]],
    summarise: Callable[[list[dict[str, float]], list[int]], None],
) -> None:
    """Fit ``args.run_folds`` of ``args.dataset``'s folds (seed 0), each row printed and saved; or summarise.

    With ``--summarise``, nothing is fitted: ``summarise`` gets the rows saved in ``--save`` under
    these ``settings``, which must hold every fold once (or each of ``--run-folds`` once: a partial
    summary), and the fold numbers of those rows. Otherwise ``fit_fold(train, test, fold)``
    gives each fold's row, appended to ``--save`` with the settings, and the folds of this run are
    summarised when there are several.
    """
    settings = as_saved(settings)
    folds = run_folds(args)
    if args.summarise:
        if args.save is None:
            raise SystemExit("--summarise reads the rows of --save FILE")
        rows, envs = _saved_rows(args.save, settings, folds)
        summarise(rows, folds)
        note = environments_note(envs, folds)
        if note is not None:
            print(note)
        return
    data = load_dataset(args.dataset)
    print(f"{args.dataset}: {data!r}", flush=True)
    rows, fitted, env = [], [], environment()
    for fold, (train, test) in enumerate(data.kfold(args.folds, seed=0)):
        if fold not in folds:
            continue
        rows.append(fit_fold(train, test, fold))
        fitted.append(fold)
        print(f"fold {fold}: " + " ".join(f"{k}={_shown(v)}" for k, v in rows[-1].items()), flush=True)
        if args.save is not None:
            with args.save.open("a") as out:
                line = {"settings": settings, "fold": fold, "row": rows[-1], "env": env}
                out.write(json.dumps(line) + "\n")
    if len(rows) > 1:
        summarise(rows, fitted)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--dataset", choices=["letter-frost", "hja-union"], default="letter-frost")
    p.add_argument("--folds", type=int, default=10)
    p.add_argument("--prior", choices=["normal", "l21"], default="normal")
    p.add_argument("--dictionary-size", type=int, default=None)
    p.add_argument("--max-iter", type=int, default=200, help="K-ORLR's EM iterations")
    p.add_argument("--kslr-max-iter", type=int, default=1000, help="K-SLR's L-BFGS-B iterations at most")
    p.add_argument("--methods", default="korlr,kslr", help="comma list of korlr, kslr")
    p.add_argument("--gamma-factors", default=None, help="comma list; default: GAMMA_FACTORS")
    p.add_argument("--prior-scales", default=None, help="comma list; default: PRIOR_SCALES")
    p.add_argument(
        "--cv-scoring",
        choices=list(model_selection.CV_SCORINGS),
        default="log_likelihood",
        help="K-ORLR: the held-out bag score that decides its selection",
    )
    add_part_options(p)
    args = p.parse_args()
    _set_grids(args.gamma_factors, args.prior_scales)
    settings = {
        k: getattr(args, k)
        for k in ("dataset", "folds", "prior", "dictionary_size", "max_iter", "kslr_max_iter", "methods")
    }
    settings.update(gamma_factors=model_selection.GAMMA_FACTORS, prior_scales=model_selection.PRIOR_SCALES)
    if args.cv_scoring != "log_likelihood":  # rows saved before the option carry no such key
        settings["cv_scoring"] = args.cv_scoring
    methods = set(args.methods.split(","))

    def fit_fold(train: MIMLData, test: MIMLData, fold: int) -> dict[str, float]:
        row = {}
        if "korlr" in methods:
            row.update(_korlr(train, test, args, fold))
        if "kslr" in methods:
            row.update(_kslr(train, test, args, fold))
        return row

    run_in_parts(args, settings, fit_fold, _summarise)


if __name__ == "__main__":
    main()
