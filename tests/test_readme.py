"""The README's and the guide's Python examples run, and the README's Quickstart matches CI."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


DOCUMENTS = ["README.md", *sorted(str(p.relative_to(ROOT)) for p in (ROOT / "docs").rglob("*.md"))]


@pytest.mark.parametrize("document", DOCUMENTS)
def test_python_examples_run(document, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # the examples save models under ./models
    blocks = re.findall(r"```python\n(.*?)```", (ROOT / document).read_text(), re.S)
    for block in blocks:
        exec(compile(block, document, "exec"), {})


def test_the_guide_has_examples_and_its_links_resolve():
    """Every page links only to files that exist, and the README's and the guide's examples are many."""
    count = 0
    for document in DOCUMENTS:
        text = (ROOT / document).read_text()
        count += len(re.findall(r"```python\n", text))
        for target in re.findall(r"\]\(([^)#]+?)(?:#[^)]*)?\)", text):
            if "://" not in target:
                assert (ROOT / document).parent.joinpath(target).exists(), f"{document}: {target}"
    assert count >= 7 and len(DOCUMENTS) >= 9


def test_quickstart_has_two_commands_and_ci_runs_the_test_one():
    text = (ROOT / "README.md").read_text()
    quick = text.split("## Quickstart", 1)[1].split("\n## ", 1)[0]
    commands = re.findall(r"```bash\n(.*?)\n```", quick, re.S)
    assert len(commands) == 2
    assert "orlr-ppl demo" in commands[0] and "pytest" in commands[1]
    # CI runs the test command's steps in order (it starts stage 2's install before ``pytest``).
    ci = (ROOT / ".ci" / "run").read_text()
    at = 0
    for step in commands[1].split(" && "):
        at = ci.index(step, at) + len(step)  # ValueError: CI lacks this step, or runs it out of order
