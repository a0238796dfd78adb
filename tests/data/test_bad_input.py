"""Bad input raises a ValueError that names the bag and the fix; nothing is dropped."""

from __future__ import annotations

import numpy as np
import pytest

import orlr_ppl
from orlr_ppl.model.numpyro_model import make_model_data

RNG = np.random.default_rng(0)
GOOD = [RNG.normal(size=(3, 4)), RNG.normal(size=(2, 4))]


@pytest.mark.parametrize(
    ("logits", "label_sets", "match"),
    [
        ([GOOD[0], np.zeros((0, 4))], [[0], [1]], r"bag 1 is empty.*remove it"),
        (GOOD, [[0], []], r"bag 1 has an empty label set"),
        (GOOD, [[0], [1, 4]], r"bag 1 has label\(s\) \[4\] outside \[0, 4\)"),
        (GOOD, [[-1], [1]], r"bag 0 has label\(s\) \[-1\] outside"),
        (GOOD, [[0], [0, 1, 2]], r"bag 1 has 3 labels but only 2 instance\(s\).*exactly zero"),
        (GOOD, [[0], [0.5]], r"bag 1 has non-integer labels"),
        (
            [GOOD[0], np.array([[0.0, np.nan, 1.0, 2.0], [0, 0, 0, 0]])],
            [[0], [1]],
            r"bag 1 has NaN or infinite",
        ),
        ([GOOD[0], np.array([[0.0, np.inf, 1.0, 2.0]])], [[0], [1]], r"bag 1 has NaN or infinite"),
        ([GOOD[0], RNG.normal(size=(2, 3))], [[0], [1]], r"bag 1 has 3 classes, expected 4"),
        (GOOD, [[0]], r"2 bags but 1 label sets"),
        ([GOOD[0], RNG.normal(size=(2, 4, 1))], [[0], [1]], r"logits of bag 1 have shape"),
        (np.zeros((3, 4)), [[0], [1], [2]], r"list of \(n_b, classes\) arrays"),
    ],
)
@pytest.mark.parametrize("fn", [orlr_ppl.bag_log_likelihood, orlr_ppl.instance_posteriors])
def test_bad_input_raises(fn, logits, label_sets, match):
    with pytest.raises(ValueError, match=match):
        fn(logits, label_sets)


def test_label_set_above_cap_names_bag_and_parameter():
    bags = [RNG.normal(size=(5, 6)), RNG.normal(size=(6, 6))]
    with pytest.raises(ValueError, match=r"bag 1 has 4 labels, above max_labels=3.*raise max_labels"):
        orlr_ppl.bag_log_likelihood(bags, [[0, 1], [0, 1, 2, 3]], max_labels=3)
    # The default cap is 16 and a set of 4 is fine under it.
    assert np.all(np.isfinite(orlr_ppl.bag_log_likelihood(bags, [[0, 1], [0, 1, 2, 3]])))


def test_duplicate_labels_are_a_set_not_an_error():
    a = orlr_ppl.bag_log_likelihood(GOOD, [[0, 0, 1], [2]])
    b = orlr_ppl.bag_log_likelihood(GOOD, [[1, 0], [2]])
    np.testing.assert_allclose(a, b)


def test_bad_features_raise_in_model_data():
    bags = [np.ones((2, 3)), np.array([[1.0, np.nan, 0.0], [0.0, 0.0, 0.0]])]
    with pytest.raises(ValueError, match=r"bag 1 has NaN or infinite features in instance\(s\) \[0\]"):
        make_model_data(bags, [[0], [1]], n_classes=3)
    with pytest.raises(ValueError, match=r"bag 1 has 2 features, expected 3"):
        make_model_data([np.ones((2, 3)), np.ones((2, 2))], [[0], [1]], n_classes=3)
    with pytest.raises(ValueError, match=r"bag 0 is empty"):
        make_model_data([np.ones((0, 3)), np.ones((2, 3))], [[0], [1]], n_classes=3)
    with pytest.raises(ValueError, match=r"bag 1 has 3 labels but only 2"):
        make_model_data([np.ones((2, 3)), np.ones((2, 3))], [[0], [0, 1, 2]], n_classes=3)


def test_every_bag_is_kept():
    rng = np.random.default_rng(1)
    bags = [rng.normal(size=(int(rng.integers(1, 9)), 5)) for _ in range(57)]
    sets = [rng.choice(5, int(rng.integers(1, min(len(b), 5) + 1)), replace=False) for b in bags]
    ll = orlr_ppl.bag_log_likelihood(bags, sets)
    post = orlr_ppl.instance_posteriors(bags, sets)
    assert ll.shape == (57,) and np.all(np.isfinite(ll))
    assert [p.shape for p in post] == [b.shape for b in bags]
