"""Readers for MIML data files: relational ARFF (MIML / Mulan style) and the HJA bag CSV layout.

Both readers return a ``MIMLData`` and never drop anything silently: every
malformed input raises ``ValueError`` naming the file and, where the problem
sits on one line, ``line N`` (line, field and instance numbers count from 1).

**Relational ARFF** (``read_miml_arff``), as written by the Java MIML library
(kdis-lab) and Weka's multi-instance tools::

    % comments start with %; blank lines and leading whitespace are ignored
    @relation name
    @attribute id {b1,b2,b3}         bag id: first attribute, nominal or string
    @attribute bag relational        exactly one relational attribute, second
      @attribute f1 numeric          the instance features: numeric only
      @attribute f2 numeric
    @end bag
    @attribute label1 {0,1}          every further attribute is a {0,1} label
    @attribute label2 {0,1}
    @data
    b1,'0.1,0.2\\n0.3,0.4',1,0        bag id, the bag, one 0/1 per label
    b2,"1,2",0,1                     (quote with ' or "; instances are
                                     separated by the two characters \\n)

One data row per bag; values are separated by commas. A bag needs at least
one instance and every instance exactly one value per feature. Labels may
instead be named by a Mulan XML file
(``<labels xmlns="http://mulan.sourceforge.net/labels"><label name="label1"/>...``);
it must then name every attribute after the bag, and nothing else. Classes
are numbered in the ARFF's attribute order. Missing values (``?``) are
rejected: ``MIMLData`` has no place for them. The file is parsed by
``scipy.io.arff.loadarff``; this module checks the file's structure first
(scipy ignores surplus values and its errors name no line), strips the
leading whitespace scipy trips on, and hands ``string`` bag ids to scipy as
nominal (scipy refuses string attributes). scipy guesses the quoting from
the first data row, so every bag must be quoted the same way; a row that is
not is reported with its line.

**Bag CSV** (``read_bag_csv``), the three-file layout of the HJA birdsong
data; comma-separated, one record per line, surrounding spaces ignored::

    features.csv          one row per instance: bag id, then d numbers
        bag_id,f1,f2      optional header (kept as feature names)
        7,0.25,1.5
        7,0.5,-2          a bag's instances need not be contiguous
    bag_labels.csv        one row per bag: bag id, then zero or more labels
        bag_id,[labels]   optional header
        7,0,3             labels are integer class indices
        8                 a bag with an empty label set
    instance_labels.csv   optional; one row per instance, in the order of
        7,3               features.csv: bag id (must match that row), label

A first row is a header when it has at least two fields and none after the
first is a number. Bag ids are kept as the strings written; bags are
ordered by first appearance in the features file. Every bag with instances
needs exactly one label row and every label row a bag with instances. Bags
with an empty label set are kept (``MIMLData.validate`` reports them).
"""

from __future__ import annotations

import csv
import io
import re
import xml.etree.ElementTree as ET
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from numpy.lib.recfunctions import structured_to_unstructured
from scipy.io import arff

from .container import MIMLData

__all__ = ["read_bag_csv", "read_miml_arff"]


# -- shared ------------------------------------------------------------------


def _existing(path: str | Path) -> Path:
    p = Path(path)
    if not p.is_file():
        raise ValueError(f"{path}: no such file")
    return p


def _read_text(path: Path) -> str:
    try:
        # utf-8-sig: a byte-order mark would otherwise stick to the first field
        return path.read_text(encoding="utf-8-sig")
    except UnicodeDecodeError as e:
        raise ValueError(f"{path}: not UTF-8 text ({e})") from e


def _is_number(text: str) -> bool:
    try:
        float(text)
    except ValueError:
        return False
    return True


class _Malformed(ValueError):
    """A problem found on one line; the caller adds file and line."""


# -- relational ARFF -----------------------------------------------------------


@dataclass(frozen=True)
class _Attr:
    name: str
    kind: str  # "nominal", "numeric", "string", "relational", or the declared type word
    values: tuple[str, ...]  # nominal values (empty otherwise)
    line: int
    children: tuple[_Attr, ...] = ()  # a relational attribute's instance attributes


@dataclass(frozen=True)
class _Row:
    line: int
    text: str  # the stripped line, as handed to scipy
    values: list[str]  # top-level values, quotes removed
    instances: list[list[str]]  # the bag's instances, each a list of value strings


@dataclass(frozen=True)
class _Layout:
    id_attr: _Attr
    bag: _Attr
    labels: list[_Attr]
    n_values: int  # values per data row


def read_miml_arff(arff_path: str | Path, xml_path: str | Path | None = None) -> MIMLData:
    """Read a MIML data set from a relational ARFF file (format: see the module docstring).

    Args:
        arff_path: the ``.arff`` file, one data row per bag.
        xml_path: optional Mulan labels XML naming the label attributes;
            without it every attribute after the relational bag is a label.

    Returns:
        ``MIMLData`` with B bags of shape (n_b, d) (d = the relational
        attribute's numeric sub-attributes, whose names become
        ``feature_names``), C = number of labels (``class_names`` = the label
        attributes, in file order), ``bag_ids`` = the id values as str, and
        no instance labels.

    Raises:
        ValueError: a missing file or malformed content, naming the file and,
            where it can be pinned down, the line.
    """
    path = _existing(arff_path)
    xml = None if xml_path is None else _existing(xml_path)
    lines = [line.strip() for line in _read_text(path).splitlines()]
    attrs, data_start = _scan_header(path, lines)
    layout = _layout(path, attrs, xml)
    rows = _scan_rows(path, lines, data_start, layout)
    if not rows:
        raise ValueError(f"{path}: the @data section holds no bags")
    header = _scipy_header(path, lines[:data_start], layout, rows)
    text = "\n".join(header + [r.text for r in rows]) + "\n"
    try:
        table, _ = arff.loadarff(io.StringIO(text))
    except (ValueError, IndexError, arff.ArffError, NotImplementedError) as e:
        raise _locate(path, layout, rows, header, e) from e
    return _assemble(path, layout, rows, table)


def _scan_header(path: Path, lines: list[str]) -> tuple[list[_Attr], int]:
    """Top-level attributes (relational ones with their children) and the index of the first data line."""
    attrs: list[_Attr] = []
    open_rel: tuple[str, int, list[_Attr]] | None = None  # the relational attribute being declared
    for i, line in enumerate(lines):
        if not line or line.startswith("%"):
            continue
        word = line.split(None, 1)[0].lower()
        try:
            if word == "@data":
                if open_rel is not None:
                    raise _Malformed(f"@data before '@end {open_rel[0]}' (declared on line {open_rel[1]})")
                return attrs, i + 1
            if word == "@relation":
                continue
            if word == "@end":
                parts = line.split(None, 1)
                name = _unquote(parts[1]) if len(parts) > 1 else ""
                if open_rel is None or name != open_rel[0]:
                    raise _Malformed(f"{line!r} closes no open relational attribute")
                attrs.append(_Attr(open_rel[0], "relational", (), open_rel[1], tuple(open_rel[2])))
                open_rel = None
                continue
            if word != "@attribute":
                raise _Malformed(f"expected @relation, @attribute, @end or @data, got {line[:40]!r}")
            attr = _parse_attribute(line, i + 1)
        except _Malformed as e:
            raise ValueError(f"{path}, line {i + 1}: {e}") from None
        if attr.kind == "relational":
            if open_rel is not None:
                raise ValueError(f"{path}, line {i + 1}: nested relational attributes are not supported")
            open_rel = (attr.name, attr.line, [])
        elif open_rel is not None:
            open_rel[2].append(attr)
        else:
            attrs.append(attr)
    raise ValueError(f"{path}: no @data line")


def _parse_attribute(line: str, lineno: int) -> _Attr:
    parts = line.split(None, 1)
    rest = parts[1].strip() if len(parts) > 1 else ""
    if rest[:1] in ("'", '"'):
        end = rest.find(rest[0], 1)
        if end < 0:
            raise _Malformed("unterminated quote in the attribute name")
        name, kind = rest[1:end], rest[end + 1 :].strip()
    else:
        name, kind = (re.split(r"\s+", rest, maxsplit=1) + [""])[:2]
    if not name or not kind:
        raise _Malformed(f"cannot read an attribute name and type from {line!r}")
    if kind.startswith("{"):
        if not kind.endswith("}"):
            raise _Malformed(f"nominal attribute {name!r} lacks its closing brace")
        values = tuple(_split_values(kind[1:-1]))
        return _Attr(name, "nominal", values, lineno)
    word = kind.split()[0].lower()
    return _Attr(name, "numeric" if word in ("numeric", "real", "integer") else word, (), lineno)


def _unquote(text: str) -> str:
    text = text.strip()
    return text[1:-1] if len(text) >= 2 and text[0] == text[-1] and text[0] in "'\"" else text


def _split_values(text: str) -> list[str]:
    """Comma-separated values; a value may be quoted with ' or " (backslash escapes kept as written)."""
    if "'" not in text and '"' not in text:  # the common case, e.g. every instance
        return [v.strip() for v in text.split(",")]
    values: list[str] = []
    i, n = 0, len(text)
    while True:
        while i < n and text[i] in " \t":
            i += 1
        if i < n and text[i] in "'\"":
            j = _closing_quote(text, i)
            values.append(text[i + 1 : j])
            i = j + 1
            while i < n and text[i] in " \t":
                i += 1
            if i < n and text[i] != ",":
                raise _Malformed(f"text after a quoted value at column {i + 1}: {text[i : i + 20]!r}")
        else:
            j = text.find(",", i)
            j = n if j < 0 else j
            values.append(text[i:j].strip())
            i = j
        if i >= n:
            return values
        i += 1


def _closing_quote(text: str, start: int) -> int:
    """Index of the quote closing the one at ``start``; a quote after an odd run of backslashes is escaped."""
    quote, j = text[start], start
    while True:
        j = text.find(quote, j + 1)
        if j < 0:
            raise _Malformed(f"unterminated {quote} quote starting at column {start + 1}")
        k = j
        while text[k - 1] == "\\":
            k -= 1
        if (j - k) % 2 == 0:
            return j


_ESCAPES = {"n": "\n", "r": "\r", "t": "\t"}


def _instances(value: str) -> list[str]:
    # Weka writes the bag as one value whose instances are joined by the escape \n
    unescaped = re.sub(r"\\(.)", lambda m: _ESCAPES.get(m.group(1), m.group(1)), value)
    return [inst.strip() for inst in unescaped.split("\n")]


def _layout(path: Path, attrs: list[_Attr], xml: Path | None) -> _Layout:
    """Which attribute is the id, which the bag, which the labels; checks their types."""
    if len(attrs) < 2 or attrs[1].kind != "relational":
        rel = [a for a in attrs if a.kind == "relational"]
        found = f"a relational attribute on line {rel[0].line}" if rel else "no relational attribute"
        where = f"{path}, line {attrs[1].line}" if len(attrs) >= 2 else f"{path}"
        raise ValueError(
            f"{where}: expected the bag id as first and the relational bag as second attribute; found {found}"
        )
    id_attr, bag, rest = attrs[0], attrs[1], attrs[2:]
    if id_attr.kind not in ("nominal", "string"):
        raise ValueError(
            f"{path}, line {id_attr.line}: the bag id {id_attr.name!r} must be nominal or string"
        )
    if not bag.children:
        raise ValueError(f"{path}, line {bag.line}: relational attribute {bag.name!r} has no features")
    for a in bag.children:
        if a.kind != "numeric":
            raise ValueError(
                f"{path}, line {a.line}: feature {a.name!r} is {a.kind}; features must be numeric"
            )
    for group in (attrs, bag.children):
        _check_unique_names(path, group)
    extra_rel = [a for a in rest if a.kind == "relational"]
    if extra_rel:
        raise ValueError(f"{path}, line {extra_rel[0].line}: a second relational attribute is not supported")
    if xml is not None:
        _check_xml_labels(path, xml, rest)
    for a in rest:
        if a.kind != "nominal" or sorted(a.values) != ["0", "1"]:
            raise ValueError(f"{path}, line {a.line}: label {a.name!r} must be declared {{0,1}}")
    if not rest:
        raise ValueError(f"{path}: no label attributes after {bag.name!r}")
    return _Layout(id_attr, bag, rest, len(attrs))


def _check_unique_names(path: Path, attrs: Sequence[_Attr]) -> None:
    seen: dict[str, int] = {}
    for a in attrs:
        if a.name in seen:
            raise ValueError(
                f"{path}, line {a.line}: attribute {a.name!r} already declared on line {seen[a.name]}"
            )
        seen[a.name] = a.line


def _check_xml_labels(path: Path, xml: Path, rest: list[_Attr]) -> None:
    """The XML must name exactly the attributes after the bag."""
    names = _xml_label_names(xml)
    declared = {a.name for a in rest}
    missing = [n for n in names if n not in declared]
    if missing:
        raise ValueError(f"{xml}: label(s) {missing} are not label attributes of {path}")
    for a in rest:
        if a.name not in names:
            raise ValueError(
                f"{path}, line {a.line}: attribute {a.name!r} is not a label in {xml}; after the bag a "
                "MIML ARFF file holds only labels"
            )


def _xml_label_names(xml: Path) -> list[str]:
    try:
        root = ET.parse(xml).getroot()
    except ET.ParseError as e:
        raise ValueError(f"{xml}, line {e.position[0]}: not well-formed XML ({e})") from e
    # Mulan nests labels to form hierarchies and uses a namespace: match every <label> at any depth
    elements = [el for el in root.iter() if el.tag.rsplit("}", 1)[-1] == "label"]
    names = [el.get("name") for el in elements]
    if not names:
        raise ValueError(f"{xml}: no <label name=...> elements")
    if None in names:
        raise ValueError(f"{xml}: a <label> element has no name attribute")
    dup = sorted({n for n in names if names.count(n) > 1})
    if dup:
        raise ValueError(f"{xml}: label(s) {dup} named more than once")
    return names


def _scan_rows(path: Path, lines: list[str], start: int, layout: _Layout) -> list[_Row]:
    """Split every data line; check value and instance counts, which scipy does not (it drops extras)."""
    rows: list[_Row] = []
    first_line: dict[str, int] = {}
    for i in range(start, len(lines)):
        line = lines[i]
        if not line or line.startswith("%"):
            continue
        try:
            row = _scan_row(line, i + 1, layout)
        except _Malformed as e:
            raise ValueError(f"{path}, line {i + 1}: {e}") from None
        bag_id = row.values[0]
        if bag_id in first_line:
            raise ValueError(
                f"{path}, line {i + 1}: bag id {bag_id!r} already used on line {first_line[bag_id]}"
            )
        first_line[bag_id] = i + 1
        rows.append(row)
    return rows


def _scan_row(line: str, lineno: int, layout: _Layout) -> _Row:
    values = _split_values(line)
    if len(values) != layout.n_values:
        raise _Malformed(
            f"{len(values)} values, expected {layout.n_values} (bag id, bag, {len(layout.labels)} labels)"
        )
    if values[0] in ("", "?"):
        raise _Malformed("the bag id is missing")
    d = len(layout.bag.children)
    instances = []
    for k, inst in enumerate(_instances(values[1]), start=1):
        if not inst:
            raise _Malformed(f"bag {values[0]!r}: instance {k} is empty (an empty bag, or a stray \\n?)")
        vals = _split_values(inst)
        if len(vals) != d:
            raise _Malformed(
                f"bag {values[0]!r}: instance {k} has {len(vals)} value(s), expected {d} features"
            )
        instances.append(vals)
    return _Row(lineno, line, values, instances)


def _scipy_header(path: Path, header: list[str], layout: _Layout, rows: list[_Row]) -> list[str]:
    """The header lines for scipy: string ids become nominal (scipy refuses string attributes)."""
    if layout.id_attr.kind != "string":
        return header
    ids = []
    for r in rows:
        if "'" in r.values[0] or "\\" in r.values[0]:
            raise ValueError(f"{path}, line {r.line}: bag id {r.values[0]!r} holds a quote or backslash")
        ids.append(f"'{r.values[0]}'" if re.search(r"[\s,{}%\"]", r.values[0]) else r.values[0])
    out = list(header)
    i = layout.id_attr.line - 1
    out[i] = re.sub(r"string\s*$", "{" + ",".join(ids) + "}", out[i], flags=re.IGNORECASE)
    return out


def _locate(path: Path, layout: _Layout, rows: list[_Row], header: list[str], err: Exception) -> ValueError:
    """A ValueError with the line scipy failed on: by our value checks, else by reparsing rows one by one."""
    try:
        arff.loadarff(io.StringIO("\n".join(header) + "\n"))
    except Exception as e:
        return ValueError(f"{path}: scipy.io.arff cannot read the header ({type(e).__name__}: {e})")
    for row in rows:
        problem = _value_problem(row, layout)
        if problem:
            return ValueError(f"{path}, line {row.line}: {problem}")
    for row in rows:
        try:
            arff.loadarff(io.StringIO("\n".join([*header, row.text]) + "\n"))
        except Exception as e:  # any failure of the row alone pins it down
            return ValueError(f"{path}, line {row.line}: scipy.io.arff cannot read this row ({e})")
    for row in rows[1:]:
        try:
            arff.loadarff(io.StringIO("\n".join([*header, rows[0].text, row.text]) + "\n"))
        except Exception:
            return ValueError(
                f"{path}, line {row.line}: this row is quoted differently from the first data row "
                f"(line {rows[0].line}); scipy.io.arff reads every row the way it guessed from the first, "
                "so quote every bag the same way"
            )
    return ValueError(f"{path}: scipy.io.arff cannot read the file ({type(err).__name__}: {err})")


def _value_problem(row: _Row, layout: _Layout) -> str | None:
    """What scipy would reject in this row's values, or None."""
    bag_id = row.values[0]
    if not bag_id.isascii():
        return f"bag id {bag_id!r} is not ASCII (scipy.io.arff stores nominal values as bytes)"
    if layout.id_attr.kind == "nominal" and bag_id not in layout.id_attr.values:
        decl = layout.id_attr
        return f"bag id {bag_id!r} is not among the values of {decl.name!r} (declared on line {decl.line})"
    for k, inst in enumerate(row.instances, start=1):
        for feat, v in zip(layout.bag.children, inst):
            if "?" not in v and not _is_number(v):
                return f"bag {bag_id!r}, instance {k}, feature {feat.name!r}: {v!r} is not a number"
    for label, v in zip(layout.labels, row.values[2:]):
        if v not in ("0", "1", "?"):
            return f"label {label.name!r} is {v!r}, expected 0 or 1"
    return None


def _assemble(path: Path, layout: _Layout, rows: list[_Row], table: np.ndarray) -> MIMLData:
    """MIMLData from scipy's table, checking what scipy lets through (``?`` values, non-finite numbers)."""
    if len(table) != len(rows):
        raise ValueError(f"{path}: scipy.io.arff read {len(table)} rows, the file has {len(rows)} data lines")
    features = [a.name for a in layout.bag.children]
    bags, label_sets, ids = [], [], []
    for row, rec in zip(rows, table):
        x = structured_to_unstructured(rec[layout.bag.name], dtype=np.float64).reshape(-1, len(features))
        if len(x) != len(row.instances):
            raise ValueError(
                f"{path}, line {row.line}: scipy.io.arff read {len(x)} instances, "
                f"the row has {len(row.instances)}"
            )
        bad = np.argwhere(~np.isfinite(x))
        if len(bad):
            k, j = bad[0]
            raise ValueError(
                f"{path}, line {row.line}: bag {row.values[0]!r}, instance {k + 1}, feature {features[j]!r}: "
                f"{row.instances[k][j]!r} is missing or not finite"
            )
        flags = [rec[a.name].decode() for a in layout.labels]
        if "?" in flags:
            label = layout.labels[flags.index("?")]
            raise ValueError(
                f"{path}, line {row.line}: label {label.name!r} is missing ('?'), expected 0 or 1"
            )
        bags.append(x)
        label_sets.append([c for c, f in enumerate(flags) if f == "1"])
        ids.append(rec[layout.id_attr.name].decode())
    try:
        return MIMLData(
            bags=bags,
            label_sets=label_sets,
            class_names=[a.name for a in layout.labels],
            feature_names=features,
            n_classes=len(layout.labels),
            bag_ids=ids,
        )
    except ValueError as e:
        raise ValueError(f"{path}: {e}") from e


# -- bag CSV -------------------------------------------------------------------


def read_bag_csv(
    features_csv: str | Path,
    bag_labels_csv: str | Path,
    instance_labels_csv: str | Path | None = None,
    *,
    n_classes: int | None = None,
) -> MIMLData:
    """Read a MIML data set from the HJA three-file CSV layout (format: see the module docstring).

    Args:
        features_csv: one row per instance: bag id, then d numbers.
        bag_labels_csv: one row per bag: bag id, then its class indices.
        instance_labels_csv: optional, one row per instance in the order of
            ``features_csv``: bag id, instance class index.
        n_classes: C; default: largest label + 1 (at least 2).

    Returns:
        ``MIMLData`` with B bags of shape (n_b, d) in order of first
        appearance in ``features_csv``, their label sets, ``bag_ids`` (str),
        ``feature_names`` from the header (else "x0".."x{d-1}") and, with
        ``instance_labels_csv``, B int arrays (n_b,) of instance labels.

    Raises:
        ValueError: a missing file or malformed content, naming the file and,
            where it sits on one line, the line.
    """
    fpath, lpath = _existing(features_csv), _existing(bag_labels_csv)
    ipath = None if instance_labels_csv is None else _existing(instance_labels_csv)
    names, x, ids, flines = _read_features(fpath)
    labels = _read_bag_labels(lpath, n_classes)
    _match_bags(fpath, lpath, ids, labels)
    inst = None if ipath is None else _read_instance_labels(ipath, fpath, ids, flines, n_classes)
    try:
        return MIMLData.from_arrays(
            x,
            {bag: labs for bag, (_, labs) in labels.items()},
            bag_ids=np.asarray(ids),
            instance_labels=inst,
            feature_names=names,
            n_classes=n_classes,
        )
    except ValueError as e:
        files = ", ".join(str(p) for p in (fpath, lpath, ipath) if p is not None)
        raise ValueError(f"{files}: {e}") from e


def _csv_rows(path: Path) -> tuple[list[str] | None, list[tuple[int, list[str]]]]:
    """``(header or None, [(line, fields)])``; blank rows are skipped, fields stripped."""
    rows = []
    with io.StringIO(_read_text(path), newline="") as f:
        reader = csv.reader(f)
        prev = 0
        try:
            for fields in reader:
                line, prev = prev + 1, reader.line_num
                fields = [v.strip() for v in fields]
                if any(fields):
                    rows.append((line, fields))
        except csv.Error as e:
            raise ValueError(f"{path}, line {reader.line_num}: {e}") from e
    if not rows:
        raise ValueError(f"{path}: the file holds no rows")
    first = rows[0][1]
    # A header names columns: no field after the bag-id column reads as a number
    if len(first) >= 2 and not any(_is_number(v) for v in first[1:]):
        return first, rows[1:]
    return None, rows


def _read_features(path: Path) -> tuple[list[str] | None, np.ndarray, list[str], list[int]]:
    """``(feature names or None, (n, d) features, n bag ids, n line numbers)``."""
    header, rows = _csv_rows(path)
    if not rows:
        raise ValueError(f"{path}: the file holds a header but no instances")
    first_line, first = rows[0]
    width = len(first)
    if width < 2:
        raise ValueError(f"{path}, line {first_line}: a row needs the bag id and at least one feature")
    if header is not None and len(header) != width:
        raise ValueError(f"{path}, line 1: the header has {len(header)} fields, the rows {width}")
    x = np.empty((len(rows), width - 1))
    for r, (line, fields) in enumerate(rows):
        if len(fields) != width:
            raise ValueError(
                f"{path}, line {line}: {len(fields)} fields, expected {width} "
                f"(bag id and {width - 1} features, as on line {first_line})"
            )
        if not fields[0]:
            raise ValueError(f"{path}, line {line}: the bag id is empty")
        try:
            x[r] = [float(v) for v in fields[1:]]
        except ValueError:
            bad = next(j for j, v in enumerate(fields[1:], start=2) if not _is_number(v))
            raise ValueError(
                f"{path}, line {line}: field {bad} {fields[bad - 1]!r} is not a number"
            ) from None
    if not np.all(np.isfinite(x)):
        r, j = np.argwhere(~np.isfinite(x))[0]
        line, fields = rows[r]
        raise ValueError(f"{path}, line {line}: field {j + 2} {fields[j + 1]!r} is not a finite number")
    return None if header is None else header[1:], x, [f[0] for _, f in rows], [line for line, _ in rows]


def _label(path: Path, line: int, j: int, v: str, n_classes: int | None) -> int:
    try:
        c = int(v)
    except ValueError:
        raise ValueError(f"{path}, line {line}: field {j} {v!r} is not an integer class index") from None
    if c < 0:
        raise ValueError(f"{path}, line {line}: field {j}: class {c} is negative")
    if n_classes is not None and c >= n_classes:
        raise ValueError(f"{path}, line {line}: field {j}: class {c} is outside [0, {n_classes}) (n_classes)")
    return c


def _read_bag_labels(path: Path, n_classes: int | None) -> dict[str, tuple[int, list[int]]]:
    """bag id -> (line, class indices), in file order."""
    _, rows = _csv_rows(path)
    labels: dict[str, tuple[int, list[int]]] = {}
    for line, fields in rows:
        bag, values = fields[0], fields[1:]
        while values and not values[-1]:  # a trailing comma ("7,") is an empty label list
            values.pop()
        if not bag:
            raise ValueError(f"{path}, line {line}: the bag id is empty")
        if bag in labels:
            raise ValueError(
                f"{path}, line {line}: bag {bag!r} already has a label row on line {labels[bag][0]}"
            )
        labels[bag] = (line, [_label(path, line, j, v, n_classes) for j, v in enumerate(values, start=2)])
    return labels


def _match_bags(fpath: Path, lpath: Path, ids: list[str], labels: dict[str, tuple[int, list[int]]]) -> None:
    order = list(dict.fromkeys(ids))
    unlabelled = [b for b in order if b not in labels]
    if unlabelled:
        raise ValueError(f"{lpath}: bag(s) {unlabelled[:20]} have instances in {fpath} but no label row here")
    present = set(order)
    empty = [f"{b!r} (line {line})" for b, (line, _) in labels.items() if b not in present]
    if empty:
        raise ValueError(f"{lpath}: bag(s) {', '.join(empty[:20])} have no instances in {fpath}")


def _read_instance_labels(
    path: Path, fpath: Path, ids: list[str], flines: list[int], n_classes: int | None
) -> np.ndarray:
    """(n,) instance labels; row k must name the bag of instance k of the features file."""
    _, rows = _csv_rows(path)
    out = np.empty(len(ids), dtype=np.int64)
    for k, (line, fields) in enumerate(rows):
        if k >= len(ids):
            raise ValueError(f"{path}, line {line}: more rows than the {len(ids)} instances of {fpath}")
        if len(fields) != 2:
            raise ValueError(
                f"{path}, line {line}: {len(fields)} fields, expected 2 (bag id, instance label)"
            )
        if fields[0] != ids[k]:
            raise ValueError(
                f"{path}, line {line}: bag id {fields[0]!r}, but instance {k + 1} "
                f"({fpath}, line {flines[k]}) is in bag {ids[k]!r}"
            )
        out[k] = _label(path, line, 2, fields[1], n_classes)
    if len(rows) < len(ids):
        raise ValueError(
            f"{path}: {len(rows)} rows, but {fpath} has {len(ids)} instances (the first without a label is "
            f"on line {flines[len(rows)]} of {fpath})"
        )
    return out
