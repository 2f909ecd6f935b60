"""The architecture's rules, checked on the source: core names no vendor, plugins import no other plugin.

Vendor facts live in ``plugins/`` (declared on ``DeviceSpec`` or the shims, or contributed through a
pluggy hook); ``anydevice/`` only reads what the plugins declare. See docs/architecture.md.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Iterator
from pathlib import Path

import pytest

from anydevice.shims import contracts
from tests.utils import REPO

VENDOR_NAMES = ("cuda", "tpu", "xla", "neuron", "mps", "xpu", "rocm")
VENDOR_MODULES = ("torch_xla", "torch_tpu", "torch_neuronx", "torch-neuronx", "libtpu")
# the grep: a quoted vendor name (a dict key, a comparison, a list entry)
QUOTED = re.compile(r"""(["'])(cuda|tpu|xla|neuron|mps|xpu)\1""")


def python_files(folder: str) -> list[Path]:
    return sorted((REPO / folder).rglob("*.py"))


def docstring_lines(tree: ast.Module) -> set[int]:
    """Line numbers covered by module, class and function docstrings (and bare string statements)."""
    lines: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant) and isinstance(node.value.value, str):
            lines.update(range(node.lineno, (node.end_lineno or node.lineno) + 1))
    return lines


def help_text_lines(tree: ast.Module) -> set[int]:
    """Line numbers of ``help=``/``description=`` arguments and settings' docs: text for users, not a branch."""
    texts: list[ast.expr] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.keyword) and node.arg in ("help", "description", "epilog", "doc", "owner"):
            texts.append(node.value)
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "Setting":
            texts.extend(node.args[1:])  # a setting's documentation (settings.Setting(name, doc, ...))
    return {n for t in texts for n in range(t.lineno, (t.end_lineno or t.lineno) + 1)}


def vendor_literals(path: Path) -> Iterator[str]:
    """``file:line: literal`` for every string constant in code (not docs/help) that names a vendor."""
    source = path.read_text()
    tree = ast.parse(source)
    allowed = docstring_lines(tree) | help_text_lines(tree)
    for node in ast.walk(tree):
        if not (isinstance(node, ast.Constant) and isinstance(node.value, str)) or node.lineno in allowed:
            continue
        if node.value.lower() in VENDOR_NAMES or node.value in VENDOR_MODULES:
            yield f"{path.relative_to(REPO)}:{node.lineno}: {node.value!r}"
    for number, line in enumerate(source.splitlines(), 1):
        if number not in allowed and QUOTED.search(line.split("#", 1)[0]):
            yield f"{path.relative_to(REPO)}:{number}: {line.strip()}"


def imported_modules(path: Path) -> Iterator[tuple[int, str]]:
    """``(line, absolute module)`` of every import in ``path`` (relative imports resolved within its folder)."""
    package = {"plugins": "anydevice.plugins", "shims": "anydevice.shims", "compat_matrix": "anydevice.compat_matrix"}
    here = package.get(path.relative_to(REPO).parts[0], "anydevice")
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            yield from ((node.lineno, alias.name) for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                base = f"{here}.{base}" if base else here
            yield node.lineno, base
            yield from ((node.lineno, f"{base}.{alias.name}") for alias in node.names)


def test_core_names_no_vendor() -> None:
    found = [hit for path in python_files("anydevice") for hit in vendor_literals(path)]
    assert not found, "core branches on a vendor name; declare the fact in the plugin instead:\n" + "\n".join(found)


def test_the_rule_catches_a_vendor_branch(tmp_path: Path) -> None:
    """The check above is not vacuous: it flags the kind of code issue 10 removed."""
    sample = REPO / "anydevice" / "_layering_sample.py"
    sample.write_text('"""Docs may say cuda."""\n\nPJRT_FOR = {"cuda": ("CUDA",)}\nif name == "xla":\n    pass\n')
    try:
        hits = list(vendor_literals(sample))
    finally:
        sample.unlink()
    assert any(":3:" in h for h in hits) and any(":4:" in h for h in hits) and not any(":1:" in h for h in hits)


@pytest.mark.parametrize("folder", ["anydevice", "shims", "compat_matrix"])
def test_only_the_registry_reaches_plugins(folder: str) -> None:
    """Core, shims and the matrix find plugins through entry points, never by importing them."""
    found = [
        f"{path.relative_to(REPO)}:{line}: {module}"
        for path in python_files(folder)
        for line, module in imported_modules(path)
        if module == "anydevice.plugins" or module.startswith("anydevice.plugins.")
    ]
    assert not found, "\n".join(found)


def test_plugins_do_not_import_each_other() -> None:
    found = [
        f"{path.relative_to(REPO)}:{line}: {module}"
        for path in python_files("plugins")
        for line, module in imported_modules(path)
        if module.startswith("anydevice.plugins.") and module != f"anydevice.plugins.{path.stem}"
    ]
    assert not found, "a plugin imports another plugin; share through anydevice/ or shims/ instead:\n" + "\n".join(found)


def test_shims_hold_only_shim_code() -> None:
    """Detection and version helpers are core (``anydevice.detect``, ``anydevice.versions``), not shims."""
    assert not (REPO / "shims" / "detect.py").exists() and not (REPO / "shims" / "versions.py").exists()
    assert (REPO / "anydevice" / "detect.py").is_file() and (REPO / "anydevice" / "versions.py").is_file()


def test_the_contract_declares_what_core_and_the_matrix_call() -> None:
    """Methods looked up on shims by core and the matrix are declared, with a docstring saying what they do."""
    declared = {
        contracts.Placement: ("fallback_ops", "device", "step"),
        contracts.HostTransfer: ("to_host", "is_writer"),
        contracts.Collectives: ("launch", "launch_env", "wrap", "lacking_reduce_ops"),
        contracts.Compilation: ("compile", "cache_dir"),
        contracts.Profiling: ("record", "trace", "peak_flops", "chip"),
    }
    for protocol, names in declared.items():
        for name in names:
            member = getattr(protocol, name, None)
            assert callable(member) or name in protocol.__annotations__, (protocol, name)
            assert member is None or (member.__doc__ or "").strip(), (protocol, name)
    assert not hasattr(contracts.Shims, "__iter__")
    sources = "\n".join(p.read_text() for p in [*python_files("anydevice"), *python_files("compat_matrix")])
    assert not re.search(r"getattr\([^)]*(shims|collectives|placement|profiling|compilation)[^)]*,", sources)
