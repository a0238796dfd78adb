"""MIMLData: constructors, splits, standardiser, union violations; ORLR accepts it."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from orlr_ppl import EM, ORLR, MajorityClass, SoftmaxRegression
from orlr_ppl.data.container import MIMLData
from orlr_ppl.data.datasets import make_miml_digits

X = np.arange(20.0).reshape(10, 2)
IDS = np.array([3, 3, 1, 1, 1, 3, 7, 7, 7, 7])
INST = np.array([0, 0, 1, 0, 1, 0, 2, 2, 2, 2])


def small() -> MIMLData:
    return MIMLData.from_arrays(
        X, {3: ["a"], 1: ["b", "a"], 7: ["c"]}, IDS, class_names=["a", "b", "c"], instance_labels=INST
    )


def test_from_arrays_groups_non_contiguous_bags_in_order_of_appearance():
    d = small()
    assert d.bag_ids == [3, 1, 7]
    np.testing.assert_array_equal(d.bags[0], X[[0, 1, 5]])
    np.testing.assert_array_equal(d.bags[1], X[[2, 3, 4]])
    np.testing.assert_array_equal(d.bags[2], X[6:])
    assert d.label_sets == [[0], [0, 1], [2]]
    assert [y.tolist() for y in d.instance_labels] == [[0, 0, 0], [1, 0, 1], [2, 2, 2, 2]]
    assert (d.n_bags, d.n_instances, d.n_features, d.n_classes) == (3, 10, 2, 3)
    assert d.feature_names == ["x0", "x1"]
    np.testing.assert_array_equal(d.label_matrix(), [[1, 0, 0], [1, 1, 0], [0, 0, 1]])


def test_bag_id_column_and_multi_hot_labels():
    flat = np.column_stack([X[:, :1], IDS, X[:, 1:]])
    d = MIMLData.from_arrays(
        flat, np.array([[1, 0, 0], [1, 1, 0], [0, 0, 1]]), bag_id_column=1, feature_names=["f", "id", "g"]
    )
    assert d.bag_ids == [3, 1, 7] and d.feature_names == ["f", "g"]
    np.testing.assert_array_equal(d.bags[1], X[[2, 3, 4]])
    assert d.label_sets == [[0], [0, 1], [2]]


def test_from_dataframe_mapping_and_label_column_agree():
    df = pd.DataFrame({"rec": IDS, "f1": X[:, 0], "f2": X[:, 1], "y": INST})
    a = MIMLData.from_dataframe(df, "rec", {3: [0], 1: [1, 0], 7: [2]}, instance_label_column="y")
    df["labels"] = [[0] if b == 3 else [0, 1] if b == 1 else [2] for b in IDS]
    b = MIMLData.from_dataframe(df, "rec", "labels", instance_label_column="y")
    for d in (a, b):
        assert d.feature_names == ["f1", "f2"] and d.bag_ids == [3, 1, 7]
        assert d.label_sets == [[0], [0, 1], [2]]
        np.testing.assert_array_equal(d.bags[0], X[[0, 1, 5]])
    df.loc[5, "labels"] = [2]
    with pytest.raises(ValueError, match=r"row 5: bag 3 has labels \[2\].*same on every row"):
        MIMLData.from_dataframe(df, "rec", "labels")
    with pytest.raises(ValueError, match="no column 'bag'"):
        MIMLData.from_dataframe(df, "bag", "labels")


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"bag_labels": {3: [0], 1: [1]}}, r"bag\(s\) \[7\] have instances but no entry"),
        ({"bag_labels": {3: [0], 1: [1], 7: [2], 9: [0]}}, r"names bag\(s\) \[9\] that have no instances"),
        ({"bag_labels": {3: ["a"], 1: ["zz"], 7: ["c"]}, "class_names": ["a", "b", "c"]}, "not among"),
        ({"bag_labels": [[0], [1]]}, "3 bags but 2 rows"),
    ],
)
def test_from_arrays_errors(kwargs, match):
    with pytest.raises(ValueError, match=match):
        MIMLData.from_arrays(X, bag_ids=IDS, **kwargs)


def test_constructor_errors_name_the_bag():
    bad = [np.ones((2, 2)), np.array([[1.0, np.nan]])]
    with pytest.raises(
        ValueError, match=r"bag 1 \(id 'w'\) has NaN or infinite features in instance\(s\) \[0\]"
    ):
        MIMLData(bad, [[0], [1]], bag_ids=["v", "w"])
    with pytest.raises(ValueError, match=r"bag 1 has label 5 outside \[0, 3\)"):
        MIMLData([np.ones((2, 2))] * 2, [[0], [5]], n_classes=3)
    with pytest.raises(ValueError, match=r"bag 0 has 2 instances but instance labels"):
        MIMLData([np.ones((2, 2))], [[0]], instance_labels=[np.array([0])])


def test_validate_reports_every_union_violation_and_drop_is_explicit():
    bags = [np.ones((1, 2)), np.ones((3, 2)), np.ones((2, 2)), np.ones((2, 2)), np.ones((2, 2))]
    sets = [[0, 1], [0, 1], [], [1], [0]]
    inst = [np.array([0]), np.array([0, 0, 0]), np.array([1, 1]), np.array([1, 1]), np.array([0, 2])]
    d = MIMLData(bags, sets, inst, n_classes=3)
    kinds = [(p.index, p.kind) for p in d.validate()]
    assert kinds == [
        (0, "zero_likelihood"),
        (0, "label_without_instance"),
        (1, "label_without_instance"),
        (2, "zero_likelihood"),
        (2, "instance_label_outside"),
        (4, "instance_label_outside"),
    ]
    # Impossible (likelihood zero) are bags 0 and 2; bags 1 and 4 only disagree with their
    # evaluation-only instance labels, which fitting never sees: reported, not refused.
    clean, dropped = d.drop_impossible()
    assert dropped == [0, 2] == d.impossible_bags()
    assert clean.n_bags == 3 and clean.bag_ids == [1, 3, 4]
    assert [(p.index, p.kind) for p in clean.validate()] == [
        (0, "label_without_instance"),
        (2, "instance_label_outside"),
    ]
    assert d.n_bags == 5  # the original is untouched
    with pytest.raises(ValueError, match=r"2 bag\(s\) break the union assumption \(indices \[0, 2\]\)"):
        ORLR().fit(d)
    # Without instance labels only the zero-likelihood bags are visible; the error lists both.
    blind = MIMLData(bags, sets, n_classes=3)
    assert [p.index for p in blind.validate()] == [0, 2]
    with pytest.raises(ValueError, match=r"indices \[0, 2\]"):
        ORLR().fit(blind)
    with pytest.raises(
        ValueError, match=r"2 bags are impossible.*\[0, 2\].*bag 0 has 2 labels.*bag 2 has an empty"
    ):
        ORLR().fit(blind.bags, blind.label_sets)


def test_bags_without_label_sets_are_for_prediction_only():
    bags = [np.ones((2, 2)), np.zeros((3, 2)), np.ones((1, 2))]
    inst = [np.array([0, 4]), np.array([1, 1, 1]), np.array([2])]
    d = MIMLData(bags, None, inst, bag_ids=["p", "q", "r"])
    assert d.label_sets is None and d.n_classes == 5  # from the instance labels: no label sets to go by
    assert repr(d).endswith("with instance labels, without bag label sets)")
    assert d.validate() == [] and d.subset([2, 0]).bag_ids == ["r", "p"]
    assert d.subset([2, 0]).label_sets is None
    with pytest.raises(ValueError, match="no bag label sets"):
        d.label_matrix()
    with pytest.raises(ValueError, match="no bag label sets, and fitting needs one per bag"):
        ORLR().fit(d)
    flat = MIMLData.from_arrays(np.concatenate(bags), None, bag_ids=[5, 5, 6, 6, 6, 7])
    assert flat.label_sets is None and flat.bag_ids == [5, 6, 7] and flat.n_classes == 2


def test_splits_are_seeded_disjoint_and_cover_every_bag():
    ds = make_miml_digits(40, seed=3, max_size=4)
    d = MIMLData(ds.bags, ds.label_sets, ds.instance_labels, n_classes=10)
    tr, te = d.train_test_split(0.25, seed=1)
    tr2, te2 = d.train_test_split(0.25, seed=1)
    assert tr.bag_ids == tr2.bag_ids and te.n_bags == 10
    assert sorted(tr.bag_ids + te.bag_ids) == list(range(40))
    assert d.train_test_split(0.25, seed=2)[1].bag_ids != te.bag_ids
    seen = []
    for train, test in d.kfold(10, seed=0):
        assert not set(train.bag_ids) & set(test.bag_ids) and train.n_bags + test.n_bags == 40
        seen += test.bag_ids
    assert sorted(seen) == list(range(40))
    np.testing.assert_array_equal(te.bags[0], d.bags[te.bag_ids[0]])


def test_the_bag_adapter_fits_on_training_bags_only_and_maps_per_bag():
    from sklearn.preprocessing import StandardScaler

    from orlr_ppl.features import fit_bags, transform_bags

    d = small()
    tr, te = d.subset([0, 1]), d.subset([2])
    scaler = StandardScaler()
    mapped = fit_bags(scaler, tr.bags)
    x = np.concatenate(tr.bags)
    np.testing.assert_allclose(scaler.mean_, x.mean(0))
    assert [len(b) for b in mapped] == [len(b) for b in tr.bags]
    np.testing.assert_allclose(np.concatenate(mapped).std(0), 1.0)
    np.testing.assert_allclose(transform_bags(scaler, te.bags)[0], (te.bags[0] - x.mean(0)) / x.std(0))
    assert transform_bags(None, te.bags)[0] is te.bags[0]  # no map: the bags as they are


def test_estimators_accept_miml_data():
    ds = make_miml_digits(60, seed=0, max_size=4)
    d = MIMLData(ds.bags, ds.label_sets, ds.instance_labels, n_classes=10, class_names=list("0123456789"))
    # One ORLR fit (each fit compiles); that fitting from MIMLData equals fitting from lists is
    # checked on SoftmaxRegression below and for SIM in test_sim.
    a = ORLR(inference=EM(max_iter=5)).fit(d)
    assert a.class_names_ == list("0123456789") and a.training_shape_["n_bags"] == 60
    for got, want in zip(a.predict_proba(d, d.label_sets), a.predict_proba(ds.bags, ds.label_sets)):
        np.testing.assert_array_equal(got, want)
    assert a.score(d) == a.score(ds.bags, ds.instance_labels) > 0.3
    np.testing.assert_array_equal(a.predict_bags(d), a.predict_bags(ds.bags))
    np.testing.assert_array_equal(a.bag_scores(d), a.bag_scores(ds.bags))
    s = SoftmaxRegression().fit(d)
    assert s.feature_names_ == d.feature_names
    np.testing.assert_array_equal(s.coef_, SoftmaxRegression().fit(ds.bags, ds.instance_labels).coef_)
    s.fit(ds.bags, ds.instance_labels)  # refitted from arrays: the MIMLData's names no longer apply
    assert not hasattr(s, "class_names_") and not hasattr(s, "feature_names_")
    assert MajorityClass().fit(d).n_classes_ == 10
    with pytest.raises(ValueError, match="has none"):
        SoftmaxRegression().fit(MIMLData(ds.bags, ds.label_sets))
    with pytest.raises(ValueError, match="not both"):
        ORLR().fit(d, d.label_sets)


def test_the_impossible_bags_error_says_each_reason_once():
    """Eight bags with too many labels and one with none: two reasons, a few ids each, one short line."""
    rng = np.random.default_rng(0)
    bags = [rng.normal(size=(2, 3)) for _ in range(12)]
    sets = [[0, 1, 2]] * 8 + [[]] + [[0]] * 3
    data = MIMLData(bags, sets, n_classes=3, bag_ids=[f"r{i}" for i in range(12)])
    with pytest.raises(ValueError) as err:
        data.check_fittable()
    message = str(err.value)
    assert message.startswith("9 bag(s) break the union assumption (indices [0, 1, 2, 3, 4, 5, 6, 7, 8]; ids")
    assert message.count("exactly zero") == 1 and message.count("novel_class") == 1
    assert "8 with more labels than instances (r0: 3 labels, 2 instance(s); r1:" in message
    assert "and 3 more)" in message and "1 with an empty label set (r8)" in message
    assert len(message) < 700 and "\n" not in message
