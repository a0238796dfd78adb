from __future__ import annotations

import subprocess
import sys

import pytest

from orlr_ppl.cli import main


def test_help_lists_subcommands():
    out = subprocess.run([sys.executable, "-m", "orlr_ppl.cli", "--help"], capture_output=True, text=True)
    assert out.returncode == 0 and "demo" in out.stdout


def test_demo_runs_small(capsys):
    assert main(["demo", "--n-bags", "60", "--quiet"]) == 0
    out = capsys.readouterr().out
    line = [x for x in out.splitlines() if x.startswith("instance accuracy, inductive")][0]
    assert float(line.rsplit(" ", 1)[1]) > 0.5


def test_unknown_subcommand_fails():
    with pytest.raises(SystemExit):
        main(["nope"])
