"""Shared fixtures: a clean anydevice state per test and the test plugins installed for real."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.utils import CLEARED, TEST_PLUGINS


@pytest.fixture(autouse=True)
def clean_anydevice(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Each test starts with no selection, no launcher variables and a fresh registry."""
    for name in CLEARED:
        monkeypatch.delenv(name, raising=False)
    import anydevice
    from anydevice.registry import reset_registry

    anydevice.reset()
    reset_registry()
    yield
    anydevice.reset()
    reset_registry()


@pytest.fixture(scope="session")
def plugin_site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The test plugin packages (tests/plugins/*), pip-installed for real into a target directory.

    Put it on PYTHONPATH to make their entry points visible; the test venv itself stays untouched.
    """
    target = tmp_path_factory.mktemp("plugin-site")
    build = tmp_path_factory.mktemp("plugin-build")
    sources = []
    for pkg in sorted(TEST_PLUGINS.iterdir()):
        if (pkg / "pyproject.toml").exists():
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
