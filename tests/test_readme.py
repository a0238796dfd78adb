"""The README's Python examples run, and its Quickstart matches CI."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_readme_python_examples_run(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # the examples save models under ./models
    text = (ROOT / "README.md").read_text()
    blocks = re.findall(r"```python\n(.*?)```", text, re.S)
    assert blocks
    for block in blocks:
        exec(compile(block, "README.md", "exec"), {})


def test_quickstart_has_two_commands_and_ci_runs_the_test_one():
    text = (ROOT / "README.md").read_text()
    quick = text.split("## Quickstart", 1)[1].split("\n## ", 1)[0]
    commands = re.findall(r"```bash\n(.*?)\n```", quick, re.S)
    assert len(commands) == 2
    assert "orlr-ppl demo" in commands[0] and "pytest" in commands[1]
    assert commands[1] in (ROOT / ".ci" / "run").read_text()
