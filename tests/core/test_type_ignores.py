"""Every ``type: ignore`` in the wheel's code says why, and there are fewer than 30 (0.4 had 63)."""

from __future__ import annotations

import re

from tests.utils import REPO

IGNORE = re.compile(r"#\s*type:\s*ignore(?P<codes>\[[^\]]*\])?(?P<rest>.*)$")
LIMIT = 30


def ignores(text: str) -> list[tuple[int, str, str]]:
    """``(line, codes, reason)`` of every ``type: ignore`` comment in ``text``."""
    found = []
    for number, line in enumerate(text.splitlines(), 1):
        m = IGNORE.search(line)
        if m is not None:
            found.append((number, m.group("codes") or "", m.group("rest").strip().lstrip("#").strip()))
    return found


def problems(files: dict[str, str]) -> list[str]:
    """An ignore without its error codes or without a reason after them; and the count against :data:`LIMIT`."""
    out, total = [], 0
    for name, text in files.items():
        for number, codes, reason in ignores(text):
            total += 1
            if not codes or not reason:
                out.append(f"{name}:{number}: type: ignore{codes} without {'its codes' if not codes else 'a reason'}")
    if total >= LIMIT:
        out.append(f"{total} type: ignore comments (fewer than {LIMIT} allowed)")
    return out


def _sources() -> dict[str, str]:
    folders = ("anydevice", "shims", "plugins", "compat_matrix")
    return {str(p.relative_to(REPO)): p.read_text() for folder in folders for p in sorted((REPO / folder).rglob("*.py"))}


def test_every_type_ignore_says_why_and_they_are_few() -> None:
    assert problems(_sources()) == []


def test_a_bare_or_unexplained_ignore_is_caught() -> None:
    planted = {"a.py": "x = f()  # type: ignore\ny = g()  # type: ignore[attr-defined]\nz = h()  # type: ignore[misc]  # why\n"}
    assert problems(planted) == ["a.py:1: type: ignore without its codes", "a.py:2: type: ignore[attr-defined] without a reason"]
    assert problems({"b.py": "x = 1  # type: ignore[misc]  # why\n" * LIMIT}) == [
        f"{LIMIT} type: ignore comments (fewer than {LIMIT} allowed)"
    ]
