"""Cross-validated comparison of instance annotators on one ``MIMLData``.

Folds are drawn over bags (seeded). In every fold the features are
standardised with statistics of the training bags only, each model is
fitted on the training bags (ORLR and SIM see only their label sets; the
reference models see instance labels), and scored:

* ``inductive``: instance accuracy on the test bags, labels unseen;
* ``transductive``: instance accuracy on the training bags, predicted given
  their label sets (the annotation task proper);

and in both protocols (and alone, for data with no instance labels) the five
bag-level metrics on the test bags, ranking classes by the bag score
``max_i p(y_i = c | x_i)`` and predicting the union of instance labels. Both
accuracies come from the same fits, so protocol "both" costs what one protocol
does.
"""

from __future__ import annotations

import inspect
import time
import warnings
from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace
from typing import Any, NamedTuple

import numpy as np
from sklearn.preprocessing import StandardScaler

from ..data.container import MIMLData
from ..dp.packing import Layout, shared_layout
from ..features import fit_bags, transform_bags
from ..inference.checks.diagnostics import ConvergenceWarning
from . import metrics

PROTOCOLS = ("inductive", "transductive", "both")
ACCURACY = {
    "inductive": ("accuracy_inductive",),
    "transductive": ("accuracy_transductive",),
    "both": ("accuracy_inductive", "accuracy_transductive"),
}
BAG_METRICS = ("hamming_loss", "ranking_loss", "one_error", "coverage", "average_precision")
"""Bag-level metrics on the test bags, reported in every protocol."""


class CVResult(NamedTuple):
    """Per-fold scores of each model.

    Attributes:
        protocol: "inductive", "transductive" or "both": which instance
            accuracies the table shows (both are always computed).
        scores: model name -> metric name -> (n_folds,) fold values
            (``accuracy_inductive``, ``accuracy_transductive``, the bag
            metrics and ``fit_seconds``).
        n_folds, seed: the split.
    """

    protocol: str
    scores: dict[str, dict[str, np.ndarray]]
    n_folds: int
    seed: int

    def summary(self) -> dict[str, dict[str, dict[str, float]]]:
        """model -> metric -> {"mean", "sd"} (sd over folds, ddof=1 as papers report)."""
        return {
            name: {
                k: {"mean": float(np.mean(v)), "sd": float(np.std(v, ddof=1)) if len(v) > 1 else 0.0}
                for k, v in per.items()
            }
            for name, per in self.scores.items()
        }

    def table(self) -> str:
        """A text table: instance accuracy in % (where the data have instance labels), bag metrics as
        fractions, mean ± sd."""
        first = next(iter(self.scores.values()), {})
        shown = tuple(m for m in ACCURACY[self.protocol] if m in first) + BAG_METRICS  # no instance labels
        lines = [f"{'model':<20}" + "".join(f"{m:>22}" for m in shown) + f"{'fit s':>9}"]
        for name, per in self.summary().items():
            cells = []
            for m in shown:
                pct = m.startswith("accuracy")
                scale, digits = (100.0, 1) if pct else (1.0, 3)
                cells.append(f"{per[m]['mean'] * scale:.{digits}f} ± {per[m]['sd'] * scale:.{digits}f}")
            seconds = per["fit_seconds"]["mean"]
            lines.append(f"{name:<20}" + "".join(f"{c:>22}" for c in cells) + f"{seconds:>9.1f}")
        return "\n".join(lines)

    def to_json(self) -> dict[str, Any]:
        return {
            "protocol": self.protocol,
            "n_folds": self.n_folds,
            "seed": self.seed,
            "summary": self.summary(),
            "folds": {n: {k: v.tolist() for k, v in per.items()} for n, per in self.scores.items()},
        }


def fold_scores(model: Any, train: MIMLData, test: MIMLData) -> dict[str, float]:
    """Both instance accuracies (where the data have instance labels) and the bag metrics of one
    fitted model on one fold."""
    scores = model.bag_scores(test)
    accuracies = {}
    if test.instance_labels is not None and train.instance_labels is not None:
        accuracies = {
            "accuracy_inductive": metrics.instance_accuracy(test.instance_labels, model.predict(test)),
            "accuracy_transductive": metrics.instance_accuracy(
                train.instance_labels, model.predict(train, train.label_sets)
            ),
        }
    return {
        **accuracies,
        "hamming_loss": metrics.hamming_loss(test.label_sets, model.predict_bags(test)),
        "ranking_loss": metrics.ranking_loss(test.label_sets, scores),
        "one_error": metrics.one_error(test.label_sets, scores),
        "coverage": metrics.coverage(test.label_sets, scores),
        "average_precision": metrics.average_precision(test.label_sets, scores),
    }


def fold_layout(trains: Sequence[MIMLData]) -> Layout:
    """The packing ``Layout`` that every training fold fits (``dp.packing.shared_layout``).

    ``cross_validate`` gives it to every model whose ``fit`` takes a ``layout`` (ORLR's):
    folds then differ in no bucket (even a label-set size that one fold lacks
    keeps its bucket, empty), so a sampler compiles its chain program once.
    """
    return shared_layout(
        [(np.array([len(b) for b in t.bags]), np.array([len(y) for y in t.label_sets])) for t in trains]
    )


def cross_validate(
    data: MIMLData,
    models: Mapping[str, Callable[[], Any]],
    protocol: str = "inductive",
    n_folds: int = 10,
    seed: int = 0,
    standardize: bool = True,
    on_fold: Callable[[str, int], None] | None = None,
) -> CVResult:
    """Fit and score every model on every fold.

    Args:
        data: the bags; without instance labels the folds are scored by the bag metrics alone.
        models: name -> factory returning an unfitted estimator whose
            ``fit`` takes a ``MIMLData``.
        protocol: "inductive", "transductive" or "both": which accuracies
            the table shows (all are computed, from the same fits).
        n_folds, seed: bag-level K-fold split (``MIMLData.kfold``).
        standardize: standardise features on each fold's training bags.
        on_fold: called as ``on_fold(model_name, fold)`` after each fit
            (progress bars).
    """
    if protocol not in PROTOCOLS:
        raise ValueError(f"protocol={protocol!r}: choose one of {PROTOCOLS}")
    data.check_fittable()
    rows: dict[str, dict[str, list[float]]] = {name: {} for name in models}
    folds = list(data.kfold(n_folds, seed))
    layout = fold_layout([train for train, _ in folds])
    for fold, (train, test) in enumerate(folds):
        if standardize:
            scaler = StandardScaler()  # fitted on the training bags only
            train = replace(train, bags=fit_bags(scaler, train.bags))
            test = replace(test, bags=transform_bags(scaler, test.bags))
        fitted = []
        for name, make in models.items():
            t0 = time.perf_counter()
            with warnings.catch_warnings():
                # The published ORLR-EM protocol (50 iterations, no prior: the maximum likelihood is often
                # at infinity) rarely meets tol, by design; a warning per fold would only bury the table.
                warnings.filterwarnings("ignore", message="EM stopped after", category=ConvergenceWarning)
                model = make()
                # A fit that takes a shared layout (ORLR) packs every fold alike: one compiled program.
                shared = {"layout": layout} if "layout" in inspect.signature(model.fit).parameters else {}
                model = model.fit(train, **shared)
            seconds = time.perf_counter() - t0
            fitted.append(model)
            for k, v in {**fold_scores(model, train, test), "fit_seconds": seconds}.items():
                rows[name].setdefault(k, []).append(float(v))
            if on_fold is not None:
                on_fold(name, fold)
    scores = {name: {k: np.asarray(v) for k, v in per.items()} for name, per in rows.items()}
    return CVResult(protocol, scores, n_folds, seed)
