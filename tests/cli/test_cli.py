"""The orlr-ppl command line: every subcommand end to end on files, its one-line errors and exit codes."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from helpers import write_npz as _write_npz

from orlr_ppl import EM
from orlr_ppl.cli import build_parser, main
from orlr_ppl.cli.commands import fittable
from orlr_ppl.cli.compare import compared_models
from orlr_ppl.data.datasets import make_miml_digits
from orlr_ppl.data.io import read_bag_npz

pytestmark = pytest.mark.arviz

_SHARED = Path(__file__).resolve().parents[3] / "shared" / "data"


def test_help_lists_subcommands():
    out = subprocess.run([sys.executable, "-m", "orlr_ppl.cli", "--help"], capture_output=True, text=True)
    assert out.returncode == 0
    for command in ("demo", "fit", "predict", "evaluate"):
        assert command in out.stdout


def test_demo_runs_small(tmp_path, capsys):
    # At most 4 digits a bag: the default 8 gives DP programs that compile 2.6 times longer.
    args = [
        "demo",
        "--n-bags",
        "30",
        "--max-digits",
        "4",
        "--num-warmup",
        "25",
        "--num-samples",
        "25",
        "--quiet",
    ]
    assert main(args + ["--out", str(tmp_path / "demo")]) == 0
    out = capsys.readouterr().out
    rows = {
        line.split("  ")[0]: line.split()
        for line in out.splitlines()
        if line.startswith(("MAP ", "Laplace posterior", "NUTS posterior"))
    }
    assert set(rows) == {"MAP", "Laplace posterior", "NUTS posterior"}
    for row in rows.values():
        acc, nll, brier, ece, selective, transductive = map(float, row[-6:])
        assert acc > 0.5 and transductive > 0.5 and selective >= acc - 0.05
        assert 0 < nll < 5 and 0 < brier < 2 and 0 <= ece <= 1
    assert "acc@80%" in out and "importance k-hat" in out
    assert (tmp_path / "demo" / "nuts" / "posterior.nc").is_file()
    assert (tmp_path / "demo" / "laplace" / "posterior.nc").is_file()
    assert (tmp_path / "demo" / "map" / "metadata.json").is_file()


def test_progress_bars_show_only_on_a_terminal(tmp_path, capsys, monkeypatch):
    """Redrawn into a log or a pipe a bar is hundreds of lines; on a terminal it is progress."""
    _write_npz(tmp_path / "d.npz", make_miml_digits(10, seed=0, split="train", max_size=3))
    data, out = str(tmp_path / "d.npz"), str(tmp_path / "m")
    args = ["fit", "--data", data, "--method", "svi", "--force", "--out", out]
    assert main(args) == 0
    assert "%|" not in capsys.readouterr().err  # a tqdm bar: "SVI:  40%|████  | 1200/3000"
    monkeypatch.setattr(sys.stderr, "isatty", lambda: True)
    assert main(args) == 0
    assert "%|" in capsys.readouterr().err
    assert main([*args, "--quiet"]) == 0
    assert "%|" not in capsys.readouterr().err  # a tqdm bar: "SVI:  40%|████  | 1200/3000"


def test_fit_predict_evaluate_from_files(tmp_path, capsys):
    _write_npz(tmp_path / "train.npz", make_miml_digits(60, seed=0, split="train", max_size=4))
    _write_npz(tmp_path / "test.npz", make_miml_digits(20, seed=1, split="test", max_size=4))
    model = tmp_path / "model"
    assert main(["fit", "--data", str(tmp_path / "train.npz"), "--method", "map", "--out", str(model)]) == 0
    assert (
        main(
            [
                "predict",
                "--model",
                str(model),
                "--data",
                str(tmp_path / "test.npz"),
                "--out",
                str(tmp_path / "p.csv"),
            ]
        )
        == 0
    )
    rows = (tmp_path / "p.csv").read_text().splitlines()
    assert rows[0] == "bag_id,instance,label," + ",".join(f"p({c})" for c in range(10))
    assert len(rows) - 1 == len(np.load(tmp_path / "test.npz")["bag_ids"])
    assert rows[1].startswith("100,0,")  # the archive's own bag ids
    capsys.readouterr()
    assert main(["evaluate", "--model", str(model), "--data", str(tmp_path / "test.npz"), "--json"]) == 0
    out, err = capsys.readouterr()
    result = json.loads(out)
    assert result["instance_accuracy_inductive"] > 0.7
    assert result["instance_accuracy_transductive"] >= result["instance_accuracy_inductive"] - 0.05
    assert 0 <= result["ranking_loss"] <= 1
    assert "in-sample" not in err  # held-out bags: no note
    assert main(["evaluate", "--model", str(model), "--data", str(tmp_path / "train.npz"), "--json"]) == 0
    out, err = capsys.readouterr()
    assert json.loads(out) and err.strip() == (
        "warning: 60 of 60 bags here are bags the model was fitted on: the figures are in-sample for "
        "them, not held out (evaluate on bags left out of the fit)"
    )


def test_bad_files_give_clear_errors(tmp_path, capsys):
    assert main(["fit", "--data", str(tmp_path / "nope.npz")]) == 2
    assert "nope.npz: no such file" in capsys.readouterr().err
    np.savez(tmp_path / "bad.npz", features=np.ones((3, 2)))
    with pytest.raises(ValueError, match="missing array 'bag_ids'"):
        read_bag_npz(tmp_path / "bad.npz")
    (tmp_path / "junk.npz").write_bytes(b"junk")
    with pytest.raises(ValueError, match="not a readable .npz"):
        read_bag_npz(tmp_path / "junk.npz")


def test_unknown_subcommand_fails():
    with pytest.raises(SystemExit):
        main(["nope"])


def test_evaluate_compares_methods_in_one_run(capsys):
    # ORLR-NUTS and SIM are left out for time: the factories are checked below, the models in
    # test_orlr_posterior and test_sim.
    args = ["evaluate", "--dataset", "digits", "--n-bags", "40", "--folds", "2", "--protocol", "both"]
    args += ["--methods", "orlr-em,softmax,majority", "--quiet", "--json"]
    assert main(args) == 0
    out = json.loads(capsys.readouterr().out)
    assert set(out["summary"]) == {"ORLR-EM", "SoftmaxRegression", "MajorityClass"}
    for name, per in out["folds"].items():
        assert len(per["accuracy_inductive"]) == 2, name
        for key in ("accuracy_inductive", "accuracy_transductive", "average_precision", "hamming_loss"):
            assert all(0.0 <= v <= 1.0 for v in per[key]), (name, key)
    acc = {n: s["accuracy_inductive"]["mean"] for n, s in out["summary"].items()}
    assert acc["SoftmaxRegression"] > acc["MajorityClass"] + 0.3
    assert acc["ORLR-EM"] > acc["MajorityClass"] + 0.3
    trans = out["summary"]["ORLR-EM"]["accuracy_transductive"]["mean"]
    assert trans >= acc["ORLR-EM"]


def test_evaluate_letter_frost_prints_published_figures(capsys):
    args = ["evaluate", "--dataset", "letter-frost", "--folds", "2", "--methods", "softmax"]
    args += ["--uci-path", str(_SHARED / "letter-recognition.data"), "--quiet"]
    assert main(args) == 0
    out = capsys.readouterr().out
    assert "144 bags, 565 instances, 16 features, 24 classes" in out
    assert "published inductive accuracy (%): ORLR-EM 71.3 ± 7.6, SIM 58.1 ± 5.7" in out
    row = next(line for line in out.splitlines() if line.startswith("SoftmaxRegression"))
    assert 50.0 < float(row.split()[1]) < 90.0  # instance accuracy in %


def test_evaluate_comparison_errors(capsys, tmp_path):
    assert main(["evaluate", "--dataset", "digits", "--methods", "orlr-em,bogus", "--quiet"]) == 2
    assert "unknown ['bogus']" in capsys.readouterr().err
    missing = ["evaluate", "--dataset", "letter-frost", "--uci-path", str(tmp_path / "none.data")]
    assert main(missing + ["--quiet"]) == 2
    assert "no such file" in capsys.readouterr().err


def test_compared_models_are_configured_as_published():
    args = build_parser().parse_args(["evaluate", "--dataset", "letter-frost", "--num-samples", "7"])
    models = {name: make() for name, make in compared_models(args).items()}
    assert list(models) == ["ORLR-EM", "ORLR-NUTS", "SoftmaxRegression", "MajorityClass", "SIM"]
    em = models["ORLR-EM"].get_params()
    assert em["inference"] == EM(max_iter=50, m_steps=1)
    assert em["prior_scale"] is None and em["intercept_scale"] is None
    nuts = models["ORLR-NUTS"].get_params()
    assert (nuts["inference"].num_samples, nuts["prior_scale"]) == (7, 1.0)


def test_fit_nuts_prints_convergence_summary_and_warning_lines(tmp_path, capsys):
    # A tiny 2-D problem with one label per bag (one DP bucket, so NUTS compiles fast); 1 x 30 draws,
    # extended to 60, cannot converge, which is the point: the fit still succeeds and says why not
    # to trust it.
    rng = np.random.default_rng(0)
    y = rng.integers(0, 3, size=10)
    x = np.repeat(np.array([[3.0, 0.0], [-1.5, 2.6], [-1.5, -2.6]])[y], 2, axis=0) + rng.normal(size=(20, 2))
    np.savez(
        tmp_path / "toy.npz",
        features=x,
        bag_ids=np.repeat(np.arange(10), 2),
        bag_labels=np.eye(3, dtype=int)[y],
    )
    args = ["fit", "--data", str(tmp_path / "toy.npz"), "--method", "nuts", "--out", str(tmp_path / "m")]
    args += ["--num-warmup", "30", "--num-samples", "30", "--num-chains", "1", "--quiet"]
    assert main(args) == 0
    out, err = capsys.readouterr()
    assert "NUTS: 1 chain x 60 draws (extended from 30: unconverged), 9 parameters" in out
    assert "max R-hat" in out
    assert "PSIS-LOO:" in out and "verdict: NOT converged" in out
    warned = [line for line in err.splitlines() if line.startswith("warning: ")]
    # One short paragraph, not a line per check: what failed, and what to try next.
    assert len(warned) == 1 and "bulk ESS down to " in warned[0] and "Next: " in warned[0]
    assert "ConvergenceWarning" not in err  # reported as lines, not as a Python warning
    # A posterior's predictions carry each instance's uncertainty, inductive and transductive.
    for extra in ([], ["--transductive"]):
        predict = ["predict", "--model", str(tmp_path / "m"), "--data", str(tmp_path / "toy.npz"), *extra]
        assert main(predict) == 0
        rows = [line.split(",") for line in capsys.readouterr().out.splitlines()]
        assert rows[0][-4:] == ["p_lower", "p_upper", "entropy", "mutual_information"] and len(rows) == 21
        for row in rows[1:]:
            p = [float(v) for v in row[3:6]]
            lo, hi, entropy, mi = map(float, row[6:])
            assert lo <= max(p) + 1e-6 and max(p) - 1e-6 <= hi and 0 <= mi <= entropy + 1e-9


def test_ctrl_c_ends_a_command_with_one_line(monkeypatch, capsys):
    from orlr_ppl.cli import commands

    def interrupted(args):
        raise KeyboardInterrupt

    monkeypatch.setattr(commands, "info", interrupted)
    assert main(["info", "anything"]) == 130
    out, err = capsys.readouterr()
    assert out == "" and err.strip() == "orlr-ppl info: interrupted"


# -- the user's path (issue 10) -------------------------------------------------------------------

HJA = _SHARED / "hja"


def _write_arff(path: Path, data) -> None:
    """``data`` as a MIML relational ARFF with a Mulan XML beside it (same stem)."""
    d = data.n_features
    lines = ["@relation digits", f"@attribute id {{{','.join(f'b{i}' for i in range(data.n_bags))}}}"]
    lines += ["@attribute bag relational", *[f"  @attribute f{j} numeric" for j in range(d)], "@end bag"]
    lines += [f"@attribute digit{c} {{0,1}}" for c in range(data.n_classes)]
    lines.append("@data")
    for i, (x, s) in enumerate(zip(data.bags, data.label_sets)):
        bag = "\\n".join(",".join(f"{v:g}" for v in row) for row in x)
        lines.append(f"b{i},'{bag}'," + ",".join("1" if c in s else "0" for c in range(data.n_classes)))
    path.write_text("\n".join(lines) + "\n")
    labels = "".join(f'<label name="digit{c}"/>' for c in range(data.n_classes))
    path.with_suffix(".xml").write_text(
        f'<labels xmlns="http://mulan.sourceforge.net/labels">{labels}</labels>'
    )


def test_version_and_every_option_explained(capsys):
    with pytest.raises(SystemExit) as stop:
        main(["--version"])
    assert stop.value.code == 0 and capsys.readouterr().out.startswith("orlr-ppl ")
    parser = build_parser()
    sub = next(a for a in parser._actions if a.dest == "command")
    for name, p in sub.choices.items():
        text = p.format_help()
        for action in p._actions:
            assert action.help, f"{name} {action.option_strings}: no help text"
            if action.option_strings and action.default not in (None, False) and action.nargs != 0:
                shown = f"(default:{action.default})".replace(" ", "") in "".join(text.split())
                assert shown or "default" in action.help, (name, action.option_strings)


def test_arff_file_fit_predict_evaluate_info(tmp_path, capsys):
    train = make_miml_digits(40, seed=0, split="train", max_size=4)
    _write_arff(tmp_path / "train.arff", train)
    model = tmp_path / "model"
    assert main(["fit", "--data", str(tmp_path / "train.arff"), "--method", "map", "--out", str(model)]) == 0
    assert json.loads((model / "metadata.json").read_text())["class_names"][:2] == ["digit0", "digit1"]
    capsys.readouterr()
    assert main(["predict", "--model", str(model), "--data", str(tmp_path / "train.arff")]) == 0
    rows = capsys.readouterr().out.splitlines()
    assert rows[0].startswith("bag_id,instance,label,p(digit0),p(digit1)")
    assert rows[1].startswith("b0,0,digit") and len(rows) - 1 == train.n_instances
    assert main(["evaluate", "--model", str(model), "--data", str(tmp_path / "train.arff"), "--json"]) == 0
    assert 0 <= json.loads(capsys.readouterr().out)["ranking_loss"] <= 1
    assert main(["info", str(tmp_path / "train.arff")]) == 0
    out = capsys.readouterr().out
    assert "40 bags" in out and str(train.n_instances) in out
    assert main(["info", "--data", str(tmp_path / "train.arff")]) == 0  # as fit and predict take it
    assert capsys.readouterr().out == out
    assert main(["info"]) == 2
    assert "orlr-ppl info PATH, or orlr-ppl info --data PATH" in capsys.readouterr().err


@pytest.mark.skipif(not HJA.is_dir(), reason="needs ../shared/data/hja")
def test_published_hja_folder_fit_predict_evaluate_info(tmp_path, capsys):
    model = tmp_path / "hja"
    args = ["fit", "--data", str(HJA), "--method", "em", "--max-iter", "3", "--out", str(model), "--quiet"]
    assert main(args) == 0
    out, err = capsys.readouterr()
    assert "548 bags (10232 instances)" in out  # every segment as read, and a line says so
    assert "5234 of 10232 instances are unlabelled (-1)" in err and "--segments labelled" in err
    names = json.loads((model / "metadata.json").read_text())["class_names"]
    assert len(names) == 13 and names[0] == "BRCR - Brown Creeper"
    features = str(HJA / "hja_birdsong_features.txt")  # one file names the whole set
    assert main(["predict", "--model", str(model), "--data", features, "--out", str(tmp_path / "p.csv")]) == 0
    rows = (tmp_path / "p.csv").read_text().splitlines()
    assert len(rows) == 10232 + 1 and rows[0].split(",")[3] == "p(BRCR - Brown Creeper)"
    assert rows[1].split(",")[0] == "1"  # the published bag id
    capsys.readouterr()
    assert main(["evaluate", "--model", str(model), "--data", str(HJA), "--json"]) == 0
    result = json.loads(capsys.readouterr().out)
    assert 0 <= result["instance_accuracy_inductive"] <= 1  # over the 4,998 labelled segments
    assert main(["info", str(HJA)]) == 0
    out = capsys.readouterr().out
    assert "548 bags" in out and "10232 instances" in out and "5234" in out


@pytest.mark.skipif(not HJA.is_dir(), reason="needs ../shared/data/hja")
def test_data_takes_the_hja_protocol_when_asked(capsys):
    """``--data HJA --segments labelled --version union`` reads what ``--dataset hja`` does, silently."""
    from orlr_ppl.cli.sources import load_dataset

    def load(*extra):
        return load_dataset(build_parser().parse_args(["fit", *extra]))

    for version in ("original", "union"):
        given = load("--data", str(HJA), "--segments", "labelled", "--version", version)
        named = load("--dataset", "hja", "--hja-path", str(HJA), "--version", version)
        assert given.n_instances == named.n_instances == 4998
        assert [list(s) for s in given.label_sets] == [list(s) for s in named.label_sets]
    assert load("--data", str(HJA), "--version", "union").n_instances == 10232  # all segments, relabelled
    assert capsys.readouterr().err == ""  # asked for: no warning


def test_saving_over_a_model_needs_force(tmp_path, capsys):
    _write_npz(tmp_path / "d.npz", make_miml_digits(20, seed=0, split="train", max_size=4))
    args = ["fit", "--data", str(tmp_path / "d.npz"), "--method", "map", "--out", str(tmp_path / "m")]
    assert main(args) == 0
    assert main(args) == 2
    assert "--force" in capsys.readouterr().err
    assert main(args + ["--force"]) == 0


def test_n_bags_means_what_it_says_and_empty_methods_is_an_error(tmp_path, capsys):
    _write_npz(tmp_path / "d.npz", make_miml_digits(20, seed=0, split="train", max_size=4))
    model = str(tmp_path / "m")
    assert main(["fit", "--data", str(tmp_path / "d.npz"), "--method", "map", "--out", model]) == 0
    capsys.readouterr()
    assert main(["predict", "--model", model, "--dataset", "digits", "--n-bags", "6"]) == 0
    rows = capsys.readouterr().out.splitlines()[1:]
    assert len({r.split(",")[0] for r in rows}) == 6
    assert main(["evaluate", "--dataset", "digits", "--methods", "", "--quiet"]) == 2
    assert "--methods is empty" in capsys.readouterr().err
    assert main(["demo", "--max-digits", "1", "--quiet", "--out", str(tmp_path / "demo")]) == 2
    assert "--max-digits 1: a demo bag holds 2 digits or more" in capsys.readouterr().err


def test_paths_and_formats_are_explained(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert main(["info", "missing/data.arff"]) == 2
    err = capsys.readouterr().err
    assert str(tmp_path / "missing" / "data.arff") in err and "current directory" in err
    assert len(err.strip().splitlines()) == 1
    (tmp_path / "data.txt").write_text("1,2,3\n")
    assert main(["info", "data.txt"]) == 2
    assert "unknown data format" in capsys.readouterr().err
    monkeypatch.setenv("ORLR_PPL_DATA", str(tmp_path / "nowhere"))
    monkeypatch.setattr(
        "orlr_ppl.cli.sources.shared_data_candidates", lambda name: [tmp_path / "nowhere" / name]
    )
    assert main(["evaluate", "--dataset", "letter-frost", "--methods", "softmax", "--quiet"]) == 2
    assert str(tmp_path / "nowhere" / "letter-recognition.data") in capsys.readouterr().err


@pytest.mark.parametrize("damage", ["truncate", "empty", "list", "nan"])
def test_corrupt_models_exit_2_with_one_line(tmp_path, capsys, damage):
    _write_npz(tmp_path / "d.npz", make_miml_digits(20, seed=0, split="train", max_size=4))
    model = tmp_path / "m"
    assert main(["fit", "--data", str(tmp_path / "d.npz"), "--method", "map", "--out", str(model)]) == 0
    params, meta = model / "params.npz", model / "metadata.json"
    if damage == "truncate":
        params.write_bytes(params.read_bytes()[: params.stat().st_size // 2])
    elif damage == "empty":
        params.write_bytes(b"")
    elif damage == "list":
        meta.write_text("[1, 2]")
    else:
        arrays = dict(np.load(params))
        arrays["coef_"] = np.full_like(arrays["coef_"], np.nan)
        np.savez(params, **arrays)
    capsys.readouterr()
    assert main(["predict", "--model", str(model), "--data", str(tmp_path / "d.npz")]) == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and "Traceback" not in err
    assert ("metadata.json" if damage == "list" else "params.npz") in err


def test_prior_scale_zero_means_no_prior(tmp_path, capsys):
    _write_npz(tmp_path / "d.npz", make_miml_digits(20, seed=0, split="train", max_size=4))
    args = ["fit", "--data", str(tmp_path / "d.npz"), "--max-iter", "3", "--prior-scale", "0", "--quiet"]
    assert main(args + ["--out", str(tmp_path / "em")]) == 0
    em = json.loads((tmp_path / "em" / "metadata.json").read_text())
    assert em["params"]["prior_scale"] is None


@pytest.mark.skipif(not HJA.is_dir(), reason="needs ../shared/data/hja")
def test_hja_comparison_names_the_bags_it_cannot_fit(capsys):
    args = ["evaluate", "--dataset", "hja", "--hja-path", str(HJA), "--version", "original", "--folds", "2"]
    args += ["--methods", "majority", "--quiet"]
    assert main(args) == 2
    err = capsys.readouterr().err
    assert "219" in err and "--drop-impossible" in err
    assert main(args + ["--drop-impossible"]) == 0
    out, err = capsys.readouterr()
    assert "left out 1 bag(s) the union model cannot explain: ['219']" in err
    assert "547 bags, 4996 instances" in out
    assert "published inductive accuracy (%): ORLR-EM 69.1 ± 4.7" in out
    assert main(args + ["--drop-impossible", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["dropped_bags"] == ["219"]
    union = args[:6] + ["union"] + args[7:]
    assert main(union) == 0
    assert "ORLR-EM 72.3 ± 3.8" in capsys.readouterr().out


def test_fit_takes_pruning_and_stochastic_em(tmp_path, capsys):
    _write_npz(tmp_path / "d.npz", make_miml_digits(40, seed=0, split="train", max_size=4))
    base = ["fit", "--data", str(tmp_path / "d.npz"), "--quiet", "--max-iter", "5"]
    assert main(base + ["--prune", "0.1", "--out", str(tmp_path / "p")]) == 0
    out = capsys.readouterr().out
    assert "pruned 4 bag(s) with the most DP work" in out
    assert main(base + ["--method", "em", "--bag-fraction", "0.3", "--out", str(tmp_path / "s")]) == 0
    captured = capsys.readouterr()
    assert "stochastic EM (0.3 of the bags per iteration): 5 iterations" in captured.out
    assert "warning" not in captured.err
    assert main(base + ["--bag-fraction", "0.3", "--method", "map", "--out", str(tmp_path / "m")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "stochastic EM takes --method em" in err[0]


def _relaxed_digits(n_bags: int, seed: int):
    """MIML digits that break the union both ways (issue 12), as a MIMLData.

    Digit 9 is background: its instances are unlabelled (-1) and it leaves the
    label sets; two bags of 9s alone (appended) have no label. The first three
    bags with 2+ labels keep one instance (the first): more labels than instances.
    """
    from orlr_ppl.data import MIMLData

    ds = make_miml_digits(n_bags, seed=seed, split="train", max_size=4)
    bags, sets, inst = [], [], []
    cut = 0
    for x, s, y in zip(ds.bags, ds.label_sets, ds.instance_labels):
        if cut < 3 and len(s) >= 2 and len(set(s) - {9}) >= 2:
            x, y, cut = x[:1], y[:1], cut + 1  # the bag keeps its label set
        bags.append(x)
        sets.append(sorted(set(s) - {9}))
        inst.append(np.where(y == 9, -1, y))
    nines = np.concatenate([x[y == 9] for x, y in zip(ds.bags, ds.instance_labels)])
    for part in np.array_split(nines, 2):
        bags.append(part)
        sets.append([])
        inst.append(np.full(len(part), -1))
    return MIMLData(bags, sets, inst, n_classes=9)


def test_fit_with_leak_and_novel_class(tmp_path, capsys):
    data = _relaxed_digits(60, seed=0)
    assert sum(len(x) < len(s) for x, s in zip(data.bags, data.label_sets)) == 3
    assert any(len(s) == 0 for s in data.label_sets)
    _write_npz(tmp_path / "d.npz", data)
    base = ["fit", "--data", str(tmp_path / "d.npz"), "--quiet", "--max-iter", "20"]
    assert main(base + ["--out", str(tmp_path / "plain")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "--leak or --novel-class" in err[0] and "empty label set" in err[0]
    assert main(base + ["--leak", "learn", "--out", str(tmp_path / "leak")]) == 2  # empty sets remain
    assert "empty label set" in capsys.readouterr().err
    # --drop-impossible under the relaxed model leaves out only the bags it cannot explain.
    args = build_parser().parse_args(base[:3] + ["--leak", "learn", "--drop-impossible"])
    clean, dropped = fittable(data, args)
    empty = [str(b) for b, s in zip(data.bag_ids, data.label_sets) if len(s) == 0]
    assert dropped == empty and clean.n_bags == data.n_bags - len(empty)
    assert f"left out {len(empty)} bag(s)" in capsys.readouterr().err

    model = tmp_path / "both"
    assert main(base + ["--novel-class", "--leak", "learn", "--out", str(model)]) == 0
    assert f"on {data.n_bags} bags" in capsys.readouterr().out
    assert 0 < json.loads((model / "metadata.json").read_text())["fitted"]["leak_"] < 1
    assert main(["predict", "--model", str(model), "--data", str(tmp_path / "d.npz")]) == 0
    rows = capsys.readouterr().out.splitlines()
    assert rows[0].endswith(",p(8),p(novel)") and len(rows) == data.n_instances + 1
    assert {r.split(",")[2] for r in rows[1:]} <= {*map(str, range(9)), "novel"}
    assert main(["evaluate", "--model", str(model), "--data", str(tmp_path / "d.npz"), "--json"]) == 0
    result = json.loads(capsys.readouterr().out)
    assert 0.5 < result["auc_novel_unlabelled"] <= 1
    assert result["instance_accuracy_named_classes"] >= result["instance_accuracy_inductive"]


@pytest.mark.parametrize("value", ["1.5", "0", "-0.1", "sometimes"])
def test_bad_leak_is_one_line_exit_2(value, capsys):
    with pytest.raises(SystemExit) as stop:
        main(["fit", "--dataset", "digits", "--leak", value])
    assert stop.value.code == 2
    assert "--leak" in capsys.readouterr().err


def test_orlr_novel_is_compared_by_name():
    args = build_parser().parse_args(["evaluate", "--dataset", "digits", "--methods", "orlr-novel,softmax"])
    models = {name: make() for name, make in compared_models(args).items()}
    assert list(models) == ["ORLR-novel", "SoftmaxRegression"]
    params = models["ORLR-novel"].get_params()
    assert (params["novel_class"], params["leak"], params["inference"]) == (True, "learn", "map")
    default = build_parser().parse_args(["evaluate", "--dataset", "digits"])
    assert "orlr-novel" not in default.methods.split(",")


def test_drop_features_reaches_fit_predict_and_evaluate(tmp_path, capsys):
    ds = make_miml_digits(20, seed=0, split="train", max_size=4)
    _write_npz(tmp_path / "d.npz", ds)
    data, model = str(tmp_path / "d.npz"), str(tmp_path / "m")
    names = "x3,x7"
    assert main(["fit", "--data", data, "--method", "map", "--drop-features", names, "--out", model]) == 0
    assert json.loads((tmp_path / "m" / "metadata.json").read_text())["n_features"] == ds.n_features - 2
    capsys.readouterr()
    assert main(["predict", "--model", model, "--data", data, "--drop-features", names]) == 0
    assert main(["evaluate", "--model", model, "--data", data, "--drop-features", names, "--json"]) == 0
    capsys.readouterr()
    assert main(["predict", "--model", model, "--data", data]) == 2  # the same list is needed
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and str(ds.n_features - 2) in err
    assert main(["fit", "--data", data, "--method", "map", "--drop-features", "x3,nope", "--out", model]) == 2
    assert "no feature named ['nope']" in capsys.readouterr().err


def test_fit_reports_collinear_features_as_a_warning_line(capsys):
    import warnings

    from orlr_ppl.cli.commands import fit_quietly
    from orlr_ppl.data.collinearity import CollinearityWarning

    class _Model:
        def fit(self, *args):
            warnings.warn("x2 ~ x0, x1", CollinearityWarning, stacklevel=2)
            warnings.warn("something else", UserWarning, stacklevel=2)
            return self

    with pytest.warns(UserWarning, match="something else") as rec:
        fit_quietly(_Model())
    assert not any(issubclass(w.category, CollinearityWarning) for w in rec)
    assert capsys.readouterr().err == "warning: x2 ~ x0, x1\n"


@pytest.mark.parametrize(
    ("labels", "flags", "not_offered"),
    [
        (list(range(9)), "--drop-impossible or --leak", "--novel-class"),  # more labels than images
        ([], "--drop-impossible or --novel-class", "--leak"),  # no label at all
    ],
)
def test_the_impossible_bag_error_offers_the_flags_that_fix_it(tmp_path, capsys, labels, flags, not_offered):
    """A flag the error offers makes the fit work; one that would fail the same way is not offered."""
    data = make_miml_digits(12, seed=1, split="train", max_size=4)
    data.label_sets[3] = labels
    _write_npz(tmp_path / "d.npz", data)
    args = ["fit", "--data", str(tmp_path / "d.npz"), "--method", "map", "--out", str(tmp_path / "m")]
    assert main(args) == 2
    err = capsys.readouterr().err
    assert f"(on the command line: {flags})" in err and not_offered not in err
    fix = ["--leak", "0.05"] if "--leak" in flags else ["--novel-class"]
    assert main([*args, *fix, "--force"]) == 0


def test_predict_and_evaluate_leave_out_impossible_bags_when_asked(tmp_path, capsys):
    """``--drop-impossible`` does in ``predict`` and ``evaluate --model`` what it does in ``fit``."""
    _write_npz(tmp_path / "train.npz", make_miml_digits(40, seed=0, split="train", max_size=4))
    test = make_miml_digits(12, seed=1, split="test", max_size=4)
    test.label_sets[3] = list(range(9))  # bag 103 names more digits than it has images
    _write_npz(tmp_path / "test.npz", test)
    model = tmp_path / "model"
    assert main(["fit", "--data", str(tmp_path / "train.npz"), "--method", "map", "--out", str(model)]) == 0
    capsys.readouterr()
    for command in (["predict", "--transductive"], ["evaluate"]):
        args = [*command, "--model", str(model), "--data", str(tmp_path / "test.npz")]
        assert main(args) == 2  # the impossible bag is an error, which names it
        err = capsys.readouterr().err
        assert "103" in err and len(err.strip().splitlines()) == 1
        assert main([*args, "--drop-impossible"]) == 0
        out, err = capsys.readouterr()
        assert "left out 1 bag(s) the model cannot explain: ['103']" in err
        if command[0] == "predict":
            bags = {line.split(",")[0] for line in out.splitlines()[1:]}
            assert "103" not in bags and len(bags) == 11


def _advice_of_every_kind() -> list[str]:
    """The warning of each kind of failed fit, as the diagnostics write it for Python users."""
    import pandas as pd

    from orlr_ppl.estimators.feature_notes import heavy_tail_note
    from orlr_ppl.inference.checks import diagnostics as dg

    table = pd.DataFrame(
        {"mean": [0.1], "sd": [1.0], "r_hat": [1.05], "ess_bulk": [50.0], "ess_tail": [60.0]},
        index=["W[x6, A]"],
    )
    ok = table.assign(r_hat=1.0, ess_bulk=900.0, ess_tail=900.0)
    nuts = {"mcmc": True, "n_chains": 4, "n_draws": 2000, "n_divergent": 0, "bfmi": [1.0]}
    cases = [
        ({"mcmc": False, "approximation": "Laplace", "approximation_k": 3.0}, ok),
        ({"mcmc": False, "approximation_k": 3.0}, ok),
        ({**nuts, "interrupted": True, "n_draws": 10, "n_draws_planned": 1000}, table),
        ({**nuts, "n_divergent": 40, "target_accept_prob": 0.8}, ok),
        ({**nuts, "n_divergent": 40, "target_accept_prob": 0.995}, ok),
        ({**nuts, "n_divergent": 40}, ok),
        ({**nuts, "n_draws": 200}, table),
        ({**nuts, "n_at_max_treedepth": 30}, ok),
        ({**nuts}, table),
        ({**nuts, "bfmi": [0.1, 1.0]}, ok),
        ({**nuts, "n_high_pareto_k": 3, "loo_high_k_share": 0.1}, ok),
    ]
    out = []
    for sampler, t in cases:
        d = dg.Diagnostics(t, sampler, ["a problem"], False)
        out.append(dg.warning_message(d))
    slow = dg.Diagnostics(table, nuts, ["a problem"], False)
    note = heavy_tail_note({"x6": 9.0}, slow)
    out.append(dg.warning_message(slow._replace(note=note)))
    sampled = {**nuts, "n_draws_planned": 1000, "n_at_max_treedepth": 0, "mean_tree_depth": 4.0}
    sampled["n_bags"] = None
    extended = dg.Diagnostics(ok, sampled, [], True)
    out.append(extended.summary_lines()[-1])  # the verdict of chains that went on until they passed
    for method, n_iter, optimality in (("em", 200, 0.5), ("map", 12, 0.5), ("em", 200, None)):
        out += dg.optimizer_diagnostics(method, False, n_iter, 200, 1e-3, optimality=optimality).problems
    return out


@pytest.mark.parametrize("advice", _advice_of_every_kind())
def test_a_fits_warning_on_the_command_line_gives_flags(advice):
    """The CLI's warning names ``fit``'s flags, never a Python spelling a shell user cannot type."""
    from orlr_ppl.cli.commands import as_flags

    parser = build_parser()
    sub = next(a for a in parser._actions if a.dest == "command").choices["fit"]
    flags = {s for a in sub._actions for s in a.option_strings}
    line = as_flags(advice)
    assert not re.search(r"[A-Z]\w*\(\w+=|\b\w+=|\.diagnostics\(\)", line), line
    assert set(re.findall(r"--[a-z][a-z-]*", line)) <= flags, line


def test_an_interrupt_says_why_nothing_was_kept(monkeypatch, capsys):
    """Ctrl-C that leaves NUTS too few draws prints the reason on the one line, and exits 130."""
    from orlr_ppl.cli import commands

    def interrupted(args):
        why = "NUTS interrupted after 2 draws a chain: too few to keep (it keeps 4 or more)"
        raise KeyboardInterrupt(why)

    monkeypatch.setattr(commands, "fit", interrupted)
    assert main(["fit", "--data", "x.npz", "--method", "nuts"]) == 130
    err = capsys.readouterr().err.strip()
    assert err == (
        "orlr-ppl fit: interrupted (NUTS interrupted after 2 draws a chain: too few to keep (it keeps 4 "
        "or more)); nothing saved"
    )


def test_a_comparison_of_bag_labelled_data_scores_the_held_out_bags(tmp_path, capsys):
    """Without instance labels, ``evaluate`` compares by the bag metrics of the held-out bags, and
    refuses what needs instance labels with the fix."""
    import argparse

    from orlr_ppl.cli.compare import DEFAULT_METHODS, _bag_labelled

    ds = make_miml_digits(30, seed=0, split="train", max_size=3)
    _write_npz(tmp_path / "full.npz", ds)
    with np.load(tmp_path / "full.npz") as z:
        np.savez(tmp_path / "bags.npz", **{k: z[k] for k in z.files if k != "instance_labels"})
    args = ["evaluate", "--data", str(tmp_path / "bags.npz"), "--folds", "2"]
    assert main([*args, "--methods", "orlr-em", "--json"]) == 0
    summary = json.loads(capsys.readouterr().out)["summary"]["ORLR-EM"]
    assert 0 <= summary["ranking_loss"]["mean"] <= 1 and 0 <= summary["one_error"]["mean"] <= 1
    assert not any(k.startswith("accuracy") for k in summary)
    assert main([*args, "--methods", "orlr-em"]) == 0
    out = capsys.readouterr().out
    assert "no instance labels: the bag metrics" in out and "ranking_loss" in out
    assert "settings: ORLR-EM as published: 50 iterations, no prior, 1 M-step(s) a pass" in out
    assert main([*args, "--methods", "orlr-em,softmax"]) == 2
    assert "--methods softmax train on instance labels" in capsys.readouterr().err
    assert main([*args, "--methods", "orlr-em", "--protocol", "both"]) == 2
    assert "--protocol both scores instance labels" in capsys.readouterr().err
    namespace = argparse.Namespace(protocol="inductive", methods=",".join(DEFAULT_METHODS), seed=0)
    models = _bag_labelled(namespace)
    assert "SoftmaxRegression" not in models and "MajorityClass" not in models and "SIM" in models
    assert "without softmax, majority" in capsys.readouterr().err


CTRL_C_CHILD = """
import signal
# Python's Ctrl-C handler, as in a terminal, even where the test runner was started with SIGINT
# ignored (a background job), which a child would inherit.
signal.signal(signal.SIGINT, signal.default_int_handler)
import jax, jax.numpy as jnp
from jax import lax
from orlr_ppl.cli import commands
from orlr_ppl.cli.main import run

def endless_fit(args):
    # A compiled loop that runs for hours, as a long EM fit's one while_loop does.
    x = jnp.full((300, 300), 1e-3)
    body = lambda c: (jnp.tanh(c[0] @ c[0]), c[1] + 1)
    out = jax.jit(lambda x: lax.while_loop(lambda c: c[1] < 10**9, body, (x, 0)))(x)
    print("looping", flush=True)
    out[0].block_until_ready()

commands.fit = endless_fit
run()
"""


@pytest.mark.skipif(sys.platform == "win32", reason="SIGINT to a child process")
def test_ctrl_c_in_a_compiled_loop_exits_at_once_with_one_line(tmp_path):
    """Ctrl-C stops the wait, not XLA's loop: the command must leave without waiting for the loop to
    end (hours here) or crashing as the interpreter tears it down."""
    import signal

    script = tmp_path / "child.py"
    script.write_text(CTRL_C_CHILD)
    child = subprocess.Popen(
        [sys.executable, str(script), "fit", "--data", "x.npz"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert child.stdout.readline().strip() == "looping"
        child.send_signal(signal.SIGINT)
        out, err = child.communicate(timeout=120)  # without the fix: still looping, for hours
    finally:
        child.kill()
    assert child.returncode == 130, err
    assert err.strip() == "orlr-ppl fit: interrupted"
