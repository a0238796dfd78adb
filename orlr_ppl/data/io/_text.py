"""Helpers every reader shares: opening a file, reading it as text, telling numbers, line errors."""

from __future__ import annotations

from pathlib import Path


def existing_file(path: str | Path) -> Path:
    """``path`` as a Path; a ValueError naming it when it is not a file."""
    p = Path(path)
    if not p.is_file():
        raise ValueError(f"{path}: no such file")
    return p


def read_text(path: Path) -> str:
    """The file's text; a ValueError naming it when it is not UTF-8."""
    try:
        # utf-8-sig: a byte-order mark would otherwise stick to the first field
        return path.read_text(encoding="utf-8-sig")
    except UnicodeDecodeError as e:
        raise ValueError(f"{path}: not UTF-8 text ({e})") from e


def is_number(text: str) -> bool:
    """Whether ``float`` reads ``text``."""
    try:
        float(text)
    except ValueError:
        return False
    return True


class Malformed(ValueError):
    """A problem found on one line; the caller adds file and line."""
