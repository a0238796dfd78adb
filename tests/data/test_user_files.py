"""A user's own files and frames: published-style headers, class ids and names, unlabelled instances.

Small synthetic files in the HJA layout (the real files: ``test_hja.py``),
-1 instance labels through the container, union check, metrics and summary,
text feature columns, a truncated ARFF, string labels.
"""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from orlr_ppl import metrics
from orlr_ppl.data.container import MIMLData
from orlr_ppl.data.datasets import hja_version, load_hja, published_figures
from orlr_ppl.data.io import read_bag_csv, read_miml_arff
from orlr_ppl.data.io.bag_csv import read_class_names

FIXTURES = Path(__file__).parents[1] / "fixtures"

FEATURES = "bag_id, [segment features]\n1,0.5,1.5,2\n1,1,2,3\n2,4,5,6\n3,7,8,9\n3,1,1,1\n3,2,2,2\n"
BAG_LABELS = "bag_id, [labels]\n1,1,3\n2,3\n3,1,2,3\n"
INSTANCE_LABELS = "bag_id, instance_label\n1,1\n1,-1\n2,3\n3,-1\n3,2\n3,1\n"
NAMES = (
    "1\tBRCR - Brown Creeper\n2\tWIWR - Winter Wren\n3\tPSFL - Pacific-slope Flycatcher\n4\tRBNU - Nuthatch"
)


def write_set(folder: Path, prefix: str = "birds_", names: str | None = NAMES, **changes: str) -> dict:
    """The four files in the published layout under ``folder``; ``changes`` replaces a part's text."""
    texts = {"features": FEATURES, "bag_labels": BAG_LABELS, "instance_labels": INSTANCE_LABELS}
    if names is not None:
        texts["class_names"] = names
    texts.update(changes)
    paths = {}
    for part, text in texts.items():
        paths[part] = folder / f"{prefix}{part}.txt"
        paths[part].write_text(text)
    return paths


def three(p: dict) -> tuple[Path, Path, Path]:
    """The features, bag-labels and instance-labels paths (the names file is found beside them)."""
    return p["features"], p["bag_labels"], p["instance_labels"]


def error(fragment: str, read, *args, **kwargs) -> str:
    with pytest.raises(ValueError) as info:
        read(*args, **kwargs)
    assert fragment in str(info.value)
    return str(info.value)


# -- read_bag_csv: headers and class ids ---------------------------------------------------


def test_descriptive_header_of_another_width_is_a_header_not_names(tmp_path):
    p = write_set(tmp_path)
    data = read_bag_csv(p["features"], p["bag_labels"], p["instance_labels"])
    assert data.feature_names == ["x0", "x1", "x2"]
    np.testing.assert_array_equal(data.bags[0], [[0.5, 1.5, 2.0], [1.0, 2.0, 3.0]])
    assert data.bag_ids == ["1", "2", "3"]
    # A header as wide as the rows still names the features, with or without a trailing comma.
    for header in ("bag,a,b,c\n", "bag,a,b,c,\n"):
        p["features"].write_text(header + FEATURES.split("\n", 1)[1])
        assert read_bag_csv(p["features"], p["bag_labels"]).feature_names == ["a", "b", "c"]


def test_names_file_beside_the_bag_labels_gives_classes_and_keeps_ids(tmp_path):
    p = write_set(tmp_path)
    data = read_bag_csv(p["features"], p["bag_labels"], p["instance_labels"])
    # Ids 1..4 in ascending order are classes 0..3; class 4 (no bag has it) is still a class.
    assert data.n_classes == 4 and data.class_ids == [1, 2, 3, 4]
    assert data.class_names == [
        "BRCR - Brown Creeper",
        "WIWR - Winter Wren",
        "PSFL - Pacific-slope Flycatcher",
        "RBNU - Nuthatch",
    ]
    assert data.label_sets == [[0, 2], [2], [0, 1, 2]]
    assert [y.tolist() for y in data.instance_labels] == [[0, -1], [2], [-1, 1, 0]]  # -1 kept
    explicit = read_bag_csv(p["features"], p["bag_labels"], class_names=str(p["class_names"]))
    assert explicit.class_names == data.class_names and explicit.label_sets == data.label_sets
    assert read_class_names(p["class_names"])[4] == "RBNU - Nuthatch"


def test_without_names_ids_are_numbered_in_ascending_order(tmp_path):
    p = write_set(tmp_path, names=None)
    data = read_bag_csv(p["features"], p["bag_labels"], p["instance_labels"])
    assert data.class_ids == [1, 2, 3] and data.class_names == ["1", "2", "3"]
    assert data.label_sets == [[0, 2], [2], [0, 1, 2]]
    # class_names=False: the names file beside is not used.
    p = write_set(tmp_path)
    assert read_bag_csv(p["features"], p["bag_labels"], class_names=False).class_names == ["1", "2", "3"]
    # An id only instance labels use is still a class; a gap closes up (ids 0, 2 -> classes 0, 1).
    p = write_set(
        tmp_path,
        "gap_",
        None,
        bag_labels="1,0\n2,2\n3,0,2\n",
        instance_labels="1,0\n1,-1\n2,2\n3,7\n3,0\n3,2\n",
    )
    data = read_bag_csv(p["features"], p["bag_labels"], p["instance_labels"])
    assert data.class_ids == [0, 2, 7] and data.label_sets == [[0], [1], [0, 1]]
    assert [y.tolist() for y in data.instance_labels] == [[0, -1], [1], [2, 0, 1]]
    assert [p.kind for p in data.validate()] == ["instance_label_outside"]
    # With n_classes the ids are the indices themselves: the gap stays.
    same = read_bag_csv(p["features"], p["bag_labels"], n_classes=3)
    assert same.label_sets == [[0], [2], [0, 2]] and same.class_ids == [0, 1, 2]


def test_class_id_errors_name_file_and_line(tmp_path):
    p = write_set(tmp_path, bag_labels="bag_id, [labels]\n1,1,3\n2,5\n3,1\n")
    msg = error("class 5 is not in", read_bag_csv, p["features"], p["bag_labels"])
    assert f"{p['bag_labels']}, line 3: field 2" in msg and str(p["class_names"]) in msg
    p = write_set(tmp_path, instance_labels=INSTANCE_LABELS.replace("3,2\n", "3,9\n"))
    msg = error("class 9 is not in", read_bag_csv, p["features"], p["bag_labels"], p["instance_labels"])
    assert f"{p['instance_labels']}, line 6:" in msg
    p = write_set(tmp_path, instance_labels=INSTANCE_LABELS.replace("3,2\n", "3,-2\n"))
    msg = error("class -2 is negative; use -1 for an unlabelled instance", read_bag_csv, *three(p))
    assert f"{p['instance_labels']}, line 6:" in msg
    p = write_set(tmp_path, bag_labels="bag_id, [labels]\n1,1,3\n2,-1\n3,1\n")
    error(f"{p['bag_labels']}, line 3: field 2: class -1 is negative", read_bag_csv, *three(p))
    p = write_set(tmp_path)
    error("names 4 classes, but n_classes=3", read_bag_csv, p["features"], p["bag_labels"], n_classes=3)
    p = write_set(tmp_path, "plain_", names=None)
    error("class 3 is outside [0, 3) (n_classes)", read_bag_csv, p["features"], p["bag_labels"], n_classes=3)


@pytest.mark.parametrize(
    ("text", "line", "fragment"),
    [
        ("1\tA\n2 B\n", 2, "expected 'id<TAB>name'"),
        ("1\tA\nx\tB\n", 2, "class id 'x' is not an integer"),
        ("1\tA\n1\tB\n", 2, "class id 1 already named on line 1"),
        ("1\tA\n2\tA\n", 2, "name 'A' already used on line 1"),
        ("1\tA\n-1\tB\n", 2, "class id -1 is negative"),
        ("1\t\n", 1, "class 1 has an empty name"),
    ],
)
def test_malformed_names_file_names_its_line(tmp_path, text, line, fragment):
    p = write_set(tmp_path, names=text)
    msg = error(fragment, read_bag_csv, p["features"], p["bag_labels"])
    assert f"{p['class_names']}, line {line}:" in msg


# -- unlabelled instances (-1): container, union check, metrics ---------------------------


def test_minus_one_is_an_unlabelled_instance_other_negatives_are_errors():
    bags = [np.ones((2, 2)), np.ones((3, 2))]
    data = MIMLData(bags, [[0, 1], [1]], [np.array([0, -1]), np.array([-1, -1, 1])], bag_ids=["a", "b"])
    assert data.n_classes == 2 and data.validate() == []
    with pytest.raises(
        ValueError, match=r"bag 1 \(id 'b'\) has instance labels \[-2\] outside \[0, 2\).*-1 for"
    ):
        MIMLData(bags, [[0, 1], [1]], [np.array([0, 1]), np.array([-2, 1, 1])], bag_ids=["a", "b"])
    flat = MIMLData.from_arrays(
        np.ones((5, 2)), {"a": ["x", "y"], "b": ["y"]}, ["a", "a", "b", "b", "b"],
        instance_labels=["x", -1, -1, "y", "y"], class_names=["x", "y"],
    )  # fmt: skip
    assert [y.tolist() for y in flat.instance_labels] == [[0, -1], [-1, 1, 1]]


def test_union_check_lets_each_unlabelled_instance_carry_one_bag_label():
    bags = [np.ones((2, 2)), np.ones((3, 2)), np.ones((3, 2)), np.ones((2, 2))]
    sets = [[0, 1], [0, 1, 2], [0, 1, 2], [0]]
    inst = [np.array([0, -1]), np.array([0, -1, 0]), np.array([0, -1, -1]), np.array([-1, 1])]
    data = MIMLData(bags, sets, inst, n_classes=3)
    kinds = [(p.index, p.kind) for p in data.validate()]
    # bag 1: labels 1 and 2 unexplained, one unlabelled instance; bag 3: a labelled 1 outside {0}
    assert kinds == [(1, "label_without_instance"), (3, "instance_label_outside")]
    assert "only 1 unlabelled instance(s) to carry them" in data.validate()[0].message


def test_instance_metrics_skip_unlabelled_instances():
    true = [np.array([0, -1, 1]), np.array([-1, 2])]
    pred = [np.array([0, 2, 0]), np.array([1, 2])]
    assert metrics.instance_accuracy(true, pred) == pytest.approx(2 / 3)
    assert metrics.macro_f1(true, pred) == pytest.approx(metrics.macro_f1([[0, 1, 2]], [[0, 0, 2]]))
    probs = [
        np.array([[0.9, 0.1, 0.0], [0.0, 0.0, 1.0], [0.6, 0.4, 0.0]]),
        np.array([[1, 0, 0], [0, 0, 1.0]]),
    ]
    want = metrics.expected_calibration_error(
        [np.array([0, 1, 2])], [np.stack([probs[0][0], probs[0][2], probs[1][1]])]
    )
    assert metrics.expected_calibration_error(true, probs) == pytest.approx(want)
    for metric in (metrics.instance_accuracy, metrics.macro_f1):
        with pytest.raises(
            ValueError, match="no labelled instance to score: all 2 true instance labels are -1"
        ):
            metric([np.array([-1, -1])], [np.array([0, 1])])
    with pytest.raises(ValueError, match=r"true instance labels \[-3\]: use class indices, or -1"):
        metrics.instance_accuracy([np.array([-3, 1])], [np.array([0, 1])])
    with pytest.raises(ValueError, match="3 true instance labels but 2 probability rows"):
        metrics.expected_calibration_error([np.array([0, 1, -1])], [np.ones((2, 2)) / 2])


# -- summary ---------------------------------------------------------------------------------


def test_summary_counts_with_and_without_labels(tmp_path):
    p = write_set(tmp_path)
    s = read_bag_csv(*three(p)).summary()
    assert (s.n_bags, s.n_instances, s.n_features, s.n_classes) == (3, 6, 3, 4)
    assert s.label_set_sizes == {1: 1, 2: 1, 3: 1} and s.bags_per_class == [2, 1, 3, 0]
    assert tuple(s.instances_per_bag) == (1, 2.0, 3) and s.n_unlabelled_instances == 2
    assert s.n_bags_with_problems == 0 and s.problems_by_kind == {}
    text = str(s)
    assert text.splitlines()[0] == "3 bags, 6 instances, 3 features, 4 classes"
    assert "  4  RBNU - Nuthatch: 0" in text and "4 labelled, 2 unlabelled (-1)" in text
    assert s.to_json()["label_set_sizes"] == {"1": 1, "2": 1, "3": 1}
    bare = MIMLData([np.ones((1, 2)), np.ones((4, 2))], None).summary()
    assert bare.label_set_sizes is None and bare.n_unlabelled_instances is None
    assert bare.n_bags_with_problems is None and tuple(bare.instances_per_bag) == (1, 2.5, 4)
    assert "label sets: none" in str(bare) and "instance labels: none" in str(bare)
    broken = MIMLData([np.ones((1, 2))], [[0, 1]], [np.array([0])]).summary()
    assert broken.n_bags_with_problems == 1
    assert broken.problems_by_kind == {"zero_likelihood": 1, "label_without_instance": 1}


# -- from_dataframe, string labels, truncated ARFF -----------------------------------------------


@pytest.mark.parametrize("dtype", [object, "string", "str"])
def test_text_feature_column_is_reported_as_not_numeric(dtype):
    df = pd.DataFrame({"bag": [1, 1, 2], "f": [1.0, 2.0, 3.0], "site": ["a", "b", "c"]})
    df["site"] = df["site"].astype(dtype)
    with pytest.raises(ValueError, match=r"feature column\(s\) \['site'\] are not numeric"):
        MIMLData.from_dataframe(df, "bag", {1: [0], 2: [1]})
    data = MIMLData.from_dataframe(df, "bag", {1: [0], 2: [1]}, feature_columns=["f"])
    assert data.feature_names == ["f"] and data.n_bags == 2


def test_string_labels_need_class_names():
    x, ids = np.ones((3, 2)), ["r", "r", "s"]
    error("pass class_names", MIMLData.from_arrays, x, {"r": ["owl"], "s": ["jay"]}, ids)
    msg = error(
        "pass class_names",
        MIMLData.from_arrays,
        x,
        {"r": ["owl"], "s": ["wren"]},
        ids,
        class_names=["owl", "jay"],
    )
    assert "['wren'] are not among class_names ['owl', 'jay']" in msg
    error("pass class_names", MIMLData.from_arrays, x, [[0], [1]], ids, instance_labels=["owl", "jay", "owl"])
    error("class_names=[...]", MIMLData, [np.ones((1, 2))], [["owl"]])


def test_arff_cut_short_at_a_row_boundary_names_both_counts(tmp_path):
    lines = (FIXTURES / "miml_small.arff").read_text().splitlines()
    path = tmp_path / "cut.arff"
    path.write_text("\n".join(lines[:-1]) + "\n")  # the last bag's row is gone
    msg = error("declares 4 bags, but the @data section holds 3", read_miml_arff, path)
    assert str(path) in msg and "['b4']" in msg
    # A string id declares no count: the same rows read as three bags.
    path.write_text(
        "\n".join(lines[:-1]).replace("@attribute id {b1,b2,b3,b4}", "@attribute id string") + "\n"
    )
    assert read_miml_arff(path).bag_ids == ["b1", "b2", "b3"]


# -- load_hja on a small folder in the published layout ------------------------------------------


def hja_folder(tmp_path: Path, **changes: str) -> Path:
    paths = write_set(tmp_path, "hja_birdsong_", **changes)
    return paths["features"].parent


def test_load_hja_versions_on_a_small_folder(tmp_path):
    folder = hja_folder(tmp_path)
    original = load_hja(folder, "original", "all")
    assert original.label_sets == [[0, 2], [2], [0, 1, 2]]
    union = load_hja(folder, "union", "labelled")
    assert union.label_sets == [[0], [2], [0, 1]] and union.n_instances == 4
    assert [y.tolist() for y in union.instance_labels] == [[0], [2], [1, 0]]
    assert union.validate() == []
    assert load_hja(folder).label_sets == load_hja(folder, "original", "labelled").label_sets  # the defaults
    assert load_hja(folder, "union", "all").n_instances == 6
    assert load_hja(folder, "original", "labelled").impossible_bags() == [0, 2]


def test_load_hja_never_drops_a_bag_without_labelled_segments(tmp_path):
    folder = hja_folder(tmp_path, instance_labels=INSTANCE_LABELS.replace("2,3\n", "2,-1\n"))
    for version, segments in [("union", "all"), ("union", "labelled"), ("original", "labelled")]:
        msg = error("bag(s) ['2'] have no labelled segment", load_hja, folder, version, segments)
        assert "hja_birdsong_instance_labels.txt" in msg
    assert load_hja(folder, "original", "all").n_bags == 3


def test_load_hja_bad_arguments_and_missing_files(tmp_path):
    folder = hja_folder(tmp_path)
    error("choose 'union'", load_hja, folder, version="published")
    error("choose 'labelled'", load_hja, folder, segments="some")
    (folder / "hja_birdsong_class_names.txt").unlink()
    error("has no ['hja_birdsong_class_names.txt']", load_hja, folder)
    error("is not a folder", load_hja, tmp_path / "nowhere")
    with pytest.raises(ValueError, match="need instance labels"):
        hja_version(MIMLData([np.ones((1, 2))], [[0]]), "union", "labelled")


def test_published_hja_figures():
    assert published_figures("hja-union", "inductive")["ORLR-EM"] == "72.3 ± 3.8"
    assert published_figures("hja", "transductive") == {"ORLR-EM": "80.8"}
    assert published_figures("letter-frost", "inductive")["ORLR-EM"] == "71.3 ± 7.6"
    assert published_figures("elsewhere", "inductive") == {} and published_figures("hja", "x") == {}
    assert re.fullmatch(r"\d+\.\d", published_figures("hja", "inductive")["SIM"])
