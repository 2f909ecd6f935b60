"""Shared fixtures: a clean anydevice state per test and the test plugins installed for real."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.long_marker import pytest_collection_modifyitems as mark_long_tests
from tests.utils import CLEARED, TEST_PLUGINS, pip_site

QUICK_EXCLUDED = Path(__file__).with_name("quick_excluded.txt")
"""Tests measured over two seconds in a full run (``scripts/quick-list`` writes it): ``--quick`` leaves them out."""
STALE = pytest.StashKey[list[str]]()
"""With ``--quick``: the listed tests that their collected files no longer have."""


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--quick", action="store_true", help="the edit-test loop: also leave out the tests tests/quick_excluded.txt lists"
    )


@pytest.hookimpl(tryfirst=True)  # before -m and -k deselect: a listed test they drop is not stale
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """With ``--quick``, deselect the tests measured slow (a list, so the core lanes still run them); ``long`` tests'
    reasons go into the junit file (tests/long_marker.py)."""
    mark_long_tests(items)
    if not config.getoption("quick"):
        return
    listed = {line.strip() for line in QUICK_EXCLUDED.read_text().splitlines() if line.strip() and not line.startswith("#")}
    collected = {item.nodeid for item in items}
    files = {nodeid.partition("::")[0] for nodeid in collected}
    config.stash[STALE] = sorted(i for i in listed if i.partition("::")[0] in files and i not in collected)
    dropped = [item for item in items if item.nodeid in listed]
    if dropped:
        config.hook.pytest_deselected(items=dropped)
        items[:] = [item for item in items if item.nodeid not in listed]


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter, config: pytest.Config) -> None:
    """With ``--quick``, say which listed tests were not found in their files: renamed tests and moved doc blocks,
    whose new ids ran although they were measured slow."""
    stale = config.stash.get(STALE, [])
    if stale:
        terminalreporter.write_line(
            f"--quick: tests/quick_excluded.txt lists {len(stale)} tests its files no longer have (renamed, or a doc "
            "block that moved): their new ids ran. A full `LANES=main scripts/test` rewrites the list. "
            + ", ".join(stale[:5])
            + (" ..." if len(stale) > 5 else ""),
            yellow=True,
        )


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
    """The test plugin packages (tests/plugins/*), pip-installed for real into a target directory (``pip_site``)."""
    return pip_site("plugins", sorted(p for p in TEST_PLUGINS.iterdir() if (p / "pyproject.toml").exists()), tmp_path_factory)
