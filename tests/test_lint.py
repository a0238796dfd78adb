"""The code passes the project's own lint and format rules (``[tool.ruff]`` in pyproject.toml).

CI runs only the test command, so without this a long line or an unused import lands unseen, as
two did (a 139-character docstring line; an unused import in notebook 01). ruff is pinned to one
minor version in the dev extra, because its format style changes between minor versions.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
# Markdown is left out: README's code blocks align their comments by hand.
CHECKED = ["orlr_ppl", "tests", "benchmarks", "reproduction", "notebooks", "docs/hooks.py", "docs/figures.py"]


@pytest.mark.parametrize("args", [("check",), ("format", "--check")], ids=["check", "format"])
def test_ruff_is_clean(args):
    command = ["ruff", *args, *CHECKED]
    result = subprocess.run([sys.executable, "-m", *command], cwd=ROOT, capture_output=True, text=True)
    assert result.returncode == 0, f"{' '.join(command)}:\n{result.stdout}{result.stderr}"
