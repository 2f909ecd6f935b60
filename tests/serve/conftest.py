"""The serve lane (requirements/serve.txt): vLLM's CPU build and SGLang's platform layer, driven for real.

Tests that need an engine are not collected where it is not installed (the other lanes).
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

from tests.utils import REPO, pip_site

_VLLM = importlib.util.find_spec("vllm") is not None
_SGLANG = importlib.util.find_spec("sglang") is not None
collect_ignore_glob = [*([] if _VLLM else ["test_vllm_*.py"]), *([] if _SGLANG else ["test_sglang_*.py"])]

SERVE_PLUGINS = Path(__file__).resolve().parent / "plugins"
TOY = REPO / "tests" / "plugins" / "anydevice_toydevice"


@pytest.fixture(scope="session")
def toy_site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The third-party anydevice 'toy' device alone: a device anydevice finds that no engine has a platform for."""
    return pip_site("toy", [TOY], tmp_path_factory)


@pytest.fixture(scope="session")
def vendor_site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The 'toy' device plus its vendor's vLLM and SGLang platform plugins (which always claim the machine)."""
    return pip_site("vendor", [TOY, SERVE_PLUGINS / "toyvendor"], tmp_path_factory)


@pytest.fixture(scope="session")
def two_vendor_site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The toy device and its vendor's plugins, plus a second vendor's vLLM platform plugin (which finds no device)."""
    return pip_site("two-vendor", [TOY, SERVE_PLUGINS / "toyvendor", SERVE_PLUGINS / "othervendor"], tmp_path_factory)


@pytest.fixture(scope="session")
def tiny_model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A random two-layer Llama with a tokenizer trained here (tests/serve/tiny_model.py)."""
    from tests.serve.tiny_model import write_model

    return write_model(tmp_path_factory.mktemp("tiny-llama"))
