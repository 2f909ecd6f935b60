"""Shared fixtures: a clean anydevice state per test and the test plugins installed for real."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.utils import CLEARED, TEST_PLUGINS

QUICK_EXCLUDED = Path(__file__).with_name("quick_excluded.txt")
"""Tests measured over two seconds in a full run (``scripts/quick-list`` writes it): ``--quick`` leaves them out."""


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--quick", action="store_true", help="the edit-test loop: also leave out the tests tests/quick_excluded.txt lists"
    )


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """With ``--quick``, deselect the tests measured slow (a list, so the core lanes still run them)."""
    if not config.getoption("quick"):
        return
    listed = {line.strip() for line in QUICK_EXCLUDED.read_text().splitlines() if line.strip() and not line.startswith("#")}
    dropped = [item for item in items if item.nodeid in listed]
    if dropped:
        config.hook.pytest_deselected(items=dropped)
        items[:] = [item for item in items if item.nodeid not in listed]


@pytest.fixture(autouse=True)
def clean_anydevice(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Each test starts with no selection, no launcher variables and a fresh registry."""
    for name in CLEARED:
        monkeypatch.delenv(name, raising=False)
    import anydevice
    from anydevice.runtime.registry import reset_registry

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
