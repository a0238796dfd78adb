"""MkDocs hooks: the repository's notebooks, BENCHMARKS.md and REPRODUCTION.md in the site, read in place.

The notebooks stay in ``notebooks/`` and the two long reports at the repository's root, where
GitHub, the tests and the benchmarks find them; nothing is copied into ``docs/``. At build time
``on_files`` adds each of them to the site as a page of its own:

- ``notebooks/NAME.ipynb``: rendered by mkdocs-jupyter from its stored outputs (never executed);
- ``repo/BENCHMARKS.md`` and ``repo/REPRODUCTION.md``: the root files as they are at build time.

Links are written for the repository, so that they work on GitHub and in an editor: a guide page
links ``../../BENCHMARKS.md``, the home page ``../notebooks/01_map_vs_posterior.ipynb``.
``on_page_markdown`` maps each relative link to the page it names in the site; a link to a
repository file that the site does not hold (a benchmark script, a test) becomes text that names
the file's path, so the page reads the same and ``mkdocs build --strict`` passes. Links inside
``docs/`` to files that do not exist are left alone, for MkDocs to report.

A notebook added to ``notebooks/`` joins the site by itself, and the strict build then asks for
its place in ``mkdocs.yml``'s nav.
"""

from __future__ import annotations

import posixpath
import re
from pathlib import Path

from mkdocs.plugins import event_priority
from mkdocs.structure.files import File, Files

ROOT = Path(__file__).resolve().parents[1]

REPORTS = ("BENCHMARKS.md", "REPRODUCTION.md")
"""Root documents rendered as pages under ``repo/``."""


def _extra_pages() -> dict[str, Path]:
    """Site path (``src_uri``) -> the repository file it is read from."""
    pages = {f"notebooks/{p.name}": p for p in sorted((ROOT / "notebooks").glob("*.ipynb"))}
    pages.update({f"repo/{name}": ROOT / name for name in REPORTS if (ROOT / name).is_file()})
    return pages


# Runs before mkdocs-jupyter's on_files (priority 0), which turns .ipynb files into pages.
@event_priority(100)
def on_files(files: Files, config) -> Files:
    for src_uri, path in _extra_pages().items():
        if src_uri.startswith("notebooks/"):
            # A file with a source folder: mkdocs-jupyter's wrapper finds it through src_dir.
            files.append(File(src_uri, str(ROOT), config["site_dir"], config["use_directory_urls"]))
        else:
            files.append(File.generated(config, src_uri, abs_src_path=str(path)))
    return files


# Fenced code and inline code are copied as they are; links outside them are mapped.
_TOKENS = re.compile(
    r"(?P<fence>^(?P<ticks>```+|~~~+).*?^(?P=ticks)[ \t]*$)"
    r"|(?P<code>(?P<bt>`+).+?(?P=bt))"
    r"|(?P<link>(?P<bang>!?)\[(?P<text>[^\]]*)\]\((?P<target>[^)\s]+)\))",
    re.M | re.S,
)


def _site_uri(path: Path, docs_dir: Path, reverse: dict[Path, str]) -> str | None:
    """The site path of repository file ``path``: its place under docs/, or an extra page; else None."""
    if path in reverse:
        return reverse[path]
    if path.is_relative_to(docs_dir) and path.is_file():
        return path.relative_to(docs_dir).as_posix()
    return None


def _as_text(text: str, path: Path) -> str:
    """A link to a repository file outside the site, as text: the path in code, after the link's
    own words when they say something else (``the script (`benchmarks/bench_dp.py`)``)."""
    shown = path.relative_to(ROOT).as_posix() if path.is_relative_to(ROOT) else path.name
    if not text or text.strip("`") in (shown, path.name):
        return f"`{shown}`"
    return f"{text} (`{shown}`)"


def on_page_markdown(markdown: str, page, config, files) -> str:
    if page.file.abs_src_path is None:  # a page made in memory by a plugin: no repository place
        return markdown
    docs_dir = Path(config["docs_dir"]).resolve()
    reverse = {path.resolve(): uri for uri, path in _extra_pages().items()}
    here = Path(page.file.abs_src_path).resolve().parent  # where the page's links start, in the repo

    def replace(match: re.Match) -> str:
        if not match.group("link"):
            return match.group(0)
        target = match.group("target")
        path, hashmark, anchor = target.partition("#")
        if not path or "://" in path or path.startswith(("/", "mailto:")):
            return match.group(0)
        resolved = (here / path).resolve()
        uri = _site_uri(resolved, docs_dir, reverse)
        if uri is None:
            if resolved.is_relative_to(docs_dir):
                return match.group(0)  # a missing page of the site: MkDocs reports it
            return _as_text(match.group("text"), resolved)
        relative = posixpath.relpath(uri, posixpath.dirname(page.file.src_uri) or ".")
        return f"{match.group('bang')}[{match.group('text')}]({relative}{hashmark}{anchor})"

    return _TOKENS.sub(replace, markdown)
