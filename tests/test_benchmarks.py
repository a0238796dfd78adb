"""The benchmarks' shared harness (``benchmarks.harness``): runs in parts, their saved lines and
environment, ``--summarise`` over parts saved at different times; and the pieces of
``reproduction.shrinkage_vs_l21`` its recorded result rests on (the quantile map, the rerun rule,
the goal's reading)."""

from __future__ import annotations

import argparse
import json
import platform
import re
from pathlib import Path

import numpy as np
import pytest

from benchmarks import harness

SETTINGS = {"dataset": "letter-frost", "folds": 3, "what": "a stub"}


def _args(save: Path, run_folds: str | None = None, summarise: bool = False) -> argparse.Namespace:
    return argparse.Namespace(
        dataset="letter-frost", folds=3, run_folds=run_folds, save=save, summarise=summarise
    )


def _fit(train, test, fold: int) -> dict[str, float]:
    """A stub fit: the row says which fold it saw, so a summary can be checked fold by fold."""
    return {"fold_seen": float(fold), "n_test_bags": float(test.n_bags)}


def test_the_environment_names_the_commit_the_libraries_and_the_devices() -> None:
    import jax
    import numpy

    env = harness.environment()
    assert set(env) == {
        "commit",
        "python",
        "jax",
        "jaxlib",
        "numpyro",
        "numpy",
        "scipy",
        "backend",
        "devices",
        "cpu",
    }
    assert env["cpu"] and env["cpu"] == harness.cpu()
    assert env["jax"] == jax.__version__ and env["numpy"] == numpy.__version__
    assert env["backend"] == jax.default_backend() and env["devices"] == jax.device_count()
    assert env["commit"] is None or re.fullmatch(r"[0-9a-f]{7,}(\+changes)?", env["commit"])
    json.dumps(env)  # a saved line must hold it


def test_the_cpu_is_read_from_the_first_processor_of_cpuinfo() -> None:
    block = "processor\t: {n}\nmodel name\t: AMD EPYC\ncpu family\t: 26\nmodel\t\t: 2\nflags\t\t: {flags}\n"
    two = block.format(n=0, flags="fpu sse2 avx2 avx512f avx512bw") + "\n" + block.format(n=1, flags="x")
    assert harness.cpu_from_cpuinfo(two) == "AMD EPYC, cpu family 26, model 2, avx512"
    # Only AVX-512 Foundation counts: avx512_bf16 alone names an extension of it.
    assert harness.cpu_from_cpuinfo(block.format(n=0, flags="avx2 avx512_bf16")).endswith("model 2")
    assert harness.cpu_from_cpuinfo("vendor_id\t: X\n").startswith(platform.machine())


def test_parts_saved_apart_summarise_as_one_run_and_name_their_environments(tmp_path: Path, capsys) -> None:
    save = tmp_path / "rows.jsonl"
    harness.run_in_parts(_args(save, "2"), SETTINGS, _fit, lambda rows, folds: None)
    harness.run_in_parts(_args(save, "0,1"), SETTINGS, _fit, lambda rows, folds: None)
    lines = [json.loads(line) for line in save.read_text().splitlines()]
    assert [line["fold"] for line in lines] == [2, 0, 1]
    assert all(line["env"] == harness.environment() for line in lines)

    seen = {}
    capsys.readouterr()
    harness.run_in_parts(
        _args(save, summarise=True), SETTINGS, _fit, lambda r, f: seen.update(rows=r, folds=f)
    )
    assert seen["folds"] == [0, 1, 2]
    assert [row["fold_seen"] for row in seen["rows"]] == [0.0, 1.0, 2.0]  # in fold order, not saved order
    assert "note:" not in capsys.readouterr().out  # one recorded environment: nothing to say

    # A part saved elsewhere (another jax), and one saved before lines carried their environment.
    lines[0]["env"] = {**lines[0]["env"], "jax": "0.0.1"}
    del lines[1]["env"]
    save.write_text("".join(json.dumps(line) + "\n" for line in lines))
    harness.run_in_parts(_args(save, summarise=True), SETTINGS, _fit, lambda r, f: None)
    note = capsys.readouterr().out
    assert "environments differ or are unknown" in note
    assert "folds [1]: commit=" in note and "folds [2]: commit=" in note and "jax=0.0.1" in note
    assert "folds [0]: not recorded" in note


def test_summarise_refuses_missing_repeated_and_foreign_folds(tmp_path: Path) -> None:
    save = tmp_path / "rows.jsonl"
    harness.run_in_parts(_args(save, "0,1"), SETTINGS, _fit, lambda rows, folds: None)
    with pytest.raises(SystemExit, match=r"folds \[2\] not saved yet"):
        harness.run_in_parts(_args(save, summarise=True), SETTINGS, _fit, lambda r, f: None)
    harness.run_in_parts(_args(save, "0,1", summarise=True), SETTINGS, _fit, lambda r, f: None)  # partial
    with pytest.raises(SystemExit, match="saved with other settings"):
        harness.run_in_parts(
            _args(save, summarise=True), {**SETTINGS, "what": "else"}, _fit, lambda r, f: None
        )
    harness.run_in_parts(_args(save, "1"), SETTINGS, _fit, lambda rows, folds: None)
    with pytest.raises(SystemExit, match="fold 1 saved twice"):
        harness.run_in_parts(_args(save, "0,1", summarise=True), SETTINGS, _fit, lambda r, f: None)


def test_the_quantile_transform_learns_from_the_training_bags_only_and_keeps_each_features_order() -> None:
    from scipy.stats import norm

    from orlr_ppl.data import MIMLData
    from reproduction import shrinkage_vs_l21

    rng = np.random.default_rng(0)
    n = 600
    # A spiked, heavy-tailed feature like HJA's x6 (a fifth exactly 0) beside a Normal one.
    spiked = np.where(rng.random(n) < 0.2, 0.0, rng.standard_t(1.5, n))
    x = np.column_stack([spiked, rng.normal(size=n)])
    bags = np.repeat(np.arange(n // 3), 3)
    labels = [[b % 2] for b in range(n // 3)]
    data = MIMLData.from_arrays(x, labels, bags)
    train, test = data.subset(np.arange(150)), data.subset(np.arange(150, 200))
    new_train, new_test = shrinkage_vs_l21.quantile_normal(train, test)

    assert [len(b) for b in new_train.bags] == [len(b) for b in train.bags]
    assert new_train.label_sets == train.label_sets and new_test.label_sets == test.label_sets
    old, new = np.concatenate(train.bags), np.concatenate(new_train.bags)
    for j in range(2):  # monotone: the order of instances along each feature is kept
        order = np.argsort(old[:, j], kind="stable")
        assert np.all(np.diff(new[order, j]) >= -1e-12)
    # Normal margins on the training instances: the spread of the heavy tail is gone.
    qs = np.quantile(new[:, 0], [0.25, 0.75])
    assert np.abs(new).max() < 5.3 and np.abs(qs[1] - qs[0] - 2 * norm.ppf(0.75)) < 0.3
    # The test bags go through the training quantiles: a test value equal to a training value lands
    # where that training value did, and the test data's own distribution is not refitted.
    x_test = np.concatenate(test.bags)
    x_test[0, 1] = old[0, 1]
    probe = MIMLData.from_arrays(x_test, [[0]] * test.n_bags, np.repeat(np.arange(test.n_bags), 3))
    _, moved = shrinkage_vs_l21.quantile_normal(train, probe)
    assert np.isclose(np.concatenate(moved.bags)[0, 1], new[0, 1])
    lone = MIMLData.from_arrays(x_test[:3], [[0]], np.zeros(3, int))
    _, alone = shrinkage_vs_l21.quantile_normal(train, lone)  # one bag: nothing of its own to fit
    assert np.allclose(np.concatenate(alone.bags), np.concatenate(moved.bags)[:3])


def test_the_paired_summary_gives_the_t_interval_of_the_mean_difference_and_the_folds_each_side() -> None:
    from scipy import stats

    after = np.array([72.0, 73.3, 77.3, 68.4, 68.8, 66.7, 74.6])
    before = np.array([71.8, 72.8, 77.9, 68.4, 69.7, 67.8, 74.4])
    line = harness.paired_difference(after - before)
    low, high = stats.ttest_rel(after, before).confidence_interval(0.95)
    assert f"[{low:+.1f}, {high:+.1f}]" in line
    assert f"{np.mean(after - before):+.1f} points" in line
    assert "ahead in 3, behind in 3, level in 1 of 7 folds" in line
    assert (
        harness.paired_difference(np.array([0.5]))
        == "+0.5 points, ahead in 1, behind in 0, level in 0 of 1 folds"
    )


def test_the_rerun_rule_takes_each_folds_converged_run_and_says_which() -> None:
    from reproduction import shrinkage_vs_l21

    def row(acc: float, divergent: int, map_acc: float = 0.7) -> dict:
        diagnostics = {"r_hat": 1.004, "ess_bulk": 800.0, "ess_tail": 900.0, "divergent": divergent}
        return {"l21_map": map_acc, "horseshoe_nuts": acc, **diagnostics}

    firsts = {
        f: (r, {"commit": "a"})
        for f, r in enumerate([row(0.71, 0), row(0.72, 31), row(0.73, 1), row(0.74, 0)])
    }
    reruns = {1: (row(0.75, 0), {"commit": "b"}), 3: (row(0.76, 0), {"commit": "b"})}
    reruns[4] = (row(0.77, 0), {"commit": "c"})  # a fold run at the rerun's target only
    chosen, chosen_envs, lines = shrinkage_vs_l21._by_rule(firsts, reruns, [0, 1, 2, 3, 4])
    assert [r["horseshoe_nuts"] for r in chosen] == [0.71, 0.75, 0.73, 0.74, 0.77]
    assert [e["commit"] for e in chosen_envs] == ["a", "b", "a", "a", "c"]
    assert lines == [
        "fold 0: converged (0 div)",
        "fold 1: failed (31 div) -> at 0.98: converged (0 div)",
        "fold 2: failed (1 div), rerun at 0.98 pending",
        "fold 3: converged (0 div) (its rerun is ignored)",
        "fold 4: run at 0.98 only: converged (0 div)",
    ]
    failed_again = {2: (row(0.70, 4), None)}  # a rerun that fails too is what the fold has
    chosen, _, lines = shrinkage_vs_l21._by_rule(firsts, failed_again, [0, 1, 2, 3])
    assert chosen[2]["horseshoe_nuts"] == 0.70 and lines[2].endswith("-> at 0.98: failed (4 div)")
    with pytest.raises(SystemExit, match="fold 1: the rerun's l2,1 MAP scored 0.6"):
        shrinkage_vs_l21._by_rule(firsts, {1: (row(0.75, 0, map_acc=0.6), None)}, [0, 1, 2, 3])
    with pytest.raises(SystemExit, match=r"folds \[5\] saved in neither file"):
        shrinkage_vs_l21._by_rule(firsts, reruns, [0, 5])


def test_goal_line_reads_the_unrounded_mean_and_refuses_failed_folds() -> None:
    from reproduction import shrinkage_vs_l21

    # -0.04 rounds to -0.0 in the summary's one decimal, yet is below 0: the goal reads the sign.
    assert shrinkage_vs_l21.goal_line(np.array([0.2, -0.28]), [True, True], [0, 1]).endswith(
        "-0.040 points; not met"
    )
    assert shrinkage_vs_l21.goal_line(np.array([0.3, -0.3, 0.0]), [True] * 3, [0, 1, 2]).endswith(
        "+0.000 points; met"
    )
    tie = np.array([0.0, 100 * (0.3 - (0.1 + 0.2))])  # -5.6e-15: level folds, up to float rounding
    assert shrinkage_vs_l21.goal_line(tie, [True, True], [0, 1]).endswith("points; met")
    assert shrinkage_vs_l21.goal_line(np.array([0.5, 0.6]), [True, False], [3, 7]).endswith(
        "undecided: folds [7] fail the convergence rule"
    )


SCRIPTS = [
    *(f"benchmarks.{p.stem}" for p in sorted((harness.REPO / "benchmarks").glob("bench_*.py"))),
    *(f"reproduction.{p.stem}" for p in sorted((harness.REPO / "reproduction").glob("*.py"))),
]


@pytest.mark.parametrize("name", [s for s in SCRIPTS if not s.endswith("__init__")])
def test_every_script_imports_and_answers_help(name: str, monkeypatch, capsys) -> None:
    """Each maintained script still imports against the package and parses its options (no fit runs)."""
    import importlib

    module = importlib.import_module(name)
    monkeypatch.setattr("sys.argv", [name, "--help"])
    with pytest.raises(SystemExit) as stop:
        module.main()
    assert stop.value.code == 0
    assert "usage:" in capsys.readouterr().out


def test_the_papers_delta_uses_the_mean_squared_distance_over_pairs():
    from reproduction.kernel_orlr import mean_squared_distance

    x = np.random.default_rng(0).normal(size=(7, 3))
    pairs = [np.sum((x[i] - x[j]) ** 2) for i in range(7) for j in range(7) if i != j]
    assert mean_squared_distance(x) == pytest.approx(np.mean(pairs))
