"""Stopping reports of the point-estimate optimisers (EM and MAP).

An EM or MAP fit has no posterior to check: what can be reported is whether
the optimiser met its tolerance within ``max_iter`` iterations.
``optimizer_diagnostics`` turns the fit's stopping state into a
``PointDiagnostics`` (``ORLR.diagnostics()`` for ``method="em"|"map"``) whose
``problems`` say what to change when it did not converge.

Kept apart from ``diagnostics`` (the NUTS/SVI checks, which need ArviZ) so
that a point fit's report needs neither ArviZ nor xarray; ``diagnostics``
re-exports these names and imports ``count_noun`` from here, never the other
way round.
"""

from __future__ import annotations

from typing import NamedTuple


def count_noun(n: int, noun: str) -> str:
    """``"1 iteration"``, ``"3 iterations"``: ``n`` and the noun, plural unless ``n == 1``."""
    return f"{n} {noun}" + ("" if n == 1 else "s")


OPTIMIZERS = {"em": "EM", "map": "MAP (L-BFGS)"}


class PointDiagnostics(NamedTuple):
    """Stopping report of an EM or MAP fit (``ORLR.diagnostics()`` for ``method="em"|"map"``).

    Attributes:
        method: "em" or "map".
        converged: the relative change of the log posterior fell below ``tol``
            (EM), or L-BFGS met its tolerances (MAP).
        n_iter: iterations run; max_iter, tol: the settings.
        relative_change: ``|lp_T - lp_{T-1}| / max(|lp_{T-1}|, 1)`` at the last
            EM iteration; None for MAP, or an EM model loaded from disk (the
            history is not saved).
        problems: one sentence when not converged, else empty (also for
            stochastic EM, whose fixed budget is its setting, not a failure).
        bag_fraction: stochastic EM's fraction of bags per iteration; None
            for EM on every bag, and for MAP.
    """

    method: str
    converged: bool
    n_iter: int
    max_iter: int
    tol: float
    relative_change: float | None
    problems: list[str]
    bag_fraction: float | None = None

    def summary_lines(self) -> list[str]:
        """One line: iterations, final relative change and the verdict."""
        iterations = count_noun(self.n_iter, "iteration")
        if self.bag_fraction is not None:
            return [
                f"stochastic EM ({self.bag_fraction:g} of the bags per iteration): {iterations} "
                f"(max_iter={self.max_iter}), a fixed budget with no stopping test"
            ]
        change = "" if self.relative_change is None else f", final relative change {self.relative_change:.2g}"
        verdict = "converged" if self.converged else "NOT converged"
        return [f"{OPTIMIZERS[self.method]}: {iterations} (max_iter={self.max_iter}){change}; {verdict}"]

    def summary(self) -> str:
        return "\n".join(self.summary_lines())

    def __str__(self) -> str:
        """What ``print`` shows: the summary, then the problem in full."""
        return "\n".join([*self.summary_lines(), *(f"- {p}" for p in self.problems)])


def optimizer_diagnostics(
    method: str,
    converged: bool,
    n_iter: int,
    max_iter: int,
    tol: float,
    relative_change: float | None = None,
    bag_fraction: float | None = None,
) -> PointDiagnostics:
    """``PointDiagnostics`` with the problem sentence of an EM/MAP fit that did not converge.

    ``bag_fraction`` (stochastic EM) reports a fixed budget instead: no problem.
    """
    if method not in OPTIMIZERS:
        raise ValueError(f"method={method!r}: point diagnostics are for {tuple(OPTIMIZERS)}")
    problems = []
    if not converged and bag_fraction is None:
        iterations = count_noun(n_iter, "iteration")
        problem = f"{OPTIMIZERS[method]} stopped after {iterations} without meeting tol={tol:g}"
        if n_iter < max_iter:
            # L-BFGS can stop early when its line search fails (e.g. float32 round-off near the optimum).
            problem += f" (its line search failed before max_iter={max_iter}); try float64 or a prior_scale"
        else:
            problem += "; raise max_iter"
        problems.append(problem)
    settings = (int(n_iter), int(max_iter), float(tol))
    return PointDiagnostics(method, bool(converged), *settings, relative_change, problems, bag_fraction)
