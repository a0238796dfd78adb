"""The notebook runs end to end (reduced size)."""

from __future__ import annotations

import os
from pathlib import Path

import nbformat
import pytest
from nbclient import NotebookClient

NOTEBOOK = Path(__file__).resolve().parents[1] / "notebooks" / "01_map_vs_posterior.ipynb"


@pytest.mark.filterwarnings("ignore")
def test_notebook_executes(monkeypatch, tmp_path):
    monkeypatch.setenv("ORLR_NB_SMALL", "1")
    nb = nbformat.read(NOTEBOOK, as_version=4)
    NotebookClient(
        nb, timeout=600, kernel_name="python3", resources={"metadata": {"path": str(tmp_path)}}
    ).execute()
    outputs = "".join(
        o.get("text", "") for c in nb.cells if c.cell_type == "code" for o in c.get("outputs", [])
    )
    assert "NUTS posterior mean" in outputs and "max R-hat" in outputs
    assert any(o.get("output_type") == "display_data" for c in nb.cells for o in c.get("outputs", []))
    assert not any(o.get("output_type") == "error" for c in nb.cells for o in c.get("outputs", []))
    assert os.environ["ORLR_NB_SMALL"] == "1"
