"""Structural docs are read against the tree (issue 47): the CLI's command list (its module docstring and
docs/architecture.md's package map), the package map's folders and modules, and errors.py's hierarchy.

Each check returns what is missing, so the planted omissions below show it fails.
"""

from __future__ import annotations

import ast
import re
import subprocess

import anydevice.cli
import anydevice.errors
from anydevice.cli import DELEGATED
from tests.utils import REPO

ARCHITECTURE = REPO / "docs" / "architecture.md"
README = REPO / "README.md"
PRODUCT = ("anydevice", "plugins", "shims", "compat_matrix")
BUILT_IN = ("list", "info")
"""The commands the CLI's own module implements; the others are :data:`anydevice.cli.DELEGATED`."""


def commands() -> list[str]:
    return [*BUILT_IN, *DELEGATED]


def package_map(doc: str) -> str:
    """The fenced block of docs/architecture.md that draws the tree (the first one naming ``plugin/``)."""
    return next(block for block in re.findall(r"```\n(.*?)```", doc, re.S) if "plugin/" in block)


def missing_commands(text: str) -> list[str]:
    """Commands the text does not name as a word."""
    return [c for c in commands() if not re.search(rf"(?<![\w-]){re.escape(c)}(?![\w-])", text)]


def missing_from_map(tree_text: str) -> list[str]:
    """Subpackages of ``anydevice/`` (``runtime/``) and top-level folders of the product the map does not name."""
    tracked = subprocess.run(["git", "ls-files", "anydevice/*/__init__.py"], cwd=REPO, capture_output=True, text=True).stdout
    folders = sorted({line.split("/")[1] for line in tracked.split() if line.count("/") == 2})
    missing = [f"anydevice/{f}/" for f in folders if not re.search(rf"(?<![\w/]){f}/", tree_text)]
    return missing + [f"{top}/" for top in ("shims", "plugins", "compat_matrix") if f"{top}/" not in tree_text]


def missing_errors(docstring: str) -> list[str]:
    """Error classes defined in anydevice/errors.py that its docstring's hierarchy does not draw."""
    tree = ast.parse((REPO / "anydevice" / "errors.py").read_text())
    defined = [n.name for n in tree.body if isinstance(n, ast.ClassDef) and isinstance(getattr(anydevice.errors, n.name), type)]
    errors = [n for n in defined if issubclass(getattr(anydevice.errors, n), anydevice.errors.AnyDeviceError)]
    return [n for n in errors if not re.search(rf"\b{n}\b", docstring)]


def unlisted_variables(sources: dict[str, str], readme: str) -> list[str]:
    """``ANYDEVICE_*`` names in the product's code that the README's settings table and its exceptions do not name."""
    from anydevice.runtime.registry import builtin_plugin_settings
    from anydevice.settings import markdown_table

    listed = markdown_table(builtin_plugin_settings()) + readme.split("## Environment variables", 1)[1][:1500]
    named = {m for text in sources.values() for m in re.findall(r"[\"'](ANYDEVICE_[A-Z0-9_]+)[\"']", text)}
    return sorted(n for n in named if f"`{n}`" not in listed)


def product_sources() -> dict[str, str]:
    return {str(p): p.read_text() for folder in PRODUCT for p in (REPO / folder).rglob("*.py")}


def test_every_anydevice_variable_is_listed() -> None:
    assert unlisted_variables(product_sources(), README.read_text()) == []


def test_the_cli_docstring_lists_every_command() -> None:
    assert missing_commands(anydevice.cli.__doc__ or "") == []


def test_the_package_map_names_every_command_package_and_folder() -> None:
    tree_text = package_map(ARCHITECTURE.read_text())
    assert missing_commands(tree_text) == []
    assert missing_from_map(tree_text) == []


def test_errors_py_draws_every_error() -> None:
    assert missing_errors(anydevice.errors.__doc__ or "") == []


def test_planted_omissions_are_found() -> None:
    doc = anydevice.cli.__doc__ or ""
    assert missing_commands(doc.replace("serve-spec", "serve")) == ["serve-spec"]
    tree_text = package_map(ARCHITECTURE.read_text())
    assert missing_from_map(tree_text.replace("checkpoint/", "checkpoints")) == ["anydevice/checkpoint/"]
    assert missing_errors((anydevice.errors.__doc__ or "").replace("UsageError", "Usage")) == ["UsageError"]
    planted = {**product_sources(), "anydevice/planted.py": 'FLAG = "ANYDEVICE_PLANTED"\n'}
    assert unlisted_variables(planted, README.read_text()) == ["ANYDEVICE_PLANTED"]
