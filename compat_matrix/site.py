"""Build, write and staleness-check the matrix page (``index.html`` + ``index.md``)."""

from __future__ import annotations

import os
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from anydevice.compat_matrix.merge import build_matrix
from anydevice.compat_matrix.render_html import render_html
from anydevice.compat_matrix.render_md import render_markdown


@dataclass(frozen=True)
class Site:
    """The rendered files by name, the problems met, and how many runs went in."""

    files: dict[str, str]
    problems: list[str]
    run_count: int


def build_site(results: Iterable[Path]) -> Site:
    """Render the page from result files; deterministic for the same files, whatever their order."""
    matrix = build_matrix(results)
    files = {"index.html": render_html(matrix), "index.md": render_markdown(matrix)}
    return Site(files, list(matrix.problems), len(matrix.runs))


def write_site(site: Site, out: Path) -> list[Path]:
    """Write the files under ``out``, each atomically (a temporary file renamed over it); returns their paths."""
    out.mkdir(parents=True, exist_ok=True)
    written = []
    for name, text in sorted(site.files.items()):
        path = out / name
        tmp = out / f".{name}.{os.getpid()}.tmp"
        try:
            tmp.write_bytes(text.encode("utf-8"))
            os.replace(tmp, path)
        finally:
            tmp.unlink(missing_ok=True)
        written.append(path)
    return written


def check_site(site: Site, out: Path) -> list[str]:
    """Names of files under ``out`` that are missing or differ from ``site``."""
    stale = []
    for name, text in sorted(site.files.items()):
        path = out / name
        if not path.is_file() or path.read_bytes() != text.encode("utf-8"):
            stale.append(name)
    return stale
