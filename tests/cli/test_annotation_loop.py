"""The annotation loop through the command line: ``query``, a person's labels, ``fit --instance-labels``."""

from __future__ import annotations

import csv
from pathlib import Path

import numpy as np
import pytest
from helpers import write_npz

from orlr_ppl.cli.main import main
from orlr_ppl.data.datasets import make_miml_digits
from orlr_ppl.data.io import read_annotations, read_bag_npz


def _rows(path: Path) -> list[dict[str, str]]:
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


def _label_them(path: Path, data) -> None:
    """Fill in ``query``'s label column with the true labels, as a person would."""
    rows = _rows(path)
    index = {str(b): k for k, b in enumerate(data.bag_ids)}
    for row in rows:
        row["label"] = data.class_names[data.instance_labels[index[row["bag_id"]]][int(row["instance"])]]
    with open(path, "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)


def test_query_label_refit_and_query_again(tmp_path, capsys):
    data_file = tmp_path / "bags.npz"
    write_npz(data_file, make_miml_digits(40, seed=0, split="train", max_size=4))
    data = read_bag_npz(data_file)
    model = tmp_path / "m0"
    assert main(["fit", "--data", str(data_file), "--method", "map", "--out", str(model)]) == 0
    first = tmp_path / "round1.csv"
    args = ["query", "--model", str(model), "--data", str(data_file), "-n", "6", "--out", str(first)]
    assert main(args) == 0
    assert "wrote 6 instances to label (entropy)" in capsys.readouterr().out
    rows = _rows(first)
    assert list(rows[0])[:3] == ["bag_id", "instance", "score"] and list(rows[0])[-1] == "label"
    assert len(rows) == 6 and len({r["bag_id"] for r in rows}) == 6  # one per bag
    assert all(r["label"] == "" for r in rows)
    _label_them(first, data)
    given = read_annotations(first, data)
    assert sum(int((g >= 0).sum()) for g in given) == 6

    refit = tmp_path / "m1"
    fit = ["fit", "--data", str(data_file), "--method", "map", "--out", str(refit)]
    assert main([*fit, "--instance-labels", str(first)]) == 0
    assert "with 6 instance labels from" in capsys.readouterr().out
    second = tmp_path / "round2.csv"
    again = ["query", "--model", str(refit), "--data", str(data_file), "-n", "6", "--out", str(second)]
    assert main([*again, "--instance-labels", str(first)]) == 0
    asked = {(r["bag_id"], r["instance"]) for r in rows}
    assert not asked & {(r["bag_id"], r["instance"]) for r in _rows(second)}
    # Two rounds' files together, as the next fit reads them.
    _label_them(second, data)
    both = ["fit", "--data", str(data_file), "--method", "map", "--out", str(tmp_path / "m2")]
    assert main([*both, "--instance-labels", str(first), str(second)]) == 0
    assert "with 12 instance labels" in capsys.readouterr().out


def test_a_label_outside_the_bags_set_is_one_line_naming_bag_and_instance(tmp_path, capsys):
    data_file = tmp_path / "bags.npz"
    write_npz(data_file, make_miml_digits(20, seed=1, split="train", max_size=3))
    data = read_bag_npz(data_file)
    b = 0
    outside = next(c for c in data.class_names if int(c) not in np.asarray(data.label_sets[b]))
    labels = tmp_path / "labels.csv"
    labels.write_text(f"bag_id,instance,label\n{data.bag_ids[b]},0,{outside}\n")
    fit = ["fit", "--data", str(data_file), "--method", "map", "--out", str(tmp_path / "m")]
    assert main([*fit, "--instance-labels", str(labels)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1
    assert (
        f"line 2: bag {data.bag_ids[b]}, instance 0 is labelled '{outside}', not in the bag's label set"
        in err[0]
    )


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("bag,instance,label\n", "line 1: no bag_id column"),
        ("bag_id,instance,label\n999,0,1\n", "line 2: bag_id '999' is not a bag of the data"),
        ("bag_id,instance,label\n100,99,1\n", "line 2: instance '99' of bag"),
        ("bag_id,instance,label\n100,0,seven\n", "line 2: label 'seven' is not a class of the data"),
        ("bag_id,instance,label\n100,0,{a}\n100,0,{b}\n", "bag 100, instance 0 is labelled"),
    ],
)
def test_bad_annotation_files_name_the_line(tmp_path, text, message):
    data_file = tmp_path / "bags.npz"
    write_npz(data_file, make_miml_digits(10, seed=2, split="train", max_size=3))
    data = read_bag_npz(data_file)
    b = next(k for k, s in enumerate(data.label_sets) if len(s) >= 2)
    first, second = (data.class_names[c] for c in np.asarray(data.label_sets[b])[:2])
    path = tmp_path / "labels.csv"
    path.write_text(text.format(a=first, b=second).replace("100,0,", f"{data.bag_ids[b]},0,"))
    message = message.replace("bag 100, instance 0", f"bag {data.bag_ids[b]}, instance 0")
    with pytest.raises(ValueError, match=message):
        read_annotations(path, data)


def test_empty_and_minus_one_labels_mean_not_labelled(tmp_path):
    data_file = tmp_path / "bags.npz"
    write_npz(data_file, make_miml_digits(10, seed=2, split="train", max_size=3))
    data = read_bag_npz(data_file)
    path = tmp_path / "labels.csv"
    path.write_text("bag_id,instance,score,label\n100,0,0.5,\n100,1,0.4,-1\n\n")
    assert all((g == -1).all() for g in read_annotations(path, data))


def test_a_novel_class_model_takes_novel_as_a_label(tmp_path, capsys):
    """With --novel-class, a person may say an instance is none of the tags ("novel", the name query
    writes), in any bag; without it, that label is an unknown class, one line and exit code 2."""
    data_file = tmp_path / "bags.npz"
    write_npz(data_file, make_miml_digits(20, seed=2, split="train", max_size=3))
    data = read_bag_npz(data_file)
    labels = tmp_path / "labels.csv"
    tagged = data.class_names[data.instance_labels[1][0]]
    labels.write_text(f"bag_id,instance,label\n{data.bag_ids[0]},0,novel\n{data.bag_ids[1]},0,{tagged}\n")
    given = read_annotations(labels, data, novel="novel")
    assert given[0][0] == len(data.class_names) and given[1][0] == data.instance_labels[1][0]
    model = tmp_path / "m"
    fit = ["fit", "--data", str(data_file), "--method", "map", "--novel-class", "--out", str(model)]
    assert main([*fit, "--instance-labels", str(labels)]) == 0
    assert "with 2 instance labels" in capsys.readouterr().out
    query = [
        "query",
        "--model",
        str(model),
        "--data",
        str(data_file),
        "-n",
        "4",
        "--out",
        str(tmp_path / "q.csv"),
    ]
    assert main([*query, "--instance-labels", str(labels)]) == 0
    asked = {(r["bag_id"], r["instance"]) for r in _rows(tmp_path / "q.csv")}
    assert len(asked) == 4 and not asked & {(str(data.bag_ids[0]), "0"), (str(data.bag_ids[1]), "0")}
    plain = ["fit", "--data", str(data_file), "--method", "map", "--out", str(tmp_path / "p")]
    assert main([*plain, "--instance-labels", str(labels)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "line 2: label 'novel' is not a class of the data" in err[0]
