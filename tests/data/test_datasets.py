"""MIML digits: train and test splits draw from disjoint image pools; split="all" is unchanged."""

from __future__ import annotations

import numpy as np
import pytest
from sklearn.datasets import load_digits

from orlr_ppl.data.datasets import DIGITS_TRAIN_FRACTION, make_miml_digits, split_pools


def _rows(ds) -> set[bytes]:
    return {row.tobytes() for bag in ds.bags for row in bag}


def test_train_and_test_draws_share_no_image_whatever_the_seeds():
    train_rows: set[bytes] = set()
    test_rows: set[bytes] = set()
    for seed in range(4):
        train_rows |= _rows(make_miml_digits(100, seed=seed, split="train"))
        test_rows |= _rows(make_miml_digits(100, seed=seed, split="test"))
    assert not train_rows & test_rows
    # The draws are large enough that sharing nothing is not luck: each covers much of its pool.
    assert len(train_rows) > 600 and len(test_rows) > 400


def test_pools_are_a_fixed_stratified_partition_holding_every_digit():
    target = load_digits().target
    pools = split_pools(target)
    assert not np.intersect1d(pools.train, pools.test).size
    np.testing.assert_array_equal(np.sort(np.concatenate(pools)), np.arange(len(target)))
    for pool in pools:
        assert set(target[pool].tolist()) == set(range(10))
    share = np.bincount(target[pools.train], minlength=10) / np.bincount(target, minlength=10)
    np.testing.assert_allclose(share, DIGITS_TRAIN_FRACTION, atol=0.01)
    # Fixed: independent of make_miml_digits' seed, same on every call.
    np.testing.assert_array_equal(split_pools(target).test, pools.test)
    for split in ("train", "test"):
        labels = np.concatenate(make_miml_digits(100, seed=7, split=split).instance_labels)
        assert set(labels.tolist()) == set(range(10))


def test_split_all_keeps_the_original_draws():
    ds = make_miml_digits(3, seed=0)
    assert [y.tolist() for y in ds.instance_labels] == [[5, 3, 3, 9, 9, 5, 9], [5, 0, 1], [3, 2, 3, 5, 5]]
    for a, b in zip(make_miml_digits(20, seed=4).bags, make_miml_digits(20, seed=4, split="all").bags):
        np.testing.assert_array_equal(a, b)


def test_bad_split_arguments_say_what_is_allowed():
    with pytest.raises(ValueError, match="'train', 'test' or 'all'"):
        make_miml_digits(5, split="validation")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match=r"train_fraction must be in \(0, 1\)"):
        split_pools(np.zeros(10, int), train_fraction=1.0)


@pytest.mark.filterwarnings(r"ignore:MAP \(L-BFGS\) stopped")  # 50 iterations learn, not converge
def test_digits_are_one_miml_data_that_orlr_fits():
    from orlr_ppl import MAP, ORLR, MIMLData

    ds = make_miml_digits(40, seed=2, split="train", max_size=4)
    assert isinstance(ds, MIMLData)
    assert (ds.n_bags, ds.n_features, ds.n_classes) == (40, 64, 10)
    assert ds.class_names == [str(c) for c in range(10)] and ds.bag_ids == list(range(40))
    # Each label set is exactly the digits of its bag: no bag breaks the union assumption.
    assert ds.label_sets == [sorted(set(y.tolist())) for y in ds.instance_labels]
    assert ds.validate() == []
    model = ORLR(inference=MAP(max_iter=50)).fit(ds)
    assert model.n_classes_ == 10 and model.class_names_ == ds.class_names
    assert model.score(ds) > 0.5
