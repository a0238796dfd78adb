"""Figures: reliability diagrams, class-probability intervals, rank plots.

The public names of ``orlr_ppl.evaluation.plots``, as a module of its own.
"""

from .evaluation.plots import (  # noqa: F401
    ProbaIntervals,
    ReliabilityDiagram,
    interval_plot,
    proba_intervals,
    rank_plots,
    reliability_diagram,
    reliability_table,
)

__all__ = [
    "ProbaIntervals",
    "ReliabilityDiagram",
    "interval_plot",
    "proba_intervals",
    "rank_plots",
    "reliability_diagram",
    "reliability_table",
]
