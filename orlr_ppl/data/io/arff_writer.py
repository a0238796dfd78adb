"""Writer for MIML data in relational ARFF with a Mulan XML label file (``arff``'s format).

``write_miml_arff`` writes what ``read_miml_arff`` reads back exactly: the
bag ids, every instance's features (``repr`` of each float, so no digit is
lost), the label sets, and the feature and class names. Instance labels have
no place in the format and are not written (the call says so by returning
how many labelled instances it left out). The format has no escape for a
quote inside a quoted name, so names holding both quote characters are refused rather than mangled.
"""

from __future__ import annotations

import re
from pathlib import Path
from xml.sax.saxutils import quoteattr

import numpy as np

from ..container import MIMLData

__all__ = ["write_miml_arff"]

_PLAIN = re.compile(r"[A-Za-z0-9_.\-]+")


def _quoted(name: str, what: str) -> str:
    """``name`` as one ARFF token: bare when it is plain, else in single quotes (double if it holds one)."""
    if _PLAIN.fullmatch(name):
        return name
    quote = '"' if "'" in name else "'"
    if quote in name or "\\" in name or "\n" in name:
        raise ValueError(
            f"{what} {name!r} holds both quotes, a backslash or a newline, which ARFF cannot carry: rename it"
        )
    return f"{quote}{name}{quote}"


def write_miml_arff(
    data: MIMLData, arff_path: str | Path, xml_path: str | Path | None = None, relation: str = "miml"
) -> int:
    """Write ``data`` as a relational ARFF file and a Mulan XML naming its labels.

    Args:
        data: the bags (B, each (n_b, d)) and their label sets (required).
        arff_path: the ``.arff`` file to write.
        xml_path: the Mulan XML file; default: ``arff_path`` with ``.xml``.
        relation: the ``@relation`` name.

    Returns:
        The number of labelled instances whose labels the format cannot hold
        (0 without instance labels), so that nothing is dropped unannounced.

    Raises:
        ValueError: no label sets, or a name ARFF cannot carry.
    """
    if data.label_sets is None:
        raise ValueError("a MIML ARFF file holds one label set per bag, and these data have none")
    arff_path = Path(arff_path)
    xml_path = arff_path.with_suffix(".xml") if xml_path is None else Path(xml_path)
    ids = [_quoted(str(b), "bag id") for b in data.bag_ids]
    features = [_quoted(f, "feature name") for f in data.feature_names]
    classes = [_quoted(c, "class name") for c in data.class_names]
    lines = [f"@relation {_quoted(relation, 'relation')}", f"@attribute bag_id {{{','.join(ids)}}}"]
    lines += ["@attribute bag relational", *[f"  @attribute {f} numeric" for f in features], "@end bag"]
    lines += [f"@attribute {c} {{0,1}}" for c in classes]
    lines.append("@data")
    for bag_id, x, labels in zip(ids, data.bags, data.label_sets):
        bag = "\\n".join(",".join(repr(float(v)) for v in row) for row in np.asarray(x))
        present = set(labels)
        flags = ",".join("1" if c in present else "0" for c in range(data.n_classes))
        lines.append(f"{bag_id},'{bag}',{flags}")
    arff_path.write_text("\n".join(lines) + "\n")
    names = "".join(f"<label name={quoteattr(c)}/>" for c in data.class_names)
    xml_path.write_text(
        f'<?xml version="1.0" encoding="utf-8"?>\n<labels xmlns="http://mulan.sourceforge.net/labels">'
        f"{names}</labels>\n"
    )
    if data.instance_labels is None:
        return 0
    return int(sum(np.sum(np.asarray(y) >= 0) for y in data.instance_labels))
