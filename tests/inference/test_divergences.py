"""Where divergent draws sit (``divergent_draw_ranks``) and the divergence sentence that names it."""

from __future__ import annotations

import numpy as np
import pytest

from orlr_ppl.inference.checks.diagnostics import DIVERGENT_Z, chain_means, diagnose, divergent_draw_ranks
from orlr_ppl.inference.posterior import arviz_compat as azc

pytestmark = pytest.mark.arviz


def _idata(tau: np.ndarray, diverging: np.ndarray, seed: int = 0) -> azc.Posterior:
    """A (chain, draw) posterior: ``tau``, a constant ``beta`` and noise ``W`` (3, 2) beside it."""
    rng = np.random.default_rng(seed)
    chains, draws = tau.shape
    return azc.from_dict(
        {
            "posterior": {
                "tau": tau,
                "beta": np.zeros((chains, draws, 2)),
                "W": rng.normal(size=(chains, draws, 3, 2)),
            },
            "sample_stats": {"diverging": diverging},
        },
        dims={"W": ["feature", "class"], "beta": ["class"]},
    )


def test_divergences_at_the_neck_name_the_scale_and_its_end() -> None:
    rng = np.random.default_rng(1)
    tau = np.exp(rng.normal(size=(4, 250)))
    diverging = np.zeros((4, 250), bool)
    low = np.argsort(tau[1])[:20]  # chain 1's 20 smallest tau: divergences in the funnel's neck
    diverging[1, low] = True
    diverging[3, np.argsort(tau[3])[:5]] = True
    ranks = divergent_draw_ranks(_idata(tau, diverging))
    assert ranks.index[0] == "tau" and ranks.loc["tau", "z"] < -DIVERGENT_Z
    # Brute force: the mean over the divergent draws of each one's scaled rank among all 1,000.
    flat = tau.ravel()
    u = (np.array([np.sum(flat < v) + 1 for v in flat]) - 0.5) / flat.size
    assert ranks.loc["tau", "mean_rank"] == pytest.approx(u[diverging.ravel()].mean())
    assert (ranks.drop(index="tau")["z"].abs() < DIVERGENT_Z).all()  # noise W: nowhere in particular
    assert (ranks.loc[["beta[0]", "beta[1]"], "z"] == 0).all()  # constant: no ranks to speak of
    assert list(ranks.index[:1]) == ["tau"] and ranks["z"].abs().is_monotonic_decreasing

    diag = diagnose(_idata(tau, diverging))
    assert diag.sampler["n_divergent_per_chain"] == [0, 20, 0, 5]
    sentence = next(p for p in diag.problems if "divergent transition" in p)
    assert "25 divergent transitions (2.5% of 1000 draws)" in sentence
    assert "; per chain 0, 20, 0, 5; divergent draws sit at low tau (mean rank 0.0" in sentence
    assert "W[" not in sentence and diag.divergence_ranks.equals(ranks)
    assert diag.chain_means.equals(chain_means(_idata(tau, diverging)))  # both tables from one read

    high = diverging.copy()
    high[1] = False
    high[1, np.argsort(tau[1])[-20:]] = True
    assert "sit at high tau" in " | ".join(diagnose(_idata(tau, high)).problems)


def test_random_divergences_give_z_of_unit_sd_and_name_nothing() -> None:
    # The variance counts sampling without replacement: with 120 of 200 draws divergent, dropping
    # the finite-population factor would leave z with an sd of 0.63.
    rng = np.random.default_rng(2)
    tau = rng.normal(size=(2, 100))
    zs = []
    for _ in range(400):
        diverging = np.zeros(200, bool)
        diverging[rng.choice(200, 120, replace=False)] = True
        zs.append(divergent_draw_ranks(_idata(tau, diverging.reshape(2, 100))).loc["tau", "z"])
    assert abs(np.mean(zs)) < 0.15 and 0.9 < np.std(zs) < 1.1
    diverging = np.zeros((2, 100), bool)
    diverging[0, rng.choice(100, 10, replace=False)] = True
    sentence = next(p for p in diagnose(_idata(tau, diverging)).problems if "divergent" in p)
    assert "per chain 10, 0" in sentence and "sit at" not in sentence


def test_no_divergences_or_no_sampler_statistics_give_an_empty_table() -> None:
    tau = np.ones((2, 10)) + np.arange(10)
    none = divergent_draw_ranks(_idata(tau, np.zeros((2, 10), bool)))
    assert none.empty and list(none.columns) == ["mean_rank", "z"]
    assert divergent_draw_ranks(_idata(tau, np.ones((2, 10), bool))).empty  # every draw: no contrast
    assert divergent_draw_ranks(azc.from_dict({"posterior": {"tau": tau}})).empty
