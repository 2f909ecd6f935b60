"""docs/plugins.md cannot rot: its complete plugin is built from the page's own text, installed and used.

Each fenced block whose first line is ``# file: PATH`` is written to PATH; the package is then
pip-installed for real (no network: ``--no-build-isolation --no-deps`` with this venv's setuptools)
into a target directory that goes on PYTHONPATH for ``anydevice`` subprocesses.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.utils import REPO, anydevice_cli, python

DOC = REPO / "docs" / "plugins.md"
BLOCK = re.compile(r"^```[a-z]*\n# file: (?P<path>\S+)\n(?P<body>.*?)^```$", re.M | re.S)


def doc_files(text: str) -> dict[str, str]:
    """``path -> contents`` for every fenced block that starts with a ``# file:`` comment."""
    return {m.group("path"): m.group("body") for m in BLOCK.finditer(text)}


@pytest.fixture(scope="module")
def plugin_from_doc(tmp_path_factory: pytest.TempPathFactory) -> Path:
    files = doc_files(DOC.read_text(encoding="utf-8"))
    assert set(files) == {"anydevice-mychip/pyproject.toml", "anydevice-mychip/anydevice_mychip/__init__.py"}
    src = tmp_path_factory.mktemp("doc-plugin-src")
    for rel, body in files.items():
        path = src / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(body, encoding="utf-8")
    target = tmp_path_factory.mktemp("doc-plugin-site")
    package = str(src / "anydevice-mychip")
    proc = subprocess.run(
        [sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--no-build-isolation", "--target", str(target), package],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr
    assert list(target.glob("anydevice_mychip-0.1.0.dist-info"))
    return target


def test_doc_blocks_are_found() -> None:
    sample = "x\n```toml\n# file: a/b.toml\nk = 1\n```\n```python\nprint()\n```\n"
    assert doc_files(sample) == {"a/b.toml": "k = 1\n"}


def test_anydevice_list_shows_the_doc_plugin(plugin_from_doc: Path) -> None:
    proc = anydevice_cli("list", "--json", pythonpath=plugin_from_doc)
    assert proc.returncode == 0, proc.stderr
    devices = {d["name"]: d for d in json.loads(proc.stdout)["devices"]}
    assert devices["mychip"]["available"] is True, devices.get("mychip")
    text = anydevice_cli("list", pythonpath=plugin_from_doc)
    assert text.returncode == 0 and any(line.startswith("mychip") for line in text.stdout.splitlines()), text.stdout


def test_anydevice_env_selects_the_doc_plugin(plugin_from_doc: Path) -> None:
    proc = anydevice_cli("info", "--json", env={"ANYDEVICE": "mychip"}, pythonpath=plugin_from_doc)
    assert proc.returncode == 0, proc.stderr
    backend = json.loads(proc.stdout)["backend"]
    assert (backend["name"], backend["plugin"], backend["distribution"], backend["chip"]) == (
        "mychip",
        "mychip",
        "anydevice-mychip",
        "MyChip-1",
    )
    # and a real tensor lands on it through the public API
    code = "import anydevice as ad, torch; t = ad.to(torch.ones(2)); print(ad.backend().name, t.device.type, float(t.sum()))"
    run = python("-c", code, env={"ANYDEVICE": "my-chip", "ANYDEVICE_QUIET": "1"}, pythonpath=plugin_from_doc)
    assert run.returncode == 0, run.stderr
    assert run.stdout.split() == ["mychip", "cpu", "2.0"]


def test_the_doc_plugin_is_at_most_30_lines_of_code() -> None:
    """Identity, detection and the vendor's names: code lines only (no blanks, comments or docstrings)."""
    import ast

    source = doc_files(DOC.read_text(encoding="utf-8"))["anydevice-mychip/anydevice_mychip/__init__.py"]
    tree = ast.parse(source)
    docs = {
        n
        for node in ast.walk(tree)
        if isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant) and isinstance(node.value.value, str)
        for n in range(node.lineno, (node.end_lineno or node.lineno) + 1)
    }
    lines = enumerate(source.splitlines(), 1)
    code = [line for i, line in lines if line.strip() and not line.strip().startswith("#") and i not in docs]
    assert len(code) <= 30, "\n".join(code)


def test_the_doc_plugin_imports_only_the_plugin_api() -> None:
    """Every import in the page's plugin is from ``anydevice.plugin`` (the one door), at top level and in ``load``."""
    import ast

    source = doc_files(DOC.read_text(encoding="utf-8"))["anydevice-mychip/anydevice_mychip/__init__.py"]
    imported = {node.module for node in ast.walk(ast.parse(source)) if isinstance(node, ast.ImportFrom)}
    imported |= {a.name for node in ast.walk(ast.parse(source)) if isinstance(node, ast.Import) for a in node.names}
    assert imported == {"anydevice.plugin"}, imported


def test_auto_picks_the_doc_plugin_over_cpu_by_its_priority(plugin_from_doc: Path) -> None:
    """Installed, the page's device (priority 50) is what `auto` selects here: above cpu, by priority, not by name."""
    proc = anydevice_cli("info", "--json", env={"ANYDEVICE": "auto"}, pythonpath=plugin_from_doc)
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["backend"]["name"] == "mychip"


def test_the_doc_plugin_compiles_with_its_declared_backend(plugin_from_doc: Path) -> None:
    """The table names its compile backend (no inductor default is assumed); ad.compile runs it on a real model."""
    code = (
        "import anydevice as ad, torch; m = ad.compile(torch.nn.Linear(2, 1)); c = ad.backend().shims.compilation;"
        "print(c.backend, c.inductor, c.cache_dir() is None, float(m(ad.to(torch.ones(1, 2))).detach().sum()) == "
        "float(m._orig_mod(torch.ones(1, 2)).detach().sum()))"
    )
    run = python("-c", code, env={"ANYDEVICE": "mychip", "ANYDEVICE_QUIET": "1"}, pythonpath=plugin_from_doc)
    assert run.returncode == 0, run.stderr
    assert run.stdout.split() == ["inductor", "False", "True", "True"]
