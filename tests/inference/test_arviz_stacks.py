"""The posterior under whichever ArviZ is installed: 1.x (``xarray.DataTree``) or 0.2x (``InferenceData``).

ArviZ's own tools work on ``posterior_``; PSIS-LOO of SVI draws is corrected for the guide;
and a model saved under either stack loads under the other (``tests/fixtures/saved_nuts``: one
fit saved under ArviZ 0.23, then loaded and saved again under ArviZ 1.3).
"""

from __future__ import annotations

import warnings
from pathlib import Path

import matplotlib
import numpy as np
import pytest
import xarray as xr

from orlr_ppl import NUTS, ORLR, SVI
from orlr_ppl.inference.checks.diagnostics import ConvergenceWarning
from orlr_ppl.inference.posterior import arviz_compat as azc

matplotlib.use("Agg")
az = azc.az
pytestmark = pytest.mark.arviz

SAVED = Path(__file__).parents[1] / "fixtures" / "saved_nuts"
GROUPS = {"posterior", "sample_stats", "log_likelihood", "observed_data", "posterior_predictive"}


def _clusters(n_bags: int = 20, seed: int = 0):
    rng = np.random.default_rng(seed)
    centres = np.array([[3.0, 0.0], [-1.5, 2.6], [-1.5, -2.6]])
    bags, sets = [], []
    for _ in range(n_bags):
        y = rng.integers(0, 3, size=rng.integers(1, 4))
        bags.append(centres[y] + rng.normal(size=(len(y), 2)))
        sets.append(np.unique(y))
    return bags, sets


def _nuts(prior_scale: float = 1.0) -> ORLR:
    settings = NUTS(num_warmup=100, num_samples=100, num_chains=2, max_num_samples=0, progress_bar=False)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)  # a test-sized run
        return ORLR(inference=settings, prior_scale=prior_scale, random_state=0).fit(*_clusters())


@pytest.fixture(scope="module")
def fits() -> tuple[ORLR, ORLR]:
    return _nuts(1.0), _nuts(0.1)


def test_posterior_has_the_groups_arviz_users_expect(fits):
    posterior = fits[0].posterior_
    assert isinstance(posterior, azc.Posterior)
    assert GROUPS <= set(azc.groups(posterior))
    assert set(posterior.posterior_predictive.data_vars) == {"Y", "n_labels"}
    assert posterior.log_likelihood["Y"].dims == ("chain", "draw", "bag")
    # The posterior group is the model's parameters; the sampler's coordinates sit apart.
    assert set(posterior.posterior.data_vars) == {"W", "beta"}
    assert set(posterior.unconstrained_posterior.data_vars) == {"W_raw", "beta_raw"}
    assert len(az.summary(posterior)) == 2 * 3 + 3  # W (2 features x 3 classes) and beta


def test_arviz_own_tools_read_the_posterior(fits):
    posterior, other = fits[0].posterior_, fits[1].posterior_
    table = az.summary(posterior, var_names=["beta"])
    assert len(table) == 3 and "ess_bulk" in table.columns
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)  # k-hat warnings on 20 bags
        elpd = azc.loo_estimate(posterior)["elpd_loo"]
        assert np.isfinite(elpd) and elpd < 0
        ranked = az.compare({"scale 1": posterior, "scale 0.1": other})
    assert list(ranked.index)[0] in {"scale 1", "scale 0.1"} and len(ranked) == 2
    # The plots under their ArviZ 1.x names, or the 0.2x ones.
    legacy = ("plot_ppc", "plot_rank", "plot_trace")
    plots = ("plot_ppc_dist", "plot_rank", "plot_trace_dist") if azc.ARVIZ_1 else legacy
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)  # "n_labels looks discrete"
        getattr(az, plots[0])(posterior, var_names=["n_labels"])
    for name in plots[1:]:
        getattr(az, name)(posterior, var_names=["beta"])
    matplotlib.pyplot.close("all")


def test_svi_loo_is_corrected_for_the_guide():
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        fit = ORLR(inference=SVI(num_steps=300, num_draws=200, progress_bar=False), random_state=0).fit(
            *_clusters()
        )
        posterior = fit.posterior_
        corrected = azc.loo(posterior)
        without_q = {g: azc.group(posterior, g) for g in ("posterior", "log_likelihood")}
        plain = az.loo(azc.add_groups(azc.from_dict({}), without_q))
        # Had q been the posterior itself (log p - log q constant), the weights would be PSIS-LOO's own.
        stats = azc.group(posterior, "sample_stats")
        exact_q = stats.assign(log_q=stats["lp"] - 3.0)
        as_posterior = azc.loo(azc.add_groups(azc.from_dict({}), {**without_q, "sample_stats": exact_q}))
    value = azc.loo_estimate  # 1.x names elpd_loo "elpd"
    assert value(posterior)["elpd_loo"] == pytest.approx(_elpd(corrected))
    assert _elpd(as_posterior) == pytest.approx(_elpd(plain), rel=1e-6)  # float32 log-likelihoods
    assert _elpd(corrected) != pytest.approx(_elpd(plain), rel=1e-6)
    np.testing.assert_allclose(np.asarray(as_posterior.pareto_k), np.asarray(plain.pareto_k), atol=1e-4)
    if azc.ARVIZ_1:  # what the docs tell 1.x users to call gives the same figure
        direct = az.loo_approximate_posterior(
            posterior, log_p=posterior.sample_stats["lp"], log_q=posterior.sample_stats["log_q"]
        )
        assert _elpd(direct) == pytest.approx(_elpd(corrected), rel=1e-6)


def _elpd(result) -> float:
    return float(result.elpd if azc.ARVIZ_1 else result["elpd_loo"])


@pytest.mark.parametrize("stack", ["arviz0", "arviz1"])
def test_a_model_saved_under_either_arviz_loads_under_this_one(stack):
    model = ORLR.load(SAVED / stack)
    reference = ORLR.load(SAVED / "arviz0")
    bags, sets = _clusters(12)
    for a, b in zip(model.predict_proba(bags, sets), reference.predict_proba(bags, sets)):
        np.testing.assert_allclose(a, b, rtol=1e-12)
    assert GROUPS <= set(azc.groups(model.posterior_))
    assert model.diagnostics().table.index.equals(reference.diagnostics().table.index)
    # Saved with the raw sites in the posterior group (orlr-ppl 0.1), loaded with them apart.
    with xr.open_datatree(SAVED / stack / "posterior.nc", engine="h5netcdf") as tree:
        assert "W_raw" in tree["posterior"].data_vars
    assert set(model.posterior_.posterior.data_vars) == {"W", "beta"}
    assert {"W_raw", "beta_raw"} == set(model.posterior_.unconstrained_posterior.data_vars)
    # The file itself reads with xarray's own DataTree reader and with ArviZ's.
    with xr.open_datatree(SAVED / stack / "posterior.nc", engine="h5netcdf") as tree:
        assert GROUPS <= set(tree.children)
        np.testing.assert_array_equal(tree["posterior"]["W"].values, model.posterior_.posterior["W"].values)
    assert GROUPS <= set(azc.groups(az.from_netcdf(str(SAVED / stack / "posterior.nc"))))
