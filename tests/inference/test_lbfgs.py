"""The host L-BFGS-B wrapper: SciPy's optimum, with BLAS on one thread while it runs.

Two threaded OpenBLAS pools (numpy's and SciPy's), or SciPy's beside XLA's threads, made
K-SLR fits up to 9x and HJA MAP fits 1.5x slower on a 2-core CPU (BENCHMARKS.md).
"""

from __future__ import annotations

import numpy as np
from scipy.optimize import minimize
from sklearn.pipeline import make_pipeline
from sklearn.preprocessing import StandardScaler
from threadpoolctl import threadpool_info, threadpool_limits

from orlr_ppl import RBFDictionary, SoftmaxRegression
from orlr_ppl.data.datasets import make_miml_digits
from orlr_ppl.estimators import softmax_solver
from orlr_ppl.inference.point import map as map_module
from orlr_ppl.inference.point.lbfgs import minimize_lbfgs
from orlr_ppl.model.numpyro_model import make_model_data


def _blas_threads() -> dict[str, int]:
    return {i["filepath"]: i["num_threads"] for i in threadpool_info() if i["user_api"] == "blas"}


def test_minimize_lbfgs_is_scipys_lbfgs_b_run_with_one_blas_thread() -> None:
    rng = np.random.default_rng(0)
    a = rng.normal(size=(30, 8))
    h, b = a.T @ a + np.eye(8), rng.normal(size=8)
    seen = []

    def quadratic(x: np.ndarray, shift: float) -> tuple[float, np.ndarray]:
        seen.append(_blas_threads())
        return float(0.5 * x @ h @ x - b @ x + shift), h @ x - b

    with threadpool_limits(limits=2, user_api="blas"):
        before = _blas_threads()
        ours = minimize_lbfgs(quadratic, np.zeros(8), (3.0,), max_iter=200, gtol=1e-10, ftol=1e-15)
        assert _blas_threads() == before  # restored
    assert before and seen and all(set(threads.values()) == {1} for threads in seen)
    ref = minimize(
        quadratic, np.zeros(8), args=(3.0,), jac=True, method="L-BFGS-B",
        options={"maxiter": 200, "gtol": 1e-10, "ftol": 1e-15},
    )  # fmt: skip
    np.testing.assert_array_equal(ours.x, ref.x)
    np.testing.assert_allclose(ours.x, np.linalg.solve(h, b), atol=1e-8)
    assert ours.success


def _threads_seen_by(monkeypatch, module, name: str, fit) -> list[dict[str, int]]:
    """BLAS's thread counts at each call of ``module.name`` while ``fit()`` runs under a limit of 2."""
    seen = []
    objective = getattr(module, name)

    def watched(*args):
        seen.append(_blas_threads())
        return objective(*args)

    monkeypatch.setattr(module, name, watched)
    with threadpool_limits(limits=2, user_api="blas"):  # so the test means something on one core
        fit()
    return seen


def test_map_fit_runs_its_objective_with_one_blas_thread(monkeypatch) -> None:
    digits = make_miml_digits(20, seed=3, max_size=3)
    data = make_model_data(digits.bags, digits.label_sets, 10)
    fits = []
    seen = _threads_seen_by(
        monkeypatch,
        map_module,
        "potential_and_grad_on_host",
        lambda: fits.append(map_module.fit_map(data, max_iter=20)),
    )
    assert seen and all(set(threads.values()) == {1} for threads in seen)
    assert np.isfinite(fits[0].log_posterior)


def test_kslr_fit_runs_its_objective_with_one_blas_thread(monkeypatch) -> None:
    rng = np.random.default_rng(0)
    bags = [rng.uniform(-1, 1, size=(3, 2)) for _ in range(20)]
    labels = [(x[:, 0] > 0).astype(int) + (x[:, 1] > 0) for x in bags]
    model = SoftmaxRegression(features=make_pipeline(StandardScaler(), RBFDictionary(gamma=2.0)))
    model.set_params(prior_scale=3.0)
    seen = _threads_seen_by(monkeypatch, softmax_solver, "softmax_objective", lambda: model.fit(bags, labels))
    assert seen and all(set(threads.values()) == {1} for threads in seen)
