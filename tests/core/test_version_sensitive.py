"""The core lanes' rule (docs/architecture.md, "Which tests the core lanes run"), read from the doc and checked.

Every module under the version-sensitive product paths has a test marked ``torch_version_sensitive`` that
the core lanes run, or imports no torch; each rule is shown catching a planted module in a temporary tree.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

from tests.utils import REPO

SENSITIVE = (
    "anydevice/contract/",
    "shims/",
    "anydevice/cuda_compat/",
    "anydevice/distributed/__init__.py",
    "anydevice/checkpoint/",
)
"""The version-sensitive product paths (the doc's rule names each)."""
NO_TORCH = "none: imports no torch"
MARKER = "torch_version_sensitive"
XLA_TESTS = "tests/xla/"
"""torch_xla-only code's marked tests run in the xla lane (torch 2.9 with torch_xla 2.9)."""


def core_folders() -> list[str]:
    """The folders the core lanes collect, read from scripts/test's CORE line."""
    line = re.search(r"^CORE='([^']*)'", (REPO / "scripts" / "test").read_text(), re.M)
    assert line is not None, "scripts/test: no CORE line"
    return [f"{word}/" for word in line[1].split(" -m ")[0].split()]


def table(doc: str) -> list[tuple[list[str], list[str]]]:
    """The doc's rows between the markers: (product modules, marked tests or [NO_TORCH])."""
    body = doc.split("<!-- version-sensitive:begin")[1].split("<!-- version-sensitive:end")[0]
    rows = []
    for line in body.splitlines()[3:]:
        if not line.startswith("|"):
            continue
        modules, tests = (cell.strip() for cell in line.strip("|").split("|"))
        rows.append((re.findall(r"`([^`]+)`", modules), [NO_TORCH] if tests == NO_TORCH else re.findall(r"`([^`]+)`", tests)))
    return rows


def is_marked(path: Path) -> bool:
    """Whether the test module's own ``pytestmark`` includes the marker."""
    tree = ast.parse(path.read_text())
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(getattr(t, "id", None) == "pytestmark" for t in node.targets):
            return any(isinstance(n, ast.Attribute) and n.attr == MARKER for n in ast.walk(node.value))
    return False


def imports_torch(path: Path) -> bool:
    for node in ast.walk(ast.parse(path.read_text())):
        names = [a.name for a in node.names] if isinstance(node, ast.Import) else []
        names += [node.module or ""] if isinstance(node, ast.ImportFrom) else []
        if any(name == "torch" or name.startswith("torch.") for name in names):
            return True
    return False


def problems(root: Path, doc: str, folders: list[str]) -> list[str]:
    """Everything that breaks the rule in the tree at ``root`` against ``doc``'s table."""
    found = [f"the rule does not name the path {p}" for p in SENSITIVE if f"`{p}" not in doc.split("<!-- version-sensitive")[0]]
    modules = {
        path.relative_to(root).as_posix()
        for prefix in SENSITIVE
        for path in ((root / prefix).rglob("*.py") if prefix.endswith("/") else [root / prefix])
        if path.is_file() and "__pycache__" not in path.parts
    }
    rows = table(doc)
    listed: dict[str, list[str]] = {}
    for mods, tests in rows:
        for module in mods:
            listed[module] = tests
            if module not in modules:
                found.append(f"{module}: in the table but not a module under the version-sensitive paths")
    for module in sorted(modules - set(listed)):
        found.append(f"{module}: a version-sensitive module with no marked test (add a row to the table)")
    for module, tests in sorted(listed.items()):
        if tests == [NO_TORCH]:
            if module in modules and imports_torch(root / module):
                found.append(f"{module}: listed as importing no torch, but it imports torch: name its marked tests")
            continue
        for test in tests:
            path = root / test
            if not path.is_file():
                found.append(f"{module}: its test {test} does not exist")
            elif not is_marked(path):
                found.append(f"{module}: its test {test} is not marked {MARKER} (pytestmark)")
    for path in sorted((root / "tests").rglob("test_*.py")):
        test = path.relative_to(root).as_posix()
        if is_marked(path) and not any(test.startswith(f) for f in [*folders, XLA_TESTS]):
            found.append(f"{test}: marked {MARKER} but outside the core lanes' folders {folders}: no core lane runs it")
    return found


ARCHITECTURE = REPO / "docs" / "architecture.md"


def test_every_version_sensitive_module_has_a_marked_test_the_core_lanes_run() -> None:
    assert problems(REPO, ARCHITECTURE.read_text(), core_folders()) == []


def test_the_core_lanes_run_the_marked_tests_only() -> None:
    core = re.search(r"^CORE='([^']*)'", (REPO / "scripts" / "test").read_text(), re.M)
    assert core is not None and f'-m "{MARKER} and not slow and' in core[1]
    for lane in ("core-torch2.9", "core-torch2.15"):
        assert re.search(rf"^{re.escape(lane)} .* \$CORE$", (REPO / "scripts" / "test").read_text(), re.M), lane


def _tree(tmp_path: Path) -> tuple[Path, str]:
    """A small tree shaped like the repo's: one module per sensitive path, each with a marked test."""
    root = tmp_path / "repo"
    rows = []
    for i, prefix in enumerate(SENSITIVE):
        module = prefix if prefix.endswith(".py") else f"{prefix}m{i}.py"
        test = f"tests/core/test_m{i}.py"
        for path, text in ((module, "import torch\n"), (test, f"import pytest\npytestmark = pytest.mark.{MARKER}\n")):
            (root / path).parent.mkdir(parents=True, exist_ok=True)
            (root / path).write_text(text)
        rows.append(f"| `{module}` | `{test}` |")
    rule = " ".join(f"`{p}`" for p in SENSITIVE)
    doc = f"{rule}\n<!-- version-sensitive:begin -->\n| product modules | marked tests |\n|---|---|\n" + "\n".join(rows)
    return root, doc + "\n<!-- version-sensitive:end -->\n"


def test_each_rule_catches_a_planted_module(tmp_path: Path) -> None:
    root, doc = _tree(tmp_path)
    folders = ["tests/core/"]
    assert problems(root, doc, folders) == []
    (root / "shims" / "planted.py").write_text("import torch\n")  # a new module, no row
    no_row = "shims/planted.py: a version-sensitive module with no marked test (add a row to the table)"
    assert problems(root, doc, folders) == [no_row]
    (root / "tests" / "core" / "test_planted.py").write_text("def test_x():\n    pass\n")  # a row naming an unmarked test
    end = "<!-- version-sensitive:end"
    doc2 = doc.replace(end, f"| `shims/planted.py` | `tests/core/test_planted.py` |\n{end}")
    assert problems(root, doc2, folders) == [
        "shims/planted.py: its test tests/core/test_planted.py is not marked torch_version_sensitive (pytestmark)"
    ]
    doc3 = doc.replace(end, f"| `shims/planted.py` | {NO_TORCH} |\n{end}")
    assert problems(root, doc3, folders) == [
        "shims/planted.py: listed as importing no torch, but it imports torch: name its marked tests"
    ]
    (root / "shims" / "planted.py").write_text("X = 1\n")
    assert problems(root, doc3, folders) == []
    (root / "tests" / "other").mkdir()  # a marked test no core lane collects
    (root / "tests" / "other" / "test_far.py").write_text(f"import pytest\npytestmark = [pytest.mark.{MARKER}]\n")
    assert problems(root, doc3, folders) == [
        f"tests/other/test_far.py: marked {MARKER} but outside the core lanes' folders ['tests/core/']: no core lane runs it"
    ]
