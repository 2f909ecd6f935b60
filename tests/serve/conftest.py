"""The serve lane (requirements/serve.txt): vLLM's CPU build and SGLang's platform layer, driven for real.

Tests that need an engine are not collected where it is not installed (the other lanes).
"""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path

import pytest

from tests.utils import REPO

_VLLM = importlib.util.find_spec("vllm") is not None
_SGLANG = importlib.util.find_spec("sglang") is not None
collect_ignore_glob = [*([] if _VLLM else ["test_vllm_*.py"]), *([] if _SGLANG else ["test_sglang_*.py"])]

SERVE_PLUGINS = Path(__file__).resolve().parent / "plugins"


def _install(target: Path, build: Path, packages: list[Path]) -> Path:
    """pip-install test packages for real into ``target`` (put it on PYTHONPATH to see their entry points)."""
    sources = []
    for pkg in packages:
        copy = build / pkg.name  # build from a copy: no build/ or egg-info litter in the repo
        subprocess.run(["cp", "-r", str(pkg), str(copy)], check=True)
        sources.append(str(copy))
    subprocess.run(
        [sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--no-build-isolation", "--target", str(target), *sources],
        check=True,
        capture_output=True,
        text=True,
    )
    return target


@pytest.fixture(scope="session")
def toy_site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The third-party anydevice 'toy' device alone: a device anydevice finds that no engine has a platform for."""
    return _install(
        tmp_path_factory.mktemp("toy-site"),
        tmp_path_factory.mktemp("toy-build"),
        [REPO / "tests" / "plugins" / "anydevice_toydevice"],
    )


@pytest.fixture(scope="session")
def vendor_site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The 'toy' device plus its vendor's vLLM and SGLang platform plugins (which always claim the machine)."""
    return _install(
        tmp_path_factory.mktemp("vendor-site"),
        tmp_path_factory.mktemp("vendor-build"),
        [REPO / "tests" / "plugins" / "anydevice_toydevice", SERVE_PLUGINS / "toyvendor"],
    )


@pytest.fixture(scope="session")
def two_vendor_site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The toy device and its vendor's plugins, plus a second vendor's vLLM platform plugin (which finds no device)."""
    return _install(
        tmp_path_factory.mktemp("two-vendor-site"),
        tmp_path_factory.mktemp("two-vendor-build"),
        [REPO / "tests" / "plugins" / "anydevice_toydevice", SERVE_PLUGINS / "toyvendor", SERVE_PLUGINS / "othervendor"],
    )


@pytest.fixture(scope="session")
def tiny_model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A random two-layer Llama with a tokenizer trained here (tests/serve/tiny_model.py)."""
    from tests.serve.tiny_model import write_model

    return write_model(tmp_path_factory.mktemp("tiny-llama"))
