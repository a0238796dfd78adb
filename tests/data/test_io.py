"""Tests of the file readers: exact values from fixture files, round trips, line- and array-aware errors."""

from __future__ import annotations

import pickle
import re
from pathlib import Path

import numpy as np
import pytest

from orlr_ppl.data.container import MIMLData
from orlr_ppl.data.io import read_bag_csv, read_bag_npz, read_miml_arff, write_miml_arff

FIXTURES = Path(__file__).parents[1] / "fixtures"
ARFF = FIXTURES / "miml_small.arff"
XML = FIXTURES / "miml_small.xml"
FEATURES = FIXTURES / "hja_features.csv"
LABELS = FIXTURES / "hja_labels.csv"
INSTANCE_LABELS = FIXTURES / "hja_instance_labels.csv"


def num(v: float) -> str:
    """The shortest text that reads back as exactly ``v``."""
    return repr(float(v))


def assert_same(a: MIMLData, b: MIMLData) -> None:
    assert a.bag_ids == b.bag_ids
    assert a.label_sets == b.label_sets
    assert a.class_names == b.class_names
    assert a.feature_names == b.feature_names
    assert a.n_classes == b.n_classes
    assert len(a.bags) == len(b.bags)
    for x, y in zip(a.bags, b.bags):
        np.testing.assert_array_equal(x, y)
    assert (a.instance_labels is None) == (b.instance_labels is None)
    if a.instance_labels is not None:
        for x, y in zip(a.instance_labels, b.instance_labels):
            np.testing.assert_array_equal(x, y)


def expect_error(path: Path, line: int | None, fragment: str, read, *args, **kwargs) -> str:
    """``read(*args, **kwargs)`` must raise a ValueError naming ``path``, ``line N`` and ``fragment``."""
    with pytest.raises(ValueError) as info:
        read(*args, **kwargs)
    msg = str(info.value)
    assert str(path) in msg
    if line is not None:
        assert f"{path}, line {line}:" in msg
    else:
        assert not re.search(rf"{re.escape(str(path))}, line \d+", msg)
    assert fragment in msg
    return msg


# -- relational ARFF: the fixture ------------------------------------------------

ARFF_BAGS = [
    [[0.5, 1.5], [-2.0, 3.25]],
    [[4.0, 5.0]],
    [[1e-3, -0.75], [2.0, 2.0], [6.5, 0.0]],
    [[7.0, 8.0], [9.0, 10.0]],
]


@pytest.mark.parametrize("xml", [None, XML])
def test_arff_fixture_values(xml):
    data = read_miml_arff(ARFF, xml)
    assert data.bag_ids == ["b1", "b2", "b3", "b4"]
    assert data.class_names == ["cat", "dog", "bird"]
    assert data.feature_names == ["f1", "f2"]
    assert data.n_classes == 3
    assert data.label_sets == [[0], [1, 2], [0, 1], [2]]
    assert data.instance_labels is None
    assert len(data.bags) == 4
    for x, want in zip(data.bags, ARFF_BAGS):
        assert x.dtype == np.float64
        np.testing.assert_array_equal(x, np.array(want))


def test_arff_accepts_str_paths():
    assert_same(read_miml_arff(str(ARFF), str(XML)), read_miml_arff(ARFF))


def test_arff_class_order_is_the_files_not_the_xmls(tmp_path):
    xml = tmp_path / "reordered.xml"
    xml.write_text(
        '<labels xmlns="http://mulan.sourceforge.net/labels">'
        '<label name="bird"/><label name="cat"><label name="dog"/></label></labels>'
    )
    data = read_miml_arff(ARFF, xml)
    assert data.class_names == ["cat", "dog", "bird"]
    assert data.label_sets == [[0], [1, 2], [0, 1], [2]]


def test_arff_string_ids_double_quotes_and_indented_header(tmp_path):
    # The MIML library's toy.arff layout: every line indented, bags in double quotes; ids declared string
    path = tmp_path / "toy.arff"
    path.write_text(
        "@relation toy\n\n @attribute id string\n @attribute bag relational\n   @attribute f1 numeric\n"
        "   @attribute f2 numeric\n @end bag\n @attribute a {0,1}\n @attribute b {0,1}\n \n @data\n"
        ' bag 1,"42,-198\\n42,-191",1,0\n bag2,"12,-98",0,0\n'
    )
    data = read_miml_arff(path)
    assert data.bag_ids == ["bag 1", "bag2"]
    assert data.label_sets == [[0], []]  # an empty label set is kept, not dropped
    np.testing.assert_array_equal(data.bags[0], [[42.0, -198.0], [42.0, -191.0]])
    np.testing.assert_array_equal(data.bags[1], [[12.0, -98.0]])
    assert [p.kind for p in data.validate()] == ["zero_likelihood"]


def test_arff_flattened_through_from_arrays_is_unchanged():
    data = read_miml_arff(ARFF, XML)
    sizes = [len(x) for x in data.bags]
    again = MIMLData.from_arrays(
        np.concatenate(data.bags),
        data.label_matrix(),
        bag_ids=np.repeat(np.array(data.bag_ids), sizes),
        class_names=data.class_names,
        feature_names=data.feature_names,
    )
    assert_same(again, data)


# -- relational ARFF: malformed input ---------------------------------------------

ARFF_LINES = ARFF.read_text().splitlines()


def with_lines(tmp_path: Path, changes: dict[int, str | None], name: str = "bad.arff") -> Path:
    """The fixture with 1-based line ``n`` replaced by ``changes[n]`` (None deletes it)."""
    lines = [changes.get(i, line) for i, line in enumerate(ARFF_LINES, start=1)]
    path = tmp_path / name
    path.write_text("\n".join(line for line in lines if line is not None) + "\n", encoding="utf-8")
    return path


ARFF_CASES = {
    "too many values": ({15: "b2,'4,5',0,1,1,0"}, 15, "6 values, expected 5"),
    "too few values": ({15: "b2,'4,5',0,1"}, 15, "4 values, expected 5"),
    # scipy would silently drop the surplus value
    "instance with a surplus value": (
        {14: "b1,'0.5,1.5,9\\n-2,3.25',1,0,0"},
        14,
        "instance 1 has 3 value(s)",
    ),
    "instance short of a value": ({17: "b3,'1e-3,-0.75\\n2\\n6.5,0',1,1,0"}, 17, "instance 2 has 1 value(s)"),
    "label not 0/1": ({18: "b4,'7,8\\n9,10',0,2,1"}, 18, "label 'dog' is '2', expected 0 or 1"),
    "label missing": ({15: "b2,'4,5',0,?,1"}, 15, "label 'dog' is missing ('?')"),
    "non-numeric feature": (
        {17: "b3,'1e-3,abc\\n2,2\\n6.5,0',1,1,0"},
        17,
        "feature 'f2': 'abc' is not a number",
    ),
    "missing feature": ({18: "b4,'7,?\\n9,10',0,0,1"}, 18, "instance 1, feature 'f2': '?' is missing"),
    "infinite feature": ({18: "b4,'7,8\\n9,inf',0,0,1"}, 18, "instance 2, feature 'f2': 'inf' is missing"),
    "empty bag": ({15: "b2,'',0,1,1"}, 15, "instance 1 is empty"),
    "trailing instance separator": ({14: "b1,'0.5,1.5\\n-2,3.25\\n',1,0,0"}, 14, "instance 3 is empty"),
    "duplicate bag id": ({18: "b1,'7,8\\n9,10',0,0,1"}, 18, "'b1' already used on line 14"),
    "undeclared bag id": ({18: "b9,'7,8\\n9,10',0,0,1"}, 18, "bag id 'b9' is not among the values of 'id'"),
    "missing bag id": ({15: "?,'4,5',0,1,1"}, 15, "the bag id is missing"),
    "non-ASCII bag id": ({4: "@attribute id {b1,b2,b3,bä}", 18: "bä,'7,8\\n9,10',0,0,1"}, 18, "not ASCII"),
    # scipy guesses the quoting from the first data row and misreads this one
    "quoting unlike the first row": ({17: 'b3,"1e-3,-0.75\\n2,2\\n6.5,0",1,1,0'}, 17, "quoted differently"),
    "unterminated quote": ({15: "b2,'4,5,0,1,1"}, 15, "unterminated ' quote"),
    "no relational attribute": ({5: "@attribute f1 numeric", 6: None, 7: None, 8: None}, 5, "no relational"),
    "label not declared 0/1": ({10: "@attribute dog numeric"}, 10, "label 'dog' must be declared {0,1}"),
    "nominal feature": ({7: "  @attribute f2 {a,b}"}, 7, "feature 'f2' is nominal"),
    "numeric bag id": ({4: "@attribute id numeric"}, 4, "must be nominal or string"),
    "duplicate attribute": ({10: "@attribute cat {0,1}"}, 10, "'cat' already declared on line 9"),
    "unknown header keyword": ({2: "@relashun x"}, 2, "expected @relation, @attribute"),
    "relational never closed": ({8: None}, 12, "@data before '@end bag'"),
}


@pytest.mark.parametrize("case", ARFF_CASES, ids=list(ARFF_CASES))
def test_arff_malformed_names_file_and_line(tmp_path, case):
    changes, line, fragment = ARFF_CASES[case]
    path = with_lines(tmp_path, changes)
    expect_error(path, line, fragment, read_miml_arff, path)


def test_arff_without_data_section(tmp_path):
    path = with_lines(tmp_path, {n: None for n in range(13, 19)})
    expect_error(path, None, "no @data line", read_miml_arff, path)


def test_arff_without_bags(tmp_path):
    path = with_lines(tmp_path, {n: None for n in range(14, 19)})
    expect_error(path, None, "holds no bags", read_miml_arff, path)


def test_arff_header_scipy_cannot_read(tmp_path):
    # scipy reads quoted attribute names only in single quotes; its own error is passed on with the file
    path = with_lines(tmp_path, {7: '  @attribute "f x" numeric'})
    expect_error(path, None, "scipy.io.arff cannot read the header", read_miml_arff, path)


def test_arff_label_names_in_double_quotes_are_read(tmp_path):
    # scipy cannot tokenise them; the reader hands it plain label names and keeps the file's own
    path = with_lines(tmp_path, {10: """@attribute "Swainson's dog" {0,1}"""})
    data = read_miml_arff(path)
    assert data.class_names == ["cat", "Swainson's dog", "bird"]
    assert data.label_sets == read_miml_arff(ARFF).label_sets


def test_arff_missing_files(tmp_path):
    missing = tmp_path / "nothing.arff"
    with pytest.raises(ValueError, match=re.escape(f"{missing}: no such file")):
        read_miml_arff(missing)
    with pytest.raises(ValueError, match=re.escape(f"{missing}: no such file")):
        read_miml_arff(ARFF, missing)


def test_xml_label_absent_from_arff_names_both_files(tmp_path):
    xml = tmp_path / "extra.xml"
    xml.write_text(
        XML.read_text().replace('<label name="bird"></label>', '<label name="bird"/><label name="fish"/>')
    )
    msg = expect_error(xml, None, "['fish']", read_miml_arff, ARFF, xml)
    assert str(ARFF) in msg


def test_arff_label_absent_from_xml_names_both_files(tmp_path):
    xml = tmp_path / "short.xml"
    xml.write_text(XML.read_text().replace('<label name="bird"></label>', ""))
    msg = expect_error(ARFF, 11, "attribute 'bird' is not a label", read_miml_arff, ARFF, xml)
    assert str(xml) in msg


def test_malformed_xml_names_its_line(tmp_path):
    xml = tmp_path / "broken.xml"
    xml.write_text('<labels xmlns="http://mulan.sourceforge.net/labels">\n<label name="cat">\n</labels>\n')
    expect_error(xml, 3, "not well-formed", read_miml_arff, ARFF, xml)


# -- bag CSV: the fixtures ----------------------------------------------------------


def test_csv_fixture_values():
    data = read_bag_csv(FEATURES, LABELS, INSTANCE_LABELS)
    assert data.bag_ids == ["10", "11", "12", "13"]  # first appearance in the features file
    assert data.feature_names == ["f1", "f2"]
    assert data.class_names == ["0", "1", "2"]
    assert data.n_classes == 3
    assert data.label_sets == [[0, 2], [1], [], [2]]  # bag 12's empty label set is kept
    want = [[[0.1, 0.2], [0.3, 0.4], [0.5, 0.6]], [[1.0, -1.0]], [[2.5, 3.5], [4.5, 5.5]], [[7.0, 8.0]]]
    for x, w in zip(data.bags, want):
        np.testing.assert_array_equal(x, np.array(w))
    assert [y.tolist() for y in data.instance_labels] == [[0, 2, 2], [1], [1, 0], [2]]
    assert [p.index for p in data.validate()] == [2, 2]


def test_csv_without_instance_labels_or_headers(tmp_path):
    features = tmp_path / "f.csv"
    features.write_text("".join(FEATURES.read_text().splitlines(keepends=True)[1:]))
    labels = tmp_path / "l.csv"
    labels.write_text("10,0,2\n11,1\n13,2,\n12\n")  # "13,2," : a trailing comma adds nothing
    data = read_bag_csv(str(features), str(labels), n_classes=5)
    assert data.feature_names == ["x0", "x1"]
    assert data.instance_labels is None
    assert data.n_classes == 5
    assert data.label_sets == [[0, 2], [1], [], [2]]
    with_header = read_bag_csv(FEATURES, LABELS, n_classes=5)
    for x, y in zip(data.bags, with_header.bags):
        np.testing.assert_array_equal(x, y)


def test_csv_and_arff_round_trip_a_written_data_set(tmp_path):
    rng = np.random.default_rng(3)
    sizes = [3, 1, 4, 2, 5]
    bags = [rng.normal(size=(n, 3)) * 10.0 ** rng.integers(-6, 6, size=(n, 3)) for n in sizes]
    sets = [[0, 2], [1], [], [0, 1, 2, 3], [3]]
    ids = ["r7", "r2", "r9", "r1", "r5"]
    inst = [rng.integers(0, 4, size=n) for n in sizes]
    names = ["alpha", "beta", "gamma", "delta"]
    original = MIMLData(bags, sets, inst, names, ["u", "v", "w"], 4, ids)

    # features interleaved across bags, so the reader must regroup them
    order = [(b, i) for i in range(max(sizes)) for b in range(len(bags)) if i < sizes[b]]
    f_csv, l_csv, i_csv = tmp_path / "f.csv", tmp_path / "l.csv", tmp_path / "i.csv"
    f_csv.write_text(
        "bag,u,v,w\n" + "".join(f"{ids[b]},{','.join(map(num, bags[b][i]))}\n" for b, i in order)
    )
    l_csv.write_text("".join(f"{ids[b]}{''.join(f',{c}' for c in s)}\n" for b, s in enumerate(sets)))
    i_csv.write_text("".join(f"{ids[b]},{inst[b][i]}\n" for b, i in order))
    from_csv = read_bag_csv(f_csv, l_csv, i_csv, n_classes=4)
    first_seen = list(dict.fromkeys(ids[b] for b, _ in order))
    assert from_csv.bag_ids == first_seen
    assert_same(
        from_csv,
        MIMLData(bags, sets, inst, None, ["u", "v", "w"], 4, ids).subset([ids.index(b) for b in first_seen]),
    )

    arff_path = tmp_path / "rt.arff"
    header = [
        "@relation rt",
        "@attribute id {" + ",".join(ids) + "}",
        "@attribute bag relational",
        *[f"@attribute {f} numeric" for f in original.feature_names],
        "@end bag",
        *[f"@attribute {c} {{0,1}}" for c in names],
        "@data",
    ]
    sep = "\\n"  # the two characters backslash and n separate instances
    rows = [
        f"{i},'{sep.join(','.join(map(num, r)) for r in x)}',{','.join(str(int(c in s)) for c in range(4))}"
        for i, x, s in zip(ids, bags, sets)
    ]
    arff_path.write_text("\n".join(header + rows) + "\n")
    no_inst = MIMLData(bags, sets, None, names, ["u", "v", "w"], 4, ids)
    assert_same(read_miml_arff(arff_path), no_inst)


# -- bag CSV: malformed input ----------------------------------------------------------


def write(tmp_path: Path, name: str, text: str) -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


def test_csv_non_numeric_feature_message_is_exact(tmp_path):
    rows = "".join(f"b{k // 3},{k},{k + 0.5},{k * 2}\n" for k in range(10))
    features = write(tmp_path, "features.csv", "bag,a,b,c\n" + rows + "b3,1,2,abc\n")
    labels = write(tmp_path, "labels.csv", "b0,0\nb1,1\nb2,0\nb3,1\n")
    with pytest.raises(ValueError) as info:
        read_bag_csv(features, labels)
    assert str(info.value) == f"{features}, line 12: field 4 'abc' is not a number"


FEATURE_CASES = {
    "short row": ({5: "12,2.5"}, 5, "2 fields, expected 3"),
    "long row": ({3: "10,0.3,0.4,9"}, 3, "4 fields, expected 3"),
    "not a number": ({4: "11,1.0,x1"}, 4, "field 3 'x1' is not a number"),
    "empty value": ({4: "11,,-1.0"}, 4, "field 2 '' is not a number"),
    "nan": ({7: "13,nan,8"}, 7, "field 2 'nan' is not a finite number"),
    "empty bag id": ({6: ",0.5,0.6"}, 6, "the bag id is empty"),
}
LABEL_CASES = {
    "non-integer label": ({3: "11,1.5"}, 3, "field 2 '1.5' is not an integer class index"),
    "word label": ({2: "10,0,two"}, 2, "field 3 'two' is not an integer class index"),
    "negative label": ({4: "13,-2"}, 4, "field 2: class -2 is negative"),
    "hole in the labels": ({2: "10,0,,2"}, 2, "field 3 '' is not an integer"),
    "duplicate bag row": ({5: "10,1"}, 5, "bag '10' already has a label row on line 2"),
}
INSTANCE_CASES = {
    "wrong bag": ({4: "10,1"}, 4, "bag id '10', but instance 4"),
    "non-integer": ({2: "10,x"}, 2, "field 2 'x' is not an integer class index"),
    "three fields": ({6: "13,2,1"}, 6, "3 fields, expected 2"),
}


def variant(tmp_path: Path, source: Path, changes: dict[int, str | None]) -> Path:
    lines = [changes.get(i, line) for i, line in enumerate(source.read_text().splitlines(), start=1)]
    return write(tmp_path, source.name, "\n".join(line for line in lines if line is not None) + "\n")


@pytest.mark.parametrize("case", FEATURE_CASES, ids=list(FEATURE_CASES))
def test_csv_malformed_features(tmp_path, case):
    changes, line, fragment = FEATURE_CASES[case]
    path = variant(tmp_path, FEATURES, changes)
    expect_error(path, line, fragment, read_bag_csv, path, LABELS, INSTANCE_LABELS)


@pytest.mark.parametrize("case", LABEL_CASES, ids=list(LABEL_CASES))
def test_csv_malformed_bag_labels(tmp_path, case):
    changes, line, fragment = LABEL_CASES[case]
    path = variant(tmp_path, LABELS, changes)
    expect_error(path, line, fragment, read_bag_csv, FEATURES, path, INSTANCE_LABELS)


@pytest.mark.parametrize("case", INSTANCE_CASES, ids=list(INSTANCE_CASES))
def test_csv_malformed_instance_labels(tmp_path, case):
    changes, line, fragment = INSTANCE_CASES[case]
    path = variant(tmp_path, INSTANCE_LABELS, changes)
    msg = expect_error(path, line, fragment, read_bag_csv, FEATURES, LABELS, path)
    if case == "wrong bag":
        assert f"({FEATURES}, line 5) is in bag '12'" in msg


def test_csv_label_beyond_n_classes(tmp_path):
    expect_error(LABELS, 2, "class 2 is outside [0, 2)", read_bag_csv, FEATURES, LABELS, None, n_classes=2)


def test_csv_bag_without_instances(tmp_path):
    labels = write(tmp_path, "labels.csv", LABELS.read_text() + "99,1\n")
    msg = expect_error(labels, None, "'99' (line 6) have no instances", read_bag_csv, FEATURES, labels)
    assert str(FEATURES) in msg


def test_csv_bag_without_label_row(tmp_path):
    labels = variant(tmp_path, LABELS, {3: None})
    msg = expect_error(labels, None, "bag(s) ['11'] have instances", read_bag_csv, FEATURES, labels)
    assert str(FEATURES) in msg


def test_csv_instance_label_rows_must_match_the_instances(tmp_path):
    extra = write(tmp_path, "extra.csv", INSTANCE_LABELS.read_text() + "12,0\n")
    expect_error(extra, 8, "more rows than the 7 instances", read_bag_csv, FEATURES, LABELS, extra)
    short = variant(tmp_path, INSTANCE_LABELS, {7: None})
    msg = expect_error(short, None, "6 rows, but", read_bag_csv, FEATURES, LABELS, short)
    assert f"line 8 of {FEATURES}" in msg


@pytest.mark.parametrize("which", [0, 1, 2])
def test_csv_missing_files(tmp_path, which):
    paths = [FEATURES, LABELS, INSTANCE_LABELS]
    paths[which] = tmp_path / "absent.csv"
    with pytest.raises(ValueError, match=re.escape(f"{paths[which]}: no such file")):
        read_bag_csv(*paths)


# -- .npz bag archive ----------------------------------------------------------------

NPZ_X = np.arange(14.0).reshape(7, 2)
NPZ_IDS = np.array([7, 3, 7, 9, 3, 7, 9])  # bags 7, 3, 9 in order of first appearance; not contiguous
NPZ_Y = np.array([[1, 0, 1], [0, 1, 0], [0, 0, 1]])  # rows in that order
NPZ_INST = np.array([0, 1, 2, 2, 1, 0, 2])


def test_npz_round_trips_bags_labels_and_order(tmp_path):
    path = tmp_path / "bags.npz"
    np.savez(path, features=NPZ_X, bag_ids=NPZ_IDS, bag_labels=NPZ_Y, instance_labels=NPZ_INST)
    data = read_bag_npz(path)
    assert data.bag_ids == [7, 3, 9]
    for x, rows in zip(data.bags, ([0, 2, 5], [1, 4], [3, 6])):
        assert x.dtype == np.float64
        np.testing.assert_array_equal(x, NPZ_X[rows])
    assert data.label_sets == [[0, 2], [1], [2]] and data.n_classes == 3
    assert [y.tolist() for y in data.instance_labels] == [[0, 2, 0], [1, 1], [2, 2]]
    np.testing.assert_array_equal(data.label_matrix(), NPZ_Y)
    assert data.validate() == []
    # Written back in the same layout, it reads the same (string ids too).
    again = tmp_path / "again.npz"
    sizes = [len(x) for x in data.bags]
    np.savez(
        again,
        features=np.concatenate(data.bags),
        bag_ids=np.repeat(np.array(["b7", "b3", "b9"]), sizes),
        bag_labels=data.label_matrix(),
        instance_labels=np.concatenate(data.instance_labels),
    )
    back = read_bag_npz(str(again))
    assert back.bag_ids == ["b7", "b3", "b9"]
    assert_same(back, MIMLData(data.bags, data.label_sets, data.instance_labels, bag_ids=back.bag_ids))


def test_npz_without_labels_has_no_label_sets(tmp_path):
    path = tmp_path / "unlabelled.npz"
    np.savez(path, features=NPZ_X, bag_ids=NPZ_IDS)
    data = read_bag_npz(path)
    assert data.label_sets is None and data.instance_labels is None and data.n_bags == 3
    with pytest.raises(ValueError, match="no bag label sets"):
        data.check_fittable()
    np.savez(path, features=NPZ_X, bag_ids=NPZ_IDS, instance_labels=NPZ_INST + 2)
    assert read_bag_npz(path).n_classes == 5  # from the instance labels, with no label sets to go by


def _pickled(path: Path) -> None:
    np.savez(path, features=NPZ_X, bag_ids=np.array([{"bag": i} for i in NPZ_IDS], dtype=object))


def _npy(path: Path) -> None:
    with path.open("wb") as f:  # through a handle: np.save would add ".npy" to the name
        np.save(f, NPZ_X)


NPZ_ARCHIVES = {
    "no features": ({"bag_ids": NPZ_IDS}, "missing array 'features'"),
    "no bag ids": ({"features": NPZ_X}, "missing array 'bag_ids'"),
    "flat features": ({"features": NPZ_X.ravel(), "bag_ids": NPZ_IDS}, "array 'features' has shape (14,)"),
    "text features": ({"features": NPZ_X.astype(str), "bag_ids": NPZ_IDS}, "array 'features' holds <U"),
    "no instances": ({"features": np.ones((0, 2)), "bag_ids": NPZ_IDS[:0]}, "'features' holds no instances"),
    "nan feature": (
        {"features": np.where(NPZ_X == 5.0, np.nan, NPZ_X), "bag_ids": NPZ_IDS},
        "array 'features' has NaN or infinite values in row(s) [2]",
    ),
    "short bag ids": (
        {"features": NPZ_X, "bag_ids": NPZ_IDS[:5]},
        "array 'bag_ids' has shape (5,), expected (7,)",
    ),
    "bag label rows": (
        {"features": NPZ_X, "bag_ids": NPZ_IDS, "bag_labels": NPZ_Y[:2]},
        "array 'bag_labels' has shape (2, 3), expected (3, C)",
    ),
    "flat bag labels": (
        {"features": NPZ_X, "bag_ids": NPZ_IDS, "bag_labels": np.array([0, 1, 2])},
        "array 'bag_labels' has shape (3,), expected (3, C)",
    ),
    "bag labels not 0/1": (
        {"features": NPZ_X, "bag_ids": NPZ_IDS, "bag_labels": NPZ_Y * 2},
        "array 'bag_labels' must hold only 0 and 1 (found [2])",
    ),
    "instance label count": (
        {"features": NPZ_X, "bag_ids": NPZ_IDS, "instance_labels": NPZ_INST[:6]},
        "array 'instance_labels' has shape (6,), expected (7,)",
    ),
    "fractional instance label": (
        {"features": NPZ_X, "bag_ids": NPZ_IDS, "instance_labels": NPZ_INST + 0.5},
        "array 'instance_labels' must hold integer class indices",
    ),
    "instance label below -1": (
        {"features": NPZ_X, "bag_ids": NPZ_IDS, "instance_labels": NPZ_INST - 2},
        "array 'instance_labels' holds class -2: use class indices >= 0, or -1 for an unlabelled",
    ),
    "instance label beyond bag labels": (
        {"features": NPZ_X, "bag_ids": NPZ_IDS, "bag_labels": NPZ_Y, "instance_labels": NPZ_INST + 3},
        "array 'instance_labels' holds class 5, outside the 3 classes of 'bag_labels'",
    ),
}


@pytest.mark.parametrize("case", NPZ_ARCHIVES)
def test_npz_bad_arrays_name_file_and_array(tmp_path, case):
    arrays, fragment = NPZ_ARCHIVES[case]
    path = tmp_path / "bad.npz"
    np.savez(path, **arrays)
    expect_error(path, None, fragment, read_bag_npz, path)


@pytest.mark.parametrize(
    ("write", "fragment"),
    [
        (lambda p: p.write_bytes(b"junk"), "not a readable .npz archive"),
        (lambda p: p.write_bytes(b"PK\x03\x04 truncated zip"), "not a readable .npz archive"),
        (lambda p: p.write_bytes(pickle.dumps({"features": NPZ_X})), "not a readable .npz archive"),
        (_npy, "holds one unnamed array"),
        (_pickled, "array 'bag_ids' is not a readable array"),
    ],
    ids=["junk", "broken zip", "pickle", "npy", "object array"],
)
def test_npz_unreadable_files_name_the_file(tmp_path, write, fragment):
    path = tmp_path / "data.npz"
    write(path)
    expect_error(path, None, fragment, read_bag_npz, path)
    expect_error(tmp_path / "none.npz", None, "no such file", read_bag_npz, tmp_path / "none.npz")


def test_npz_keeps_unlabelled_instances(tmp_path):
    inst = np.where(NPZ_INST == 2, -1, NPZ_INST)
    np.savez(tmp_path / "u.npz", features=NPZ_X, bag_ids=NPZ_IDS, instance_labels=inst)
    data = read_bag_npz(tmp_path / "u.npz")
    for bag, labels in zip(data.bag_ids, data.instance_labels):  # grouped by bag, in row order
        np.testing.assert_array_equal(labels, inst[NPZ_IDS == bag])
    assert sum(int((y == -1).sum()) for y in data.instance_labels) == 3


def test_write_miml_arff_round_trips_exactly(tmp_path):
    rng = np.random.default_rng(0)
    bags = [rng.normal(size=(n, 3)) * 10.0 ** rng.integers(-8, 8) for n in (1, 4, 2, 3)]
    data = MIMLData(
        bags,
        [[0, 2], [1], [0, 1, 2], [2]],  # bags 0, 2: more labels than instances (a leak's case)
        [np.array([0]), np.array([1, -1, 1, 1]), np.array([-1, 2]), np.array([2, 2, -1])],
        class_names=["BRCR - Brown Creeper", "SWTH - Swainson's Thrush", "plain"],
        feature_names=["time start", "f", "x.2"],
        bag_ids=["r 1", "r2", "7", "x"],
    )
    assert write_miml_arff(data, tmp_path / "d.arff") == 7  # labelled instances the format cannot hold
    back = read_miml_arff(tmp_path / "d.arff", tmp_path / "d.xml")
    assert back.class_names == data.class_names and back.feature_names == data.feature_names
    assert back.bag_ids == data.bag_ids and back.label_sets == data.label_sets
    assert all(np.array_equal(a, b) for a, b in zip(back.bags, data.bags))  # repr keeps every digit
    assert back.impossible_bags() == [0, 2] and back.impossible_bags(leak=True) == []


def test_write_miml_arff_refuses_what_it_cannot_carry(tmp_path):
    unlabelled = MIMLData([np.zeros((2, 1))], None, class_names=["a", "b"])
    with pytest.raises(ValueError, match="one label set per bag"):
        write_miml_arff(unlabelled, tmp_path / "u.arff")
    both = MIMLData([np.zeros((2, 1))], [[0]], class_names=["""it's "x\"""", "b"])
    with pytest.raises(ValueError, match="class name .* holds both quotes"):
        write_miml_arff(both, tmp_path / "b.arff")
