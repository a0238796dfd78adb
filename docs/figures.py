"""The documentation's figures, from the models ``orlr-ppl demo`` saves.

    orlr-ppl demo --out models/demo && python docs/figures.py models/demo

writes ``docs/img/demo_reliability.png``: the demo's MAP, Laplace and NUTS predictions on its 100
held-out bags as a reliability diagram, each model's proper scores and ECE in its legend.
"""

from __future__ import annotations

import sys
from pathlib import Path

import matplotlib

matplotlib.use("Agg")

from orlr_ppl import ORLR, datasets, plots  # noqa: E402

IMG = Path(__file__).resolve().parent / "img"
MODELS = {"map": "MAP", "laplace": "Laplace", "nuts": "NUTS"}


def main(folder: str) -> None:
    models = {label: ORLR.load(Path(folder) / name) for name, label in MODELS.items()}
    # The demo's held-out bags (``orlr-ppl demo``'s defaults), without the pixels its fit left out.
    test = datasets.make_miml_digits(100, max_size=4, seed=1, split="test")
    kept = next(iter(models.values())).feature_names_
    test = test.drop_features([f for f in test.feature_names if f not in kept])
    proba = {label: model.predict_proba(test) for label, model in models.items()}
    diagram = plots.reliability_diagram(test.instance_labels, proba)
    diagram.ax.figure.savefig(IMG / "demo_reliability.png", dpi=110, bbox_inches="tight")
    print(diagram.caption)


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "models/demo")
