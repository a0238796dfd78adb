"""Linearly dependent features: found, named, dropped without changing the span, and warned of."""

from __future__ import annotations

import warnings

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from orlr_ppl import MAP, ORLR, SVI
from orlr_ppl.data import MIMLData
from orlr_ppl.data.collinearity import CollinearityWarning, describe_dependencies, linear_dependencies


def _span_residual(full: np.ndarray, kept: np.ndarray) -> float:
    """Largest residual of ``full``'s columns regressed on ``[1, kept]``, relative to their sd (or 1)."""
    design = np.column_stack([np.ones(len(kept)), kept])
    coef = np.linalg.lstsq(design, full, rcond=None)[0]
    return float(np.max(np.std(full - design @ coef, axis=0) / np.maximum(full.std(axis=0), 1.0)))


@settings(max_examples=40, deadline=None)
@given(
    seed=st.integers(0, 2**31 - 1),
    n_free=st.integers(1, 6),
    n_dep=st.integers(0, 3),
    constant=st.booleans(),
)
def test_dependent_columns_are_found_and_dropping_them_keeps_the_span(seed, n_free, n_dep, constant):
    rng = np.random.default_rng(seed)
    free = rng.normal(size=(60, n_free)) * rng.uniform(0.1, 10.0, size=n_free)
    dep = free @ rng.normal(size=(n_free, n_dep)) + rng.normal(size=n_dep)  # affine combinations
    cols = [free, dep] + ([np.full((60, 1), 3.0)] if constant else [])
    x = np.column_stack(cols)
    perm = rng.permutation(x.shape[1])
    x = x[:, perm]
    names = [f"f{j}" for j in range(x.shape[1])]
    found = linear_dependencies(x, names)
    assert found.rank == n_free
    assert len(found.redundant) == n_dep + constant
    kept = [j for j, s in enumerate(names) if s not in found.redundant]
    assert linear_dependencies(x[:, kept]).redundant == []
    assert _span_residual(x, x[:, kept]) < 1e-8
    for group in found.groups:  # each dropped feature is explained by kept ones
        assert group[0] in found.redundant and not set(group[1:]) & set(found.redundant)


def test_groups_name_the_combination_and_near_dependence_counts():
    rng = np.random.default_rng(0)
    a, b, c = rng.normal(size=(3, 200))
    x = np.column_stack([a, b, c, 2 * a - b + 1e-7 * rng.normal(size=200), np.ones(200)])
    found = linear_dependencies(x, ["a", "b", "c", "d", "k"])
    assert found.rank == 3 and sorted(found.redundant) == ["d", "k"]
    groups = {g[0]: g[1:] for g in found.groups}
    assert groups["k"] == []  # constant: dependent on the intercept alone
    d_group = next(g for g in found.groups if g[0] != "k")
    assert "c" not in d_group and len(d_group) == 3  # d, a and b in some order: c is not involved
    text = describe_dependencies(found, n_outputs=4)
    assert "is constant" in text and "6 weight directions" in text and "drop_features" in text
    assert text.endswith(
        "The convergence checks leave the constant features' weights out: their draws are the prior's"
    )
    no_constant = describe_dependencies(linear_dependencies(x[:, :4]), n_outputs=4)
    assert "is constant" not in no_constant and "convergence checks" not in no_constant
    # Noise at 1e-2 of the scale is a real (if weak) direction, not a dependency.
    x[:, 3] = 2 * a - b + 1e-2 * rng.normal(size=200)
    assert linear_dependencies(x[:, :4]).redundant == []


def test_linear_dependencies_rejects_bad_shapes():
    with pytest.raises(ValueError, match="2-d"):
        linear_dependencies(np.zeros(5))
    with pytest.raises(ValueError, match="2 feature names for 3 features"):
        linear_dependencies(np.zeros((4, 3)), ["a", "b"])


def _dependent_data() -> MIMLData:
    rng = np.random.default_rng(1)
    bags, label_sets = [], []
    centres = np.array([[2.0, 0.0], [-1.0, 1.7], [-1.0, -1.7]])
    for _ in range(12):
        y = rng.integers(0, 3, size=2)
        x = centres[y] + 0.5 * rng.normal(size=(2, 2))
        bags.append(np.column_stack([x, x[:, 0] - 2 * x[:, 1]]))  # "sum" depends on the others
        label_sets.append(sorted(set(y.tolist())))
    return MIMLData(bags, label_sets, n_classes=3, feature_names=["u", "v", "sum"])


def test_drop_features_and_its_errors():
    data = _dependent_data()
    assert data.linear_dependencies().rank == 2
    dropped = data.drop_features(data.linear_dependencies().redundant)
    assert dropped.n_features == 2 and dropped.linear_dependencies().redundant == []
    assert dropped.n_bags == data.n_bags and dropped.label_sets == data.label_sets
    with pytest.raises(ValueError, match=r"no feature named \['w'\]"):
        data.drop_features(["w"])
    with pytest.raises(ValueError, match="would leave no feature"):
        data.drop_features(["u", "v", "sum"])


def test_posterior_fits_warn_naming_the_features_and_point_fits_do_not():
    data = _dependent_data()
    with pytest.warns(CollinearityWarning, match="likelihood is flat along 2 weight directions") as rec:
        ORLR(inference=SVI(num_steps=5, num_draws=10), random_state=0).fit(data)
    (redundant,) = data.linear_dependencies().redundant
    assert any(f"'{redundant}'" in str(w.message) for w in rec)
    with warnings.catch_warnings():
        warnings.simplefilter("error", CollinearityWarning)
        ORLR(inference=MAP(max_iter=20)).fit(data)
        ORLR(inference=SVI(num_steps=5, num_draws=10), random_state=0).fit(data.drop_features([redundant]))
