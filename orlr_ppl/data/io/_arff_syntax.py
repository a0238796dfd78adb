"""The ARFF text layer: attribute declarations and comma-separated, quoted values.

Knows nothing of MIML: ``arff`` decides which attribute is the bag id, the
bag and the labels. Line numbers count from 1; a ``Malformed`` raised here
is given its file and line by the caller.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from ._text import Malformed


@dataclass(frozen=True)
class Attr:
    """One ``@attribute`` declaration, with the line it is on."""

    name: str
    kind: str  # "nominal", "numeric", "string", "relational", or the declared type word
    values: tuple[str, ...]  # nominal values (empty otherwise)
    line: int
    children: tuple[Attr, ...] = ()  # a relational attribute's instance attributes


def scan_header(path: Path, lines: list[str]) -> tuple[list[Attr], int]:
    """Top-level attributes (relational ones with their children) and the index of the first data line."""
    attrs: list[Attr] = []
    open_rel: tuple[str, int, list[Attr]] | None = None  # the relational attribute being declared
    for i, line in enumerate(lines):
        if not line or line.startswith("%"):
            continue
        word = line.split(None, 1)[0].lower()
        try:
            if word == "@data":
                if open_rel is not None:
                    raise Malformed(f"@data before '@end {open_rel[0]}' (declared on line {open_rel[1]})")
                return attrs, i + 1
            if word == "@relation":
                continue
            if word == "@end":
                parts = line.split(None, 1)
                name = unquote(parts[1]) if len(parts) > 1 else ""
                if open_rel is None or name != open_rel[0]:
                    raise Malformed(f"{line!r} closes no open relational attribute")
                attrs.append(Attr(open_rel[0], "relational", (), open_rel[1], tuple(open_rel[2])))
                open_rel = None
                continue
            if word != "@attribute":
                raise Malformed(f"expected @relation, @attribute, @end or @data, got {line[:40]!r}")
            attr = _parse_attribute(line, i + 1)
        except Malformed as e:
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


def _parse_attribute(line: str, lineno: int) -> Attr:
    parts = line.split(None, 1)
    rest = parts[1].strip() if len(parts) > 1 else ""
    if rest[:1] in ("'", '"'):
        end = rest.find(rest[0], 1)
        if end < 0:
            raise Malformed("unterminated quote in the attribute name")
        name, kind = rest[1:end], rest[end + 1 :].strip()
    else:
        name, kind = (re.split(r"\s+", rest, maxsplit=1) + [""])[:2]
    if not name or not kind:
        raise Malformed(f"cannot read an attribute name and type from {line!r}")
    if kind.startswith("{"):
        if not kind.endswith("}"):
            raise Malformed(f"nominal attribute {name!r} lacks its closing brace")
        values = tuple(split_values(kind[1:-1]))
        return Attr(name, "nominal", values, lineno)
    word = kind.split()[0].lower()
    return Attr(name, "numeric" if word in ("numeric", "real", "integer") else word, (), lineno)


def unquote(text: str) -> str:
    text = text.strip()
    return text[1:-1] if len(text) >= 2 and text[0] == text[-1] and text[0] in "'\"" else text


def split_values(text: str) -> list[str]:
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
                raise Malformed(f"text after a quoted value at column {i + 1}: {text[i : i + 20]!r}")
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
            raise Malformed(f"unterminated {quote} quote starting at column {start + 1}")
        k = j
        while text[k - 1] == "\\":
            k -= 1
        if (j - k) % 2 == 0:
            return j


_ESCAPES = {"n": "\n", "r": "\r", "t": "\t"}


def bag_instances(value: str) -> list[str]:
    # Weka writes the bag as one value whose instances are joined by the escape \n
    unescaped = re.sub(r"\\(.)", lambda m: _ESCAPES.get(m.group(1), m.group(1)), value)
    return [inst.strip() for inst in unescaped.split("\n")]
