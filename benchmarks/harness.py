"""What the benchmarks and the reproductions share: data, timing, the machine, runs done in parts.

- Data: ``load_dataset`` (Letter Frost, HJA union, from ``../shared/data``) and synthetic bag
  collections shaped like them (``hja_shaped``, ``letter_shaped``, ``bags_from_shapes``).
- Timing: ``timed_fit`` (an estimator's fit, warnings silenced), ``time_interleaved`` (several
  functions timed in turn in every repeat, so machine noise hits them alike) and ``repeat``
  (a first call, which compiles, apart from the median of later ones).
- The machine: ``machine`` (one line for a run's header), ``cpu`` and ``environment`` (what a
  saved row depends on beyond its settings).
- Runs in parts: ``add_part_options`` gives a script ``--run-folds``, ``--save`` and
  ``--summarise``; ``run_in_parts`` fits the folds named, appends each fold's row to a JSON-lines
  file with the settings and the environment, or summarises a file saved over several sessions.
- ``paired_difference``: one line on per-fold differences (mean, sd, 95 % t interval, folds won).

Nothing here imports JAX or ``orlr_ppl`` at import time: the synthetic data are NumPy only.
Scripts run from the repository root as ``python -m benchmarks.<name>`` or
``python -m reproduction.<name>``.
"""

from __future__ import annotations

import argparse
import importlib.metadata
import json
import os
import platform
import re
import statistics
import subprocess
import time
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
SHARED = REPO.parent / "shared" / "data"
"""The data sets beside the checkout: ``letter-recognition.data``, ``hja/``, ``road_not_taken.txt``."""
POEM = SHARED / "road_not_taken.txt"

# -- data -------------------------------------------------------------------------


def load_dataset(name: str, shared: Path = SHARED):
    """Letter Frost (data seed 0), or HJA union's labelled segments (bags it cannot explain left out)."""
    if name == "letter-frost":
        from orlr_ppl.data.datasets import load_letter_frost

        return load_letter_frost(shared / "letter-recognition.data")
    if name == "hja-union":
        from orlr_ppl.data.hja import load_hja

        data, _ = load_hja(shared / "hja", "union", "labelled").drop_impossible()
        return data
    raise ValueError(f"dataset {name!r}: choose letter-frost or hja-union")


def standardised(train, *others) -> tuple:
    """``train`` and ``others`` (``MIMLData``) centred and scaled by ``train``'s instances.

    scikit-learn's ``StandardScaler`` (a constant feature keeps scale 1), as the estimators'
    default feature map does inside ``fit``; for scripts that fit or score mapped data themselves.
    """
    from dataclasses import replace

    from sklearn.preprocessing import StandardScaler

    scaler = StandardScaler().fit(np.concatenate(train.bags).astype(np.float64, copy=False))
    return tuple(
        replace(d, bags=[(x - scaler.mean_) / scaler.scale_ for x in d.bags]) for d in (train, *others)
    )


def without_dependent(train, test) -> tuple:
    """``(train, test)`` less the features ``linear_dependencies`` names on ``train``; and those names."""
    dropped = train.linear_dependencies().redundant
    return train.drop_features(dropped), test.drop_features(dropped), dropped


def bags_from_shapes(lengths, label_sets_of, n_classes, n_features, rng):
    """Synthetic bags whose instance labels cover each bag's label set exactly.

    Returns ``(features, label sets, instance labels)``: per bag an (n, d + 1) array (a bias
    column last), its label set and its instances' labels.
    """
    feats, sets, labels = [], [], []
    for n, labs in zip(lengths, label_sets_of):
        y = np.concatenate([labs, rng.choice(labs, n - len(labs))]) if n > len(labs) else np.array(labs)
        rng.shuffle(y)
        centres = np.linspace(-1, 1, n_classes)[y][:, None]
        x = rng.normal(size=(n, n_features)) + centres
        feats.append(np.hstack([x, np.ones((n, 1))]))  # + bias column
        sets.append(np.unique(y))
        labels.append(y)
    return feats, sets, labels


def hja_shaped(rng: np.random.Generator):
    """548 bags shaped like HJA birdsong (mean 9.1 instances, 2.1 labels a bag), 13 classes, 38 features.

    Returns ``(features, label sets, instance labels, n_classes)``.
    """
    n_bags, n_classes = 548, 13
    lengths = 1 + rng.poisson(8.1, n_bags)
    sizes = np.minimum(1 + rng.poisson(1.1, n_bags), np.minimum(lengths, n_classes))
    sets = [rng.choice(n_classes, k, replace=False) for k in sizes]
    return bags_from_shapes(lengths, sets, n_classes, 38, rng) + (n_classes,)


def letter_shaped(rng: np.random.Generator):
    """The words of Frost's "The Road Not Taken" as bags (one instance a letter), 26 classes, 16 features.

    Without the poem's text in ``../shared/data``, English-like word lengths stand in for it.
    Returns ``(features, label sets, instance labels, n_classes)``.
    """
    if POEM.is_file():
        words = re.findall(r"[a-z]+", POEM.read_text().lower().replace("'", "").replace("-", ""))
    else:  # the shapes only
        words = ["".join(rng.choice(list("etaoinshrdlu"), int(rng.integers(1, 11)))) for _ in range(144)]
    feats, sets, labels = [], [], []
    for w in words:
        y = np.array([ord(ch) - ord("a") for ch in w])
        feats.append(np.hstack([rng.normal(size=(len(y), 16)) + y[:, None] / 13.0, np.ones((len(y), 1))]))
        sets.append(np.unique(y))
        labels.append(y)
    return feats, sets, labels, 26


# -- timing -----------------------------------------------------------------------


def timed_fit(model, train, *args):
    """``(model fitted on train, seconds)``, its warnings silenced (the rows report what matters)."""
    t0 = time.perf_counter()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        model.fit(train, *args)
    return model, time.perf_counter() - t0


def time_interleaved(fns: list[Callable], arg, repeats: int) -> np.ndarray:
    """(repeats, len(fns)) seconds of jitted functions, timed in turn in every repeat.

    ``arg`` is one argument for all, or a list with one per function. Each function is called
    once first (its compile). Interleaving exposes every function to the same machine noise, so
    the ratios within one repeat are comparable even when absolute times drift.
    """
    import jax

    args = arg if isinstance(arg, list) else [arg] * len(fns)
    for f, a in zip(fns, args):
        jax.block_until_ready(f(a))
    times = np.empty((repeats, len(fns)))
    for r in range(repeats):
        for j, (f, a) in enumerate(zip(fns, args)):
            t0 = time.perf_counter()
            jax.block_until_ready(f(a))
            times[r, j] = time.perf_counter() - t0
    return times


def timed(fn: Callable[[], object]) -> tuple[float, object]:
    """``(seconds, result)`` of one call, waiting for JAX's asynchronous work to finish."""
    import jax

    t0 = time.perf_counter()
    out = jax.block_until_ready(fn())
    return time.perf_counter() - t0, out


def repeat(fn: Callable[[], object], repeats: int) -> tuple[float, float, object]:
    """``(first call's seconds, median of repeats more, the last result)``: the first call compiles."""
    first, out = timed(fn)
    rest = [timed(fn)[0] for _ in range(repeats)]
    return first, statistics.median(rest) if rest else float("nan"), out


# -- the machine ------------------------------------------------------------------


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


def machine() -> str:
    """One line for a run's header: the CPU and its cores, JAX's version, backend and devices."""
    import jax

    devices = jax.devices()
    return (
        f"machine: {cpu()} ({platform.machine()}), {os.cpu_count()} cores; python "
        f"{platform.python_version()}, jax {jax.__version__}, {len(devices)} {jax.default_backend()} "
        f"device(s) ({devices[0].device_kind})"
    )


def environment() -> dict[str, object]:
    """What a saved row depends on beyond its settings: the commit, library versions, JAX's devices
    and the CPU.

    Same-seed NUTS draws were bitwise equal from run to run, for one or two XLA threads, and across
    library commits; they change with the number of JAX devices (the chains' layout). Yet runs in
    other sessions, with the same code and library versions, gave other chains (REPRODUCTION.md).
    So each saved line records this.
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


def host_devices(n: int | None = None) -> None:
    """``n`` JAX devices on a CPU (``orlr_ppl.set_host_device_count``); call before JAX starts.

    NUTS runs its chains in parallel when there is a device per chain; ``bench_scale --devices``
    shards over them. None: one per core, at least 4 and at most 8, what the package set up on
    import when the saved rows ran (the chains' draws depend on the device count).
    """
    import orlr_ppl

    orlr_ppl.set_host_device_count(n)


# -- per-fold differences ---------------------------------------------------------


def paired_difference(diff: np.ndarray) -> str:
    """One line on per-fold differences ``diff`` (n_folds,), in points: their mean, sd, the 95 % t
    interval of the mean (folds share training bags, so the interval is optimistic; it still says
    whether the sign is settled) and how many folds each side wins. One fold has neither sd nor
    interval."""
    from scipy import stats

    mean, spread = diff.mean(), ""
    if len(diff) > 1:
        sd = diff.std(ddof=1)
        half = stats.t.ppf(0.975, len(diff) - 1) * sd / np.sqrt(len(diff))
        spread = f" (sd {sd:.1f}; 95 % t interval of the mean [{mean - half:+.1f}, {mean + half:+.1f}])"
    return (
        f"{mean:+.1f} points{spread}, ahead in {int((diff > 0).sum())}, "
        f"behind in {int((diff < 0).sum())}, level in {int((diff == 0).sum())} of {len(diff)} folds"
    )


# -- runs in parts: --run-folds, --save, --summarise ----------------------------------

Saved = dict[int, tuple[dict, dict | None]]
"""fold -> (row, environment), as ``saved_lines`` reads them (environment None where not recorded)."""


def add_part_options(p: argparse.ArgumentParser) -> None:
    """``--run-folds``, ``--save`` and ``--summarise``: a run too long for one sitting, done in parts."""
    p.add_argument("--run-folds", default=None, help="comma list of the folds to fit (default: all)")
    p.add_argument("--save", type=Path, default=None, help="append each fold's row here (JSON lines)")
    p.add_argument(
        "--summarise",
        action="store_true",
        help="fit nothing: summarise the folds in --save (all, or those of --run-folds: a partial summary)",
    )


def as_saved(settings: dict) -> dict:
    """``settings`` as a saved line reads back: tuples become JSON lists, so the two compare equal."""
    return json.loads(json.dumps(settings))


def saved_lines(path: Path, settings: dict) -> Saved:
    """Each fold saved in ``path`` (JSON lines) for ``settings``: its row and ``environment()`` (None
    where a line predates it); refuses lines saved with other settings and folds saved twice."""
    lines: Saved = {}
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


def saved_rows(path: Path, settings: dict, folds: list[int]) -> tuple[list[dict], list[dict | None]]:
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


def shown(value: Any) -> str:
    """A row's value as printed: numbers to 4 significant digits, names as they are, None as "-"; lists
    and dicts of them item by item."""
    if value is None:
        return "-"
    if isinstance(value, dict):
        return "{" + ", ".join(f"{k}: {shown(v)}" for k, v in value.items()) + "}"
    if isinstance(value, list):
        return "[" + ", ".join(shown(v) for v in value) + "]"
    return value if isinstance(value, str) else f"{value:.4g}"


def run_folds(args: argparse.Namespace) -> list[int]:
    """The folds ``--run-folds`` names (a comma list), or every one of ``--folds``, in order."""
    if args.run_folds is None:
        return list(range(args.folds))
    return sorted({int(f) for f in args.run_folds.split(",")})


def run_in_parts(
    args: argparse.Namespace,
    settings: dict,
    fit_fold: Callable[[Any, Any, int], dict[str, Any]],
    summarise: Callable[[list[dict[str, Any]], list[int]], None],
) -> None:
    """Fit ``args.run_folds`` of ``args.dataset``'s folds (seed 0), each row printed and saved; or summarise.

    With ``--summarise``, nothing is fitted: ``summarise`` gets the rows saved in ``--save`` under
    these ``settings``, which must hold every fold once (or each of ``--run-folds`` once: a partial
    summary), and the fold numbers of those rows. Otherwise ``fit_fold(train, test, fold)``
    gives each fold's row, appended to ``--save`` with the settings and ``environment()``, and the
    folds of this run are summarised when there are several. Each fold is seeded by its number,
    so a part gives what the whole run would, in the same environment.
    """
    settings = as_saved(settings)
    folds = run_folds(args)
    if args.summarise:
        if args.save is None:
            raise SystemExit("--summarise reads the rows of --save FILE")
        rows, envs = saved_rows(args.save, settings, folds)
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
        print(f"fold {fold}: " + " ".join(f"{k}={shown(v)}" for k, v in rows[-1].items()), flush=True)
        if args.save is not None:
            with args.save.open("a") as out:
                line = {"settings": settings, "fold": fold, "row": rows[-1], "env": env}
                out.write(json.dumps(line) + "\n")
    if len(rows) > 1:
        summarise(rows, fitted)
