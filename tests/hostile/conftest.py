"""The hostile plugin packages (tests/hostile/plugins/*), pip-installed for real into target directories.

Put a site on PYTHONPATH to make its entry points visible, ahead of the venv's own (the path order
the clash cases are about); the test venv itself stays untouched. The slow plugins (hanging at
import and registration) get their own site, so only the tests about them pay their deadline.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.hostile.other_user import make_shared
from tests.utils import pip_site

PLUGINS = Path(__file__).resolve().parent / "plugins"


def install(packages: list[str], factory: pytest.TempPathFactory, name: str) -> Path:
    """pip-install ``packages`` (folders under tests/hostile/plugins) into a target directory of their own."""
    return pip_site(name, [PLUGINS / package for package in packages], factory)


@pytest.fixture(scope="session")
def hostile_site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """anydevice-hostile (hangs, exits, bad declarations) and anydevice-impostor (built-in names)."""
    return install(["anydevice_hostile", "anydevice_impostor"], tmp_path_factory, "hostile-site")


@pytest.fixture(scope="session")
def slow_site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """anydevice-slowplugin: one plugin hangs at import, one in its registration hook."""
    return install(["anydevice_slowplugin"], tmp_path_factory, "slow-site")


@pytest.fixture(scope="session")
def native_site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """anydevice-native: detections that hold the GIL in C, segfault, abort, os._exit(0); an import that segfaults."""
    return install(["anydevice_native"], tmp_path_factory, "native-site")


@pytest.fixture(scope="session")
def noisy_site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """anydevice-noisy: plugins that print to stdout and give escape sequences, forged rows and 5 MB reasons."""
    return install(["anydevice_noisy"], tmp_path_factory, "noisy-site")


@pytest.fixture(scope="session")
def badload_site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """anydevice-badload: available devices whose load exits, hangs or returns None; hooks that exit."""
    return install(["anydevice_badload"], tmp_path_factory, "badload-site")


@pytest.fixture
def shared() -> Iterator[Path]:
    """A fresh sticky, world-writable directory under /tmp, where a second user (uid 65534) can plant files."""
    yield from make_shared()


@pytest.fixture(scope="session")
def tenslow_site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """anydevice-tenslow: ten plugins, each taking 1 s to import (far under the deadline)."""
    return install(["anydevice_tenslow"], tmp_path_factory, "tenslow-site")


@pytest.fixture(scope="session")
def reentrant_site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """anydevice-reentrant: a registration hook that calls back into the registry; a probe hook that hangs."""
    return install(["anydevice_reentrant"], tmp_path_factory, "reentrant-site")


@pytest.fixture(scope="session")
def lingering_site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """anydevice-lingering: plugins that leave a non-daemon thread (its own code, or a builtin) or a hanging exit handler."""
    return install(["anydevice_lingering"], tmp_path_factory, "lingering-site")
