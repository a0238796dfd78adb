"""The published HJA birdsong files, read unchanged, and the paper's two versions of them.

The files are not in the repository: they are read from ``../shared/data/hja``
(beside the project root); without that folder these tests are skipped.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

import orlr_ppl as op
from orlr_ppl import EM, metrics
from orlr_ppl.data.datasets import load_hja
from orlr_ppl.data.hja import HJA_FILES, HJA_UNION_CHANGED
from orlr_ppl.data.io import read_bag_csv

HJA = Path(__file__).resolve().parents[3] / "shared" / "data" / "hja"


@pytest.fixture(scope="module")
def folder() -> Path:
    if not all((HJA / name).is_file() for name in HJA_FILES.values()):
        pytest.skip(f"the published HJA birdsong files are not in {HJA}")
    return HJA


@pytest.fixture(scope="module")
def published(folder):
    return read_bag_csv(
        folder / HJA_FILES["features"],
        folder / HJA_FILES["bag_labels"],
        folder / HJA_FILES["instance_labels"],
    )


def test_the_published_files_read_unchanged(published, folder):
    d = published
    assert (d.n_bags, d.n_instances, d.n_features, d.n_classes) == (548, 10_232, 38, 13)
    assert d.bag_ids[:3] == ["1", "2", "3"] and d.bag_ids[-1] == "548"
    assert d.feature_names == [f"x{j}" for j in range(38)]  # "bag_id, [segment features]" names none
    # Species ids 1..13 are classes 0..12; the ids and the names file's names are kept.
    assert d.class_ids == list(range(1, 14))
    assert d.class_names[0] == "BRCR - Brown Creeper" and d.class_names[-1] == "WETA - Western Tanager"
    assert d.label_sets[0] == [0, 2]  # the first row: "1,1,3"
    assert d.bags[0][0, 0] == 0.965614 and d.bags[0][1, 37] == 0.068783
    inst = np.concatenate(d.instance_labels)
    assert int(np.sum(inst == -1)) == 5_234 and inst.max() == 12
    assert np.bincount(inst[inst >= 0]).tolist()[0] == 602  # species 1's segments
    # The names file is the one beside the bag labels, found by name; without it the ids are the names.
    named = read_bag_csv(
        folder / HJA_FILES["features"],
        folder / HJA_FILES["bag_labels"],
        class_names=folder / HJA_FILES["class_names"],
    )
    assert named.class_names == d.class_names and named.label_sets == d.label_sets
    plain = read_bag_csv(folder / HJA_FILES["features"], folder / HJA_FILES["bag_labels"], class_names=False)
    assert plain.class_names == [str(c) for c in range(1, 14)] and plain.label_sets == d.label_sets


def test_load_hja_counts_of_the_paper(folder):
    labelled = load_hja(folder, "original", "labelled")
    assert (labelled.n_bags, labelled.n_instances) == (548, 4_998)
    assert all(len(x) >= 1 for x in labelled.bags)
    assert not any((y == -1).any() for y in labelled.instance_labels)
    every = load_hja(folder, "original", "all")
    assert (every.n_bags, every.n_instances) == (548, 10_232)
    assert sum(int(np.sum(y == -1)) for y in every.instance_labels) == 5_234
    every.check_fittable()  # as published: no bag has likelihood zero
    assert op.datasets.load_hja is load_hja  # reached through the package's lazy modules


def test_union_differs_from_the_published_sets_in_62_bags(folder):
    original = load_hja(folder, "original", "labelled")
    union = load_hja(folder, "union", "labelled")
    assert union.bag_ids == original.bag_ids and union.class_names == original.class_names
    changed = [b for b, (a, u) in enumerate(zip(original.label_sets, union.label_sets)) if a != u]
    assert len(changed) == HJA_UNION_CHANGED == 62
    # In each, the published set is larger than the union of its labelled segments' species.
    assert all(set(union.label_sets[b]) < set(original.label_sets[b]) for b in changed)
    assert np.mean([len(s) for s in original.label_sets]) == pytest.approx(2.14, abs=0.005)
    assert np.mean([len(s) for s in union.label_sets]) == pytest.approx(2.02, abs=0.005)
    # The union version breaks nothing; the published one, with labelled segments only, those 62.
    assert union.validate() == [] and load_hja(folder, "union", "all").validate() == []
    assert sorted({p.index for p in original.validate()}) == changed
    assert {p.kind for p in original.validate()} == {"label_without_instance", "zero_likelihood"}
    # Recording 219 keeps 2 labelled segments for its 3 species: impossible under the union model,
    # the one bag fitting refuses (the rest only disagree with the evaluation-only instance labels).
    assert [original.bag_ids[b] for b in original.impossible_bags()] == ["219"]
    clean, dropped = original.drop_impossible()
    assert clean.n_bags == 547 and dropped == original.impossible_bags()
    clean.check_fittable()
    # With every segment, an unlabelled one may carry a missing species: 5 bags have too few.
    assert load_hja(folder, "original", "all").summary().n_bags_with_problems == 5


def test_summary_and_metrics_of_every_segment(folder):
    every = load_hja(folder, "union", "all")
    s = every.summary()
    assert s.n_unlabelled_instances == 5_234 and s.n_bags_with_problems == 0
    assert sum(s.label_set_sizes.values()) == 548 and s.class_ids == list(range(1, 14))
    assert "   1  BRCR - Brown Creeper" in str(s)
    # Metrics score the 4,998 labelled segments only: the truth itself, -1 replaced, is exact.
    guess = [np.where(y == -1, 0, y) for y in every.instance_labels]
    assert metrics.instance_accuracy(every.instance_labels, guess) == 1.0
    wrong = [np.where(y == -1, 0, (y + 1) % 13) for y in every.instance_labels]
    assert metrics.instance_accuracy(every.instance_labels, wrong) == 0.0


@pytest.mark.filterwarnings(r"ignore:EM stopped")  # 20 iterations suffice to fit the leak here
def test_mlsp_style_arff_with_an_impossible_bag_is_fitted_whole_with_a_leak(folder, tmp_path):
    # The published labels written as a MIML ARFF (the MLSP-2013 layout): recording 219 names 3
    # species for 2 labelled segments, so the union model refuses it and a leak fits it.
    data = load_hja(folder, "original", "labelled")
    pick = np.r_[0:40, data.bag_ids.index("219")]
    assert op.io.write_miml_arff(data.subset(pick), tmp_path / "birds.arff") == sum(
        len(data.bags[i]) for i in pick
    )
    arff = op.io.read_miml_arff(tmp_path / "birds.arff", tmp_path / "birds.xml")
    assert arff.class_names == data.class_names and arff.impossible_bags() == [40]
    assert arff.impossible_bags(leak=True) == []
    with pytest.raises(ValueError, match="'219'.*ORLR\\(leak=...\\)"):
        op.ORLR(inference=EM(max_iter=2)).fit(arff)
    model = op.ORLR(inference=EM(max_iter=20), leak="learn").fit(arff)
    assert 0 < model.leak_ < 0.5
    # Transductively the impossible bag gets its two segments explained by two of its 3 species
    # (one leaks): the posterior puts no mass outside the bag's set.
    post = model.predict_proba(arff.subset([40]), arff.subset([40]).label_sets)[0]
    assert post.shape == (2, 13)
    np.testing.assert_allclose(post[:, arff.label_sets[40]].sum(axis=1), 1.0, atol=1e-5)


def test_two_feature_dependencies_are_found_and_named(published):
    # x14-x16 are tied exactly, and the 16 bins x22-x37 sum to a constant up to rounding (singular
    # value 2e-6 of the largest): 36 independent directions among 38 features.
    dep = published.linear_dependencies()
    assert dep.rank == 36 and len(dep.redundant) == 2
    tied, bins = {"x14", "x15", "x16"}, {f"x{j}" for j in range(22, 38)}
    assert sorted(map(set, dep.groups), key=len) == [tied, bins]  # which one of each is dropped: pivoting's
    assert dep.singular_values[-1] < 1e-5 * dep.singular_values[0] < dep.singular_values[-3] * 1e-2
    assert published.drop_features(dep.redundant).linear_dependencies().rank == 36
