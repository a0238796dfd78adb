"""Letter Frost: the shipped word list, the loader's draws, and its file checks."""

from __future__ import annotations

import re
import warnings
from collections import Counter
from pathlib import Path

import jax
import numpy as np
import pytest

from orlr_ppl import EM, NUTS
from orlr_ppl.data._frost_words import ROAD_NOT_TAKEN
from orlr_ppl.data.datasets import load_letter_frost, read_uci_letters

DATA = Path(__file__).resolve().parents[3] / "shared" / "data"
UCI, POEM = DATA / "letter-recognition.data", DATA / "road_not_taken.txt"


def test_shipped_words_follow_the_recipe_on_the_poem():
    words = [re.sub(r"[^a-z]", "", w) for w in POEM.read_text().lower().split()]
    words = [w for w in words if w]
    assert tuple(words) == ROAD_NOT_TAKEN
    letters = "".join(ROAD_NOT_TAKEN)
    assert (len(ROAD_NOT_TAKEN), len(letters), len(set(letters))) == (144, 565, 24)


def test_bags_are_words_with_letters_drawn_without_replacement():
    d = load_letter_frost(UCI, seed=0)
    assert (d.n_bags, d.n_instances, d.n_features, d.n_classes) == (144, 565, 16, 24)
    assert "x" not in d.class_names and "z" not in d.class_names and d.class_names[0] == "a"
    assert d.validate() == []
    assert d.bag_ids[0] == "0:two" and d.bag_ids[-1] == "143:difference"
    for word, labels, inst in zip(ROAD_NOT_TAKEN, d.label_sets, d.instance_labels):
        assert "".join(d.class_names[k] for k in inst) == word
        assert labels == sorted({d.class_names.index(a) for a in word})
    letters, feats = read_uci_letters(UCI)
    drawn = np.concatenate(d.bags).astype(np.int64)
    inst = np.concatenate(d.instance_labels)
    for k, name in enumerate(d.class_names):
        pool = Counter(map(tuple, feats[letters == name.upper()]))
        used = Counter(map(tuple, drawn[inst == k]))
        # Each drawn row is a UCI example of that letter, used no more often than the UCI file has it.
        assert all(pool[row] >= n for row, n in used.items()), name
    again = load_letter_frost(UCI, seed=0)
    other = load_letter_frost(UCI, seed=1)
    np.testing.assert_array_equal(np.concatenate(again.bags), np.concatenate(d.bags))
    assert not np.array_equal(np.concatenate(other.bags), np.concatenate(d.bags))
    assert other.label_sets == d.label_sets


def test_headerless_uci_file_is_accepted(tmp_path):
    lines = UCI.read_text().splitlines()
    plain = tmp_path / "letter-recognition.data"
    plain.write_text("\n".join(lines[1:]) + "\n")
    a, b = load_letter_frost(plain, seed=3), load_letter_frost(UCI, seed=3)
    np.testing.assert_array_equal(np.concatenate(a.bags), np.concatenate(b.bags))


@pytest.mark.parametrize(
    ("edit", "match"),
    [
        (lambda lines: ["Letter,a,b"] + lines[1:], r"line 1: header 'Letter,a,b'"),
        (lambda lines: lines[:5000], r"4999 data rows, expected the UCI file's 20000"),
        (lambda lines: lines[:3] + ["T,1,2"] + lines[4:], r"line 4: expected a capital letter and 16"),
        (lambda lines: lines[:7] + ["T" + ",x" * 16] + lines[8:], r"line 8: non-integer feature"),
    ],
)
def test_wrong_uci_file_is_named_with_line(tmp_path, edit, match):
    bad = tmp_path / "letters.data"
    bad.write_text("\n".join(edit(UCI.read_text().splitlines())) + "\n")
    with pytest.raises(ValueError, match=rf"letters\.data.*{match}" if "line" in match else match):
        load_letter_frost(bad)


def test_missing_uci_file_says_where_to_get_it(tmp_path):
    with pytest.raises(ValueError, match=r"no such file.*UCI Letter Recognition.*pass its path"):
        load_letter_frost(tmp_path / "nope.data")


def test_cross_validation_reuses_compiled_em_across_folds():
    """Point fits pad to canonical shapes; cross-validation keeps their programs between folds."""
    from orlr_ppl.data.datasets import make_miml_digits
    from orlr_ppl.estimators import ORLR
    from orlr_ppl.evaluation.cross_validation import cross_validate
    from orlr_ppl.inference.point import em

    data = make_miml_digits(60, seed=0, max_size=4)
    model = {"EM": lambda: ORLR(inference=EM(max_iter=3, tol=0.0))}
    cross_validate(data, model, "inductive", n_folds=2, seed=0)
    before = em._em._cache_size()
    assert before >= 1  # not cleared after the folds
    cross_validate(data, model, "inductive", n_folds=2, seed=0)  # the same folds: nothing new
    assert em._em._cache_size() == before


def test_a_sampler_on_canonical_shapes_keeps_its_program_across_folds():
    """In a cross-validation NUTS packs every fold into the one layout ``cross_validate`` gives it, so
    the folds share one chain program (a NUTS fit outside one packs tight)."""
    from orlr_ppl.data.datasets import make_miml_digits
    from orlr_ppl.estimators import ORLR
    from orlr_ppl.evaluation.cross_validation import cross_validate
    from orlr_ppl.inference.posterior import nuts

    # Bags of at most 4 digits: label sets of up to 4 classes keep every program small (the subset
    # DP's 2**K states, one bucket per label-set size); the two folds still pack to different layouts.
    data = make_miml_digits(40, max_size=4, seed=0)
    settings = NUTS(num_warmup=10, num_samples=10, num_chains=1, init="zeros", max_num_samples=0)
    model = {"NUTS": lambda: ORLR(inference=settings)}

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # 10 draws converge nowhere: not what this is about
        jax.clear_caches()
        cross_validate(data, model, "inductive", n_folds=2, seed=0)
        assert nuts._advance_one._cache_size() == 1  # both folds ran one program
        res = cross_validate(data, model, "inductive", n_folds=2, seed=0)
        assert nuts._advance_one._cache_size() == 1  # the same folds again: nothing new
        tight = ORLR(inference=settings).fit(data)  # outside a cross-validation: packed tight
    assert tight.canonical_shapes_ is False
    assert np.all(res.scores["NUTS"]["accuracy_inductive"] > 0.3)  # padding bags cost no accuracy
