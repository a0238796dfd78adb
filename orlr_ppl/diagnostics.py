"""Can the posterior be trusted? NUTS, SVI and Laplace checks, and EM/MAP stopping reports.

The public names of ``orlr_ppl.inference.checks.diagnostics``, as a module of its own.
"""

from .inference.checks.diagnostics import (  # noqa: F401
    BFMI_MIN,
    ESS_MIN,
    INTERPRETABLE,
    MAX_DIVERGENT,
    PARETO_K_MAX,
    RHAT_MAX,
    ConvergenceWarning,
    Diagnostics,
    PointDiagnostics,
    chain_means,
    convergence_problems,
    convergence_table,
    diagnose,
    divergent_draw_ranks,
    failing_parameters,
    mixing_converged,
    next_step,
    optimizer_diagnostics,
    sampler_summary,
    warn_if_unconverged,
    warning_message,
)

__all__ = [
    "BFMI_MIN",
    "ConvergenceWarning",
    "Diagnostics",
    "ESS_MIN",
    "INTERPRETABLE",
    "MAX_DIVERGENT",
    "PARETO_K_MAX",
    "PointDiagnostics",
    "RHAT_MAX",
    "chain_means",
    "convergence_problems",
    "convergence_table",
    "diagnose",
    "divergent_draw_ranks",
    "failing_parameters",
    "mixing_converged",
    "next_step",
    "optimizer_diagnostics",
    "sampler_summary",
    "warn_if_unconverged",
    "warning_message",
]
