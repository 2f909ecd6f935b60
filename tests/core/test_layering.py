"""The architecture's rules, checked on the source (docs/architecture.md): imports point one way, core names no vendor.

Imports: ``shims/`` never imports the command-line tools (``anydevice.cli``); core (``anydevice/``) reaches
shims only through the contract (``anydevice.shims.contracts``) and plugins only through the registry;
plugins do not import each other. Names: no vendor name or vendor module in core's code, no vendor
environment variable (any a plugin declares in ``DeviceSpec.settings``) in core, and no branch on a
device type in ``shims/`` (the plugin declares the fact). Each checker is shown to catch a planted
violation, so none of them can pass vacuously.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Iterator
from pathlib import Path

import pytest

from anydevice import settings
from anydevice.shims import contracts
from tests.utils import REPO

VENDOR_NAMES = ("cuda", "tpu", "xla", "neuron", "mps", "xpu", "rocm")
VENDOR_MODULES = ("torch_xla", "torch_tpu", "torch_neuronx", "torch-neuronx", "libtpu")
# the grep: a quoted vendor name (a dict key, a comparison, a list entry)
QUOTED = re.compile(r"""(["'])(cuda|tpu|xla|neuron|mps|xpu)\1""")


def python_files(folder: str, root: Path = REPO) -> list[Path]:
    return sorted((root / folder).rglob("*.py"))


def relative(path: Path) -> str:
    """``path`` relative to the tree it is in: the repository, or a planted copy's temporary root."""
    parts = path.parts
    for top in ("anydevice", "shims", "plugins", "compat_matrix"):
        if top in parts:
            return "/".join(parts[len(parts) - 1 - parts[::-1].index(top) :])
    return str(path)


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


SUBJECTS = {"anydevice/cuda_compat/": "cuda"}
"""Features whose subject is one vendor's API: cuda-compat rewrites what CUDA-written code names ``"cuda"``
(docs/architecture.md). It may name that vendor, and no other."""


def vendor_literals(path: Path) -> Iterator[str]:
    """``file:line: literal`` for every string constant in code (not docs/help) that names a vendor (not its :data:`SUBJECTS`)."""
    subject = next((name for folder, name in SUBJECTS.items() if relative(path).startswith(folder)), None)
    for hit in _vendor_literals(path):
        text = hit.partition(": ")[2]
        if subject is None or OTHER_VENDOR.search(re.sub(subject, "", text, flags=re.IGNORECASE)):
            yield hit


OTHER_VENDOR = re.compile("|".join((*VENDOR_NAMES, *VENDOR_MODULES)), re.IGNORECASE)


def _vendor_literals(path: Path) -> Iterator[str]:
    source = path.read_text()
    tree = ast.parse(source)
    allowed = docstring_lines(tree) | help_text_lines(tree)
    for node in ast.walk(tree):
        if not (isinstance(node, ast.Constant) and isinstance(node.value, str)) or node.lineno in allowed:
            continue
        if node.value.lower() in VENDOR_NAMES or node.value in VENDOR_MODULES:
            yield f"{relative(path)}:{node.lineno}: {node.value!r}"
    for number, line in enumerate(source.splitlines(), 1):
        if number not in allowed and QUOTED.search(line.split("#", 1)[0]):
            yield f"{relative(path)}:{number}: {line.strip()}"


def imported_modules(path: Path) -> Iterator[tuple[int, str]]:
    """``(line, absolute module)`` of every import in ``path`` (relative imports resolved within its folder).

    Every import counts, also those inside functions and under ``TYPE_CHECKING``.
    """
    package = {"plugins": "anydevice.plugins", "shims": "anydevice.shims", "compat_matrix": "anydevice.compat_matrix"}
    here = package.get(relative(path).split("/")[0], "anydevice")
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


def plant(root: Path, rel: str, text: str) -> Path:
    """Write a bad module at ``root/rel`` (a temporary tree laid out like the repository, never the source tree)."""
    path = root / rel
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


def test_the_rule_catches_a_vendor_branch(tmp_path: Path) -> None:
    """The check above is not vacuous: it flags the kind of code issue 10 removed."""
    text = '"""Docs may say cuda."""\n\nPJRT_FOR = {"cuda": ("CUDA",)}\nif name == "xla":\n    pass\n'
    hits = list(vendor_literals(plant(tmp_path, "anydevice/_layering_sample.py", text)))
    assert any(":3:" in h for h in hits) and any(":4:" in h for h in hits) and not any(":1:" in h for h in hits)


@pytest.mark.parametrize("folder", ["anydevice", "shims", "compat_matrix"])
def test_only_the_registry_reaches_plugins(folder: str) -> None:
    """Core, shims and the matrix find plugins through entry points, never by importing them."""
    found = [
        f"{relative(path)}:{line}: {module}"
        for path in python_files(folder)
        for line, module in imported_modules(path)
        if module == "anydevice.plugins" or module.startswith("anydevice.plugins.")
    ]
    assert not found, "\n".join(found)


def test_plugins_do_not_import_each_other() -> None:
    found = [
        f"{relative(path)}:{line}: {module}"
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
        contracts.Placement: ("device", "move", "step", "generator"),
        contracts.Collectives: ("wrap", "lacking_reduce_ops"),
        contracts.Diagnostics: ("fallback_ops", "compilations"),
        contracts.CudaShaped: ("device_module",),
        contracts.HostTransfer: ("to_host", "is_writer"),
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


# -- imports point one way --------------------------------------------------------------------------
SHIM_CONTRACT = "anydevice.shims.contracts"
PLUGIN_API = ("anydevice.plugin", "anydevice.errors")
"""All a plugin may import of anydevice: the one door and the error types (docs/plugins.md)."""
BUILT_ON_SHIMS = ("anydevice/plugin/", "anydevice/cuda_compat")
"""Layers of ``anydevice/`` built on the shared shim implementations (docs/architecture.md): the plugin API,
which re-exports them (the contract layer, with ``shims/``), and the cuda-compat feature. The rest of core
reaches the shims only through the contract."""


def layering_violations(folder: str, root: Path = REPO) -> list[str]:
    """Every import in ``folder`` that points the wrong way, ``file:line: module (rule)``; no allow-list."""
    found = []
    for path in python_files(folder, root):
        rel = relative(path)
        for line, module in imported_modules(path):
            if folder == "shims" and (module == "anydevice.cli" or module.startswith("anydevice.cli.")):
                found.append(f"{rel}:{line}: {module} (shims never import the command-line tools)")
            implementation = module.startswith("anydevice.shims.") and module.split(".")[:3] != SHIM_CONTRACT.split(".")
            if folder == "anydevice" and implementation and not rel.startswith(BUILT_ON_SHIMS):
                found.append(f"{rel}:{line}: {module} (core reaches shims only through {SHIM_CONTRACT})")
            ours = module.startswith("anydevice") and module.split(".")[:2] != ["anydevice", "plugins"]
            if folder == "plugins" and ours and not any(module == m or module.startswith(m + ".") for m in PLUGIN_API):
                found.append(f"{rel}:{line}: {module} (plugins import only {' and '.join(PLUGIN_API)})")
    return found


@pytest.mark.parametrize("folder", ["anydevice", "shims", "plugins"])
def test_imports_point_one_way(folder: str) -> None:
    found = layering_violations(folder)
    assert not found, "\n".join(found)


def test_the_import_rule_catches_planted_violations(tmp_path: Path) -> None:
    """A shim importing the launcher, core importing a shim implementation and a plugin importing past the door."""
    plant(tmp_path, "shims/_layering_sample.py", "from anydevice.cli.launch import LaunchSpec\n")
    plant(tmp_path, "anydevice/_layering_sample.py", "def f():\n    from anydevice.shims.common import move\n")
    plant(
        tmp_path,
        "plugins/_layering_sample.py",
        "from anydevice.plugin import hookimpl\nfrom anydevice.device_spec import DeviceSpec\n",
    )
    shims_found, core_found = layering_violations("shims", tmp_path), layering_violations("anydevice", tmp_path)
    plugins_found = layering_violations("plugins", tmp_path)
    assert shims_found[0] == "shims/_layering_sample.py:1: anydevice.cli.launch (shims never import the command-line tools)"
    assert any("_layering_sample.py:2: anydevice.shims.common" in hit for hit in core_found), core_found
    assert [h.split(" (")[0] for h in plugins_found] == [
        "plugins/_layering_sample.py:2: anydevice.device_spec",
        "plugins/_layering_sample.py:2: anydevice.device_spec.DeviceSpec",
    ]


# -- vendor environment variables live in the plugins that read them ---------------------------------
def vendor_variables() -> set[str]:
    """The names of every variable a built-in plugin declares (``DeviceSpec.settings``)."""
    from anydevice.registry import builtin_plugin_settings

    return {s.name for s in builtin_plugin_settings()}


def variable_literals(path: Path, names: set[str]) -> Iterator[str]:
    """``file:line: name`` for every string constant in ``path`` that is one of ``names``, or mentions one in code."""
    tree = ast.parse(path.read_text())
    for node in ast.walk(tree):
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and node.value.strip() in names:
            yield f"{relative(path)}:{node.lineno}: {node.value!r}"


def test_core_declares_no_vendor_variable() -> None:
    names = vendor_variables()
    assert {"PJRT_DEVICE", "CUDA_VISIBLE_DEVICES", "NEURON_RT_VISIBLE_CORES"} <= names
    assert not names & {s.name for s in settings.ALL}, "declare a vendor's variable in its plugin's DeviceSpec.settings"
    found = [hit for path in python_files("anydevice") for hit in variable_literals(path, names)]
    assert not found, "core names a vendor's variable; the plugin that reads it declares it:\n" + "\n".join(found)


def test_the_variable_rule_catches_a_planted_name(tmp_path: Path) -> None:
    sample = plant(tmp_path, "anydevice/_layering_sample.py", 'import os\n\nvisible = os.environ.get("CUDA_VISIBLE_DEVICES")\n')
    hits = list(variable_literals(sample, vendor_variables()))
    assert hits == ["anydevice/_layering_sample.py:3: 'CUDA_VISIBLE_DEVICES'"]


# -- shims do not branch on a device type ------------------------------------------------------------
DEVICE_TYPES = ("cpu", *VENDOR_NAMES)
SHIM_BRANCHES_ALLOWED: set[tuple[str, str]] = set()  # none: a shim that needs a device fact reads the plugin's declaration


def device_type_branches(path: Path) -> Iterator[tuple[str, int, str]]:
    """``(file, line, literal)`` for every comparison (``==``, ``!=``, ``in``) of something with a device-type literal."""
    for node in ast.walk(ast.parse(path.read_text())):
        if not isinstance(node, ast.Compare):
            continue
        for operand in (node.left, *node.comparators):
            items = operand.elts if isinstance(operand, (ast.Tuple, ast.List, ast.Set)) else [operand]
            for item in items:
                if isinstance(item, ast.Constant) and isinstance(item.value, str) and item.value in DEVICE_TYPES:
                    yield str(relative(path)), node.lineno, item.value


def test_shims_do_not_branch_on_a_device_type() -> None:
    found = [
        f"{file}:{line}: compares with {literal!r}"
        for path in python_files("shims")
        for file, line, literal in device_type_branches(path)
        if (file, literal) not in SHIM_BRANCHES_ALLOWED
    ]
    why = "a shim branches on a device type; let the plugin declare the fact (e.g. PlacementTable(host=True)):"
    assert not found, "\n".join([why, *found])


def test_the_branch_rule_catches_a_planted_branch(tmp_path: Path) -> None:
    sample = plant(tmp_path, "shims/_layering_sample.py", 'def f(kind):\n    return kind in ("cpu", "xla") or kind == "cuda"\n')
    hits = sorted(literal for _, _, literal in device_type_branches(sample))
    assert hits == ["cpu", "cuda", "xla"]
