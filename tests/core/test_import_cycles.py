"""No import cycle among anydevice's modules, counting every import: top-level, inside functions, under TYPE_CHECKING.

A cycle is a set of modules each of which reaches the others by imports that run, at import time
or at call time (a strongly connected component of the import graph); imports under
``if TYPE_CHECKING:`` never run and are left out. ``from pkg import sub`` where ``sub`` is a module is an edge to
``pkg.sub`` only (Python runs ``pkg/__init__`` first for any submodule, which is no design choice);
``import pkg`` or ``from pkg import name`` of a name defined in ``pkg/__init__`` is an edge to
``pkg``. The walker is shown to find a cycle planted in a temporary tree.
"""

from __future__ import annotations

import ast
from pathlib import Path

from tests.utils import REPO

ROOTS = {
    "anydevice": "anydevice",
    "shims": "anydevice.shims",
    "plugins": "anydevice.plugins",
    "compat_matrix": "anydevice.compat_matrix",
}


def modules(root: Path = REPO) -> dict[str, Path]:
    """Every module's import name -> its file, with the package mapping of pyproject.toml."""
    found = {}
    for folder, package in ROOTS.items():
        for path in sorted((root / folder).rglob("*.py")):
            parts = list(path.relative_to(root / folder).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts = parts[:-1]
            found[".".join([package, *parts])] = path
    return found


def _package_of(name: str, path: Path) -> str:
    return name if path.name == "__init__.py" else name.rpartition(".")[0]


def imports(name: str, path: Path, known: dict[str, Path]) -> set[str]:
    """The known modules ``name`` (at ``path``) imports anywhere in its code."""

    def owner(module: str) -> str | None:
        while module and module not in known:
            module = module.rpartition(".")[0]
        return module or None

    found: set[str] = set()
    for node in _executed(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found.update(m for alias in node.names if (m := owner(alias.name)))
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                package = _package_of(name, path)
                for _ in range(node.level - 1):
                    package = package.rpartition(".")[0]
                base = f"{package}.{base}" if base else package
            for alias in node.names:
                target = f"{base}.{alias.name}"
                found.add(target) if target in known else (found.add(m) if (m := owner(base)) else None)
    found.discard(name)
    return found


def _executed(tree: ast.Module) -> list[ast.AST]:
    """Every node except those under ``if TYPE_CHECKING:`` (names for the type checker, never imported at run time)."""
    skipped: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and isinstance(node.test, ast.Name) and node.test.id == "TYPE_CHECKING":
            skipped.update(id(inner) for child in node.body for inner in ast.walk(child))
    return [node for node in ast.walk(tree) if id(node) not in skipped]


def cycles(root: Path = REPO) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan's algorithm, iterative)."""
    known = modules(root)
    graph = {name: sorted(imports(name, path, known)) for name, path in known.items()}
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    for start in graph:
        if start in index:
            continue
        work = [(start, iter(graph[start]))]
        index[start] = low[start] = len(index)
        stack.append(start)
        on_stack.add(start)
        while work:
            node, edges = work[-1]
            for nxt in edges:
                if nxt not in index:
                    index[nxt] = low[nxt] = len(index)
                    stack.append(nxt)
                    on_stack.add(nxt)
                    work.append((nxt, iter(graph[nxt])))
                    break
                if nxt in on_stack:
                    low[node] = min(low[node], index[nxt])
            else:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[node])
                if low[node] == index[node]:
                    component = []
                    while True:
                        member = stack.pop()
                        on_stack.discard(member)
                        component.append(member)
                        if member == node:
                            break
                    if len(component) > 1:
                        found.append(sorted(component))
    return found


def test_no_import_cycle_among_anydevices_modules() -> None:
    found = cycles()
    assert not found, "import cycles (each line one set of modules that import each other):\n" + "\n".join(map(str, found))


def test_the_walker_finds_a_planted_cycle_through_a_function_level_import(tmp_path: Path) -> None:
    for folder in ROOTS:
        (tmp_path / folder).mkdir()
    (tmp_path / "anydevice" / "__init__.py").write_text("")
    (tmp_path / "anydevice" / "low.py").write_text("def f():\n    from anydevice.high import g\n")
    (tmp_path / "anydevice" / "high.py").write_text("from anydevice import low\n")
    (tmp_path / "shims" / "leaf.py").write_text("from anydevice import low\n")
    assert cycles(tmp_path) == [["anydevice.high", "anydevice.low"]]
