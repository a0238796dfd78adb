"""Reader for MIML data in relational ARFF, with optional Mulan XML label names.

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

One data row per bag; values are separated by commas. A nominal id
attribute declares the bags: every declared id needs its row, so a file cut
short (at a row boundary, where nothing else looks wrong) is an error naming
both counts; a string id declares no count. A bag needs at least
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
"""

from __future__ import annotations

import io
import re
import xml.etree.ElementTree as ET
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from numpy.lib.recfunctions import structured_to_unstructured
from scipy.io import arff

from ..container import MIMLData
from ._arff_syntax import Attr, bag_instances, scan_header, split_values
from ._text import Malformed, existing_file, is_number, read_text

__all__ = ["read_miml_arff"]


@dataclass(frozen=True)
class _Row:
    line: int
    text: str  # the stripped line, as handed to scipy
    values: list[str]  # top-level values, quotes removed
    instances: list[list[str]]  # the bag's instances, each a list of value strings


@dataclass(frozen=True)
class _Layout:
    id_attr: Attr
    bag: Attr
    labels: list[Attr]
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
    path = existing_file(arff_path)
    xml = None if xml_path is None else existing_file(xml_path)
    lines = [line.strip() for line in read_text(path).splitlines()]
    attrs, data_start = scan_header(path, lines)
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
    data = _assemble(path, layout, rows, table)
    _check_complete(path, layout, rows)
    return data


def _check_complete(path: Path, layout: _Layout, rows: list[_Row]) -> None:
    """Every bag a nominal id declares has a row: a truncated file must not pass as a smaller data set."""
    decl = layout.id_attr
    declared = list(dict.fromkeys(decl.values))
    if decl.kind != "nominal" or len(rows) >= len(declared):
        return
    read = {r.values[0] for r in rows}
    missing = [v for v in declared if v not in read]
    raise ValueError(
        f"{path}: the bag id attribute {decl.name!r} (line {decl.line}) declares {len(declared)} bags, but "
        f"the @data section holds {len(rows)}; is the file cut short? Bags without a row: {missing[:10]}"
        f"{' ...' if len(missing) > 10 else ''}. Restore the complete file, or remove those ids from the "
        "declaration"
    )


def _layout(path: Path, attrs: list[Attr], xml: Path | None) -> _Layout:
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


def _check_unique_names(path: Path, attrs: Sequence[Attr]) -> None:
    seen: dict[str, int] = {}
    for a in attrs:
        if a.name in seen:
            raise ValueError(
                f"{path}, line {a.line}: attribute {a.name!r} already declared on line {seen[a.name]}"
            )
        seen[a.name] = a.line


def _check_xml_labels(path: Path, xml: Path, rest: list[Attr]) -> None:
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
        except Malformed as e:
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
    values = split_values(line)
    if len(values) != layout.n_values:
        raise Malformed(
            f"{len(values)} values, expected {layout.n_values} (bag id, bag, {len(layout.labels)} labels)"
        )
    if values[0] in ("", "?"):
        raise Malformed("the bag id is missing")
    d = len(layout.bag.children)
    instances = []
    for k, inst in enumerate(bag_instances(values[1]), start=1):
        if not inst:
            raise Malformed(f"bag {values[0]!r}: instance {k} is empty (an empty bag, or a stray \\n?)")
        vals = split_values(inst)
        if len(vals) != d:
            raise Malformed(
                f"bag {values[0]!r}: instance {k} has {len(vals)} value(s), expected {d} features"
            )
        instances.append(vals)
    return _Row(lineno, line, values, instances)


def _scipy_header(path: Path, header: list[str], layout: _Layout, rows: list[_Row]) -> list[str]:
    """The header lines for scipy: string ids become nominal (scipy refuses string attributes), and
    the labels get plain names (``_scipy_label``): scipy cannot tokenise a name quoted with ``"``
    that holds a ``'`` (HJA's "SWTH - Swainson's Thrush"); their own names come from our parse."""
    header = list(header)
    for j, a in enumerate(layout.labels):
        header[a.line - 1] = f"@attribute {_scipy_label(j)} {{{','.join(a.values)}}}"
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


def _scipy_label(j: int) -> str:
    return f"orlr_label_{j}__"


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
            if "?" not in v and not is_number(v):
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
        flags = [rec[_scipy_label(j)].decode() for j in range(len(layout.labels))]
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
