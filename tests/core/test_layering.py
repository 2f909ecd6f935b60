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
from dataclasses import dataclass
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


STRING_IMPORT = re.compile(r"anydevice(?:\.\w+)+(?=$|:)")
"""A module named in a string (``"anydevice.compat_matrix.cli"``, ``"anydevice.shims.lazy_xla:fallback_probe"``)."""


def _exists(path: Path, module: str) -> bool:
    """Whether ``module`` is a module of the tree ``path`` belongs to (a string like an entry-point group is not)."""
    root = path
    for _ in relative(path).split("/"):
        root = root.parent
    folders = {name: folder for folder, name in PACKAGES.items()}
    parts = module.split(".")
    for depth in range(len(parts), 0, -1):  # the longest mapped package prefix: anydevice.shims -> shims/
        head = ".".join(parts[:depth])
        if head in folders:
            base = root / folders[head] / "/".join(parts[depth:])
            return base.with_suffix(".py").is_file() or (base / "__init__.py").is_file()
    return False


def imported_modules(path: Path) -> Iterator[tuple[int, str]]:
    """``(line, absolute module)`` of every import in ``path`` (relative imports resolved within its folder).

    Every import counts, also those inside functions and under ``TYPE_CHECKING``; an import through the package's
    face (``import anydevice``; ``from anydevice import x`` judged as ``anydevice.x``); and a module named by a
    string (``importlib.import_module("anydevice.x")``, a ``"module:function"`` the code imports later).
    """
    package = {"plugins": "anydevice.plugins", "shims": "anydevice.shims", "compat_matrix": "anydevice.compat_matrix"}
    here = package.get(relative(path).split("/")[0], "anydevice")
    tree = ast.parse(path.read_text())
    docstrings = {
        id(node.body[0].value)
        for node in ast.walk(tree)
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef))
        and node.body
        and isinstance(node.body[0], ast.Expr)
        and isinstance(node.body[0].value, ast.Constant)
    }
    located = {  # find_spec("anydevice.x") locates a folder and imports nothing of it
        id(arg)
        for node in ast.walk(tree)
        if isinstance(node, ast.Call) and getattr(node.func, "attr", getattr(node.func, "id", None)) == "find_spec"
        for arg in node.args
    }
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            yield from ((node.lineno, alias.name) for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                base = f"{here}.{base}" if base else here
            if base != "anydevice":  # the package's face: each name is judged as the module it would be
                yield node.lineno, base
            yield from ((node.lineno, f"{base}.{alias.name}") for alias in node.names)
        elif isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docstrings | located:
            found = STRING_IMPORT.match(node.value.strip())
            if found is not None and _exists(path, found.group(0)):
                yield node.lineno, found.group(0)


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
    """Detection and version helpers are core (``anydevice.contract.detect``, ``anydevice.contract.versions``), not shims."""
    assert not (REPO / "shims" / "detect.py").exists() and not (REPO / "shims" / "versions.py").exists()
    assert (REPO / "anydevice" / "contract" / "detect.py").is_file() and (
        REPO / "anydevice" / "contract" / "versions.py"
    ).is_file()


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


# -- imports point one way: the table in docs/architecture.md -------------------------------------
ARCHITECTURE = REPO / "docs" / "architecture.md"
PACKAGES = {
    "anydevice": "anydevice",
    "shims": "anydevice.shims",
    "plugins": "anydevice.plugins",
    "compat_matrix": "anydevice.compat_matrix",
}
"""Source folder -> import name (pyproject's package-dir)."""


@dataclass(frozen=True)
class Layer:
    name: str
    modules: tuple[str, ...]
    may_import: tuple[str, ...]
    """Layer names and module names (backticked in the table)."""


def read_layers(text: str) -> list[Layer]:
    """The rows between ``<!-- layers:begin`` and ``<!-- layers:end -->`` of docs/architecture.md."""
    block = text.split("<!-- layers:begin", 1)[1].split("<!-- layers:end -->", 1)[0]
    layers = []
    for line in block.splitlines()[1:]:
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) != 3 or cells[0] in ("Layer", "---"):
            continue
        modules = tuple(re.findall(r"`([\w.]+)`", cells[1]))
        words = re.sub(r"`[^`]*`", "", cells[2])
        names = tuple(w for w in re.findall(r"[\w-]+", words) if w in LAYER_WORDS)
        layers.append(Layer(cells[0], modules, (*names, *re.findall(r"`([\w.]+)`", cells[2]))))
    return layers


LAYER_WORDS = {"leaves", "contract", "plugins", "files", "runtime", "features", "tools", "matrix", "package"}


def module_name(path: Path) -> str:
    """The import name of a source file: ``shims/eager.py`` is ``anydevice.shims.eager``."""
    rel = relative(path).removesuffix(".py").split("/")
    name = ".".join([PACKAGES[rel[0]], *rel[1:]])
    return name.removesuffix(".__init__")


def layer_of(module: str, layers: list[Layer]) -> Layer | None:
    """The layer whose module is the longest prefix of ``module`` (the package ``anydevice`` only matches itself)."""
    best: tuple[int, Layer] | None = None
    for layer in layers:
        for prefix in layer.modules:
            exact = prefix == "anydevice"
            if module == prefix or (not exact and module.startswith(prefix + ".")):
                if best is None or len(prefix) > best[0]:
                    best = (len(prefix), layer)
    return best[1] if best else None


def allowed(importer: Layer, module: str, layers: list[Layer]) -> bool:
    target = layer_of(module, layers)
    if target is None and module.startswith("anydevice.") and module.count(".") >= 1:
        # ``from anydevice.x import name`` also yields ``anydevice.x.name``: judge its module
        target = layer_of(module.rsplit(".", 1)[0], layers)
    if target is not None and (target is importer or target.name in importer.may_import):
        return True
    return any(module == m or module.startswith(m + ".") for m in importer.may_import if "." in m)


def layering_violations(folder: str, root: Path = REPO, layers: list[Layer] | None = None) -> list[str]:
    """Every import in ``folder`` that the table does not allow, ``file:line: module (rule)``; no allow-list."""
    layers = layers if layers is not None else read_layers(ARCHITECTURE.read_text())
    found = []
    for path in python_files(folder, root):
        rel, name = relative(path), module_name(path)
        importer = layer_of(name, layers)
        if importer is None:
            found.append(f"{rel}: {name} is in no layer (add it to the table in docs/architecture.md)")
            continue
        for line, module in imported_modules(path):
            if module != "anydevice" and not module.startswith("anydevice."):
                continue
            if not allowed(importer, module, layers):
                found.append(f"{rel}:{line}: {module} ({importer.name} may import only {', '.join(importer.may_import)})")
    return found


def test_the_table_places_every_layer() -> None:
    layers = read_layers(ARCHITECTURE.read_text())
    assert {layer.name for layer in layers} == LAYER_WORDS
    for layer in layers:
        assert layer.modules, layer
        assert all(m in LAYER_WORDS or "." in m for m in layer.may_import), layer


@pytest.mark.parametrize("folder", ["anydevice", "shims", "plugins", "compat_matrix"])
def test_imports_point_one_way(folder: str) -> None:
    found = layering_violations(folder)
    assert not found, "\n".join(found)


BAD_MODULES = {
    "shims/_layering_sample.py": "from anydevice.cli.launch import LaunchSpec\n",
    "anydevice/runtime/_layering_sample.py": "def f():\n    from anydevice.checkpoint import save\n",
    "anydevice/_layering_sample.py": "import os\n",
    "anydevice/preflight/_layering_sample.py": "def f():\n    from anydevice.shims.common import move\n",
    "anydevice/files/_layering_sample.py": "from anydevice.runtime.registry import Registry\n",
    "compat_matrix/_layering_sample.py": "from anydevice.plugins.cpu import anydevice_register_devices\n",
    "plugins/_layering_sample.py": (
        "from anydevice.plugin import hookimpl\nfrom anydevice.contract.device_spec import DeviceSpec\n"
    ),
    "anydevice/cli/_layering_sample.py": "from anydevice.compat_matrix import page\n",
    "anydevice/contract/_layering_sample.py": "from anydevice.distributed import world_size\n",
}


def test_the_import_rules_catch_planted_violations(tmp_path: Path) -> None:
    """One bad module per rule, planted in a temporary tree laid out like this one (never the source tree)."""
    for rel, text in BAD_MODULES.items():
        plant(tmp_path, rel, text)
    found = [
        hit
        for folder in ("anydevice", "shims", "plugins", "compat_matrix")
        for hit in layering_violations(folder, tmp_path, read_layers(ARCHITECTURE.read_text()))
    ]
    for rel in BAD_MODULES:
        assert any(hit.startswith(rel + ":") for hit in found), (rel, found)
    assert "anydevice/_layering_sample.py: anydevice._layering_sample is in no layer" in " ".join(found)
    assert "anydevice/runtime/_layering_sample.py:2: anydevice.checkpoint (runtime may import only" in " ".join(found)
    assert not [hit for hit in found if "_layering_sample" not in hit], found


def test_package_face_and_string_imports_are_seen(tmp_path: Path) -> None:
    """Imports the 0.4 test could not see: through the package's face, and by a module's name in a string."""
    plant(tmp_path, "compat_matrix/page.py", "")  # a module named by a string counts when it exists in the tree
    plant(tmp_path, "anydevice/runtime/strict.py", "")
    bad = {
        "anydevice/edge/_face_sample.py": "def f():\n    import anydevice as ad\n    return ad.load\n",
        "anydevice/runtime/_face_sample.py": "from anydevice import cli\n",
        "anydevice/cli/_string_sample.py": 'import importlib\npage = importlib.import_module("anydevice.compat_matrix.page")\n',
        "plugins/_string_sample.py": 'PROBE = "anydevice.runtime.strict:user_line"\n',
    }
    for rel, text in bad.items():
        plant(tmp_path, rel, text)
    fine = {  # not imports: a docstring naming a module, an entry-point group, a folder located without importing it
        "anydevice/cli/_fine_sample.py": '"""Runs anydevice.compat_matrix.page."""\nGROUP = "anydevice.commands"\n',
        "anydevice/runtime/_fine_sample.py": (
            'import importlib.util\nSPEC = importlib.util.find_spec("anydevice.compat_matrix.page")\n'
        ),
    }
    for rel, text in fine.items():
        plant(tmp_path, rel, text)
    layers = read_layers(ARCHITECTURE.read_text())
    found = [hit for folder in ("anydevice", "plugins", "compat_matrix") for hit in layering_violations(folder, tmp_path, layers)]
    assert "anydevice/edge/_face_sample.py:2: anydevice (features may import only" in " ".join(found)
    assert "anydevice/runtime/_face_sample.py:1: anydevice.cli (runtime may import only" in " ".join(found)
    assert "anydevice/cli/_string_sample.py:2: anydevice.compat_matrix.page (tools may import only" in " ".join(found)
    assert "plugins/_string_sample.py:1: anydevice.runtime.strict (plugins may import only" in " ".join(found)
    assert not [hit for hit in found if "_fine_sample" in hit], found


def test_the_table_is_read_not_copied(tmp_path: Path) -> None:
    """A row changed in the document changes the verdict: allowing files to import the runtime lets the planted module pass."""
    plant(tmp_path, "anydevice/files/_layering_sample.py", "from anydevice.runtime.registry import Registry\n")
    text = ARCHITECTURE.read_text().replace(
        "| files | `anydevice.files` | leaves |", "| files | `anydevice.files` | leaves, runtime |"
    )
    assert layering_violations("anydevice", tmp_path, read_layers(ARCHITECTURE.read_text()))
    assert not layering_violations("anydevice", tmp_path, read_layers(text))


# -- vendor environment variables live in the plugins that read them ---------------------------------
def vendor_variables() -> set[str]:
    """The names of every variable a built-in plugin declares (``DeviceSpec.settings``)."""
    from anydevice.runtime.registry import builtin_plugin_settings

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
