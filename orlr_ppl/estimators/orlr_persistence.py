"""How a fitted ORLR saves and loads beyond ``_BagClassifier``'s arrays: its fit report and posterior."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from .orlr_fit import read_posterior


class _ORLRPersistence:
    """``save``/``load`` hooks of ``ORLR``: the point fit's scalars in ``metadata.json``, and a
    NUTS/SVI posterior in ``posterior.nc`` (netCDF) beside ``params.npz``."""

    def _fitted_metadata(self) -> dict[str, Any]:
        pruned = {"pruned_bags_": [int(b) for b in getattr(self, "pruned_bags_", [])]}
        if getattr(self, "leak_", None) is not None:
            pruned["leak_"] = float(self.leak_)
        for name in ("prior_scale_", "kernel_gamma_"):  # the values used, "auto" resolved
            if getattr(self, name, None) is not None:
                pruned[name] = float(getattr(self, name))
        if getattr(self, "n_pruned_rows_", 0):
            pruned["n_pruned_rows_"] = int(self.n_pruned_rows_)
        if hasattr(self, "posterior_"):
            heavy = getattr(self, "heavy_tailed_features_", None)
            if heavy is not None:  # the convergence report of the loaded model names them too
                pruned["heavy_tailed_features_"] = {str(f): float(z) for f, z in heavy.items()}
            return pruned
        return {
            **pruned,
            "log_posterior_": float(self.log_posterior_),
            "n_iter_": int(self.n_iter_),
            "converged_": bool(self.converged_),
        }

    def _default_name(self) -> str:
        return f"orlr-{self.method}"

    def _save_extra(self, folder: Path) -> None:
        """NUTS/SVI: write ``posterior.nc`` (netCDF); EM/MAP: remove one left there by an earlier save."""
        nc = folder / "posterior.nc"
        if not hasattr(self, "posterior_"):
            nc.unlink(missing_ok=True)
            return
        tmp = nc.with_name(".posterior.tmp.nc")
        try:
            self.posterior_.to_netcdf(str(tmp))
            tmp.replace(nc)  # as persistence.write_atomically: an interrupted save leaves the old file whole
        finally:
            tmp.unlink(missing_ok=True)

    def _check_loaded(self, param_file: Path) -> None:
        """NUTS/SVI: read ``posterior.nc`` beside ``params.npz``; then check the arrays' shapes."""
        if self.method in ("nuts", "svi"):
            nc = param_file.parent / "posterior.nc"
            if not nc.is_file():
                raise ValueError(f"{nc} is missing: a {self.method} model keeps its posterior there")
            self._set_posterior(read_posterior(nc))
            self._diagnostics = None
        heavy = getattr(self, "heavy_tailed_features_", None)
        if heavy is not None and not (
            isinstance(heavy, dict)
            and all(isinstance(z, (int, float)) and not isinstance(z, bool) for z in heavy.values())
        ):
            raise ValueError(
                f"{param_file.parent / 'metadata.json'}: 'fitted' holds heavy_tailed_features_ {heavy!r}; "
                "expected an object of feature name -> largest |z| (numbers): re-save the model with save()"
            )
        super()._check_loaded(param_file)
