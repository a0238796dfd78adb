"""What the divergence sentence of the convergence report adds: where the divergent draws sit, and
what to try next.

``diagnostics.convergence_problems`` appends both to its sentence on divergent transitions. A
divergence count alone says the sampler failed somewhere; the chains it failed in, the parameters
at whose low or high values the divergent draws cluster (a horseshoe scale in its funnel's neck),
and the target acceptance the fit ran at say where and what to change.
"""

from __future__ import annotations

from typing import Any

import pandas as pd

DIVERGENT_Z = 4.0
"""``|z|`` of ``posterior_tables.divergent_draw_ranks`` above which the divergence sentence names a
parameter: divergent draws that far from a random subset of its draws (two-sided p below 1e-4 each,
so among a few hundred scalars chance names one in a few dozen fits)."""
N_DIVERGENT_NAMED = 3
"""Parameters named where the divergent draws sit, furthest first."""


def divergence_remedy(target: float | None) -> str:
    """What to try after divergences, given the fit's target acceptance (None: not recorded)."""
    if target is None:
        return ""
    if target >= 0.99:
        return (
            f"; the fit's target acceptance, {target:.2f}, is already high: reparametrise the model "
            "or change its prior"
        )
    # A higher target makes warmup adapt a smaller step, which follows curvature that a larger
    # step jumps over (the group horseshoe on HJA union diverges at 0.8: REPRODUCTION.md).
    higher = 0.95 if target < 0.95 else 0.99
    return (
        f"; refit with a target acceptance above this fit's {target:.2f} (target_accept, e.g. "
        f"{higher:.2f}), so that warmup adapts smaller steps"
    )


def divergence_places(stats: dict[str, Any], ranks: pd.DataFrame | None) -> str:
    """``"; per chain 0, 31, 0, 0; divergent draws sit at low tau (mean rank 0.04, z -8.1)"``.

    Chains are listed when there are several; parameters when their divergent draws sit
    ``DIVERGENT_Z`` sds or more from a random subset (``posterior_tables.divergent_draw_ranks``), up to
    ``N_DIVERGENT_NAMED``, furthest first.
    """
    out = ""
    per_chain = stats.get("n_divergent_per_chain")
    if per_chain is not None and len(per_chain) > 1:
        out += "; per chain " + ", ".join(str(v) for v in per_chain)
    if ranks is not None and len(ranks):
        far = ranks[ranks["z"].abs() >= DIVERGENT_Z].iloc[:N_DIVERGENT_NAMED]
        if len(far):
            out += "; divergent draws sit at " + ", ".join(
                f"{'low' if row.z < 0 else 'high'} {name} (mean rank {row.mean_rank:.2f}, z {row.z:+.1f})"
                for name, row in far.iterrows()
            )
    return out
