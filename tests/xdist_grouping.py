"""Under pytest-xdist, the tests of a module with a module-scoped fixture run on one worker.

A module-scoped fixture (one 2-rank launch, one built wheel that several tests read) runs once per
worker that gets one of its tests: with ``--dist load`` a module's tests are spread over the workers,
so the expensive job ran up to once per worker. ``scripts/test`` runs the main lane with
``--dist loadgroup``; this scheduler keeps that mode's ``@group`` rule and also sends every test of
such a module to one worker, while other tests are still spread one by one.

Why not xdist's own ``xdist_group`` mark: xdist 3.8 attaches the group to the test id through an
attribute pytest 9 no longer reads, so the mark has no effect with the pytest this project pins.
"""

from __future__ import annotations

import re
from functools import cache
from pathlib import Path
from typing import Any

import pytest

MODULE_FIXTURE = re.compile(r"""@pytest\.fixture\([^)]*scope=["'](module|package|class)["']""")


@cache
def shares_a_fixture(module: Path) -> bool:
    """True when the test module's source declares a fixture wider than one test."""
    try:
        return MODULE_FIXTURE.search(module.read_text()) is not None
    except OSError:
        return False


@pytest.hookimpl(optionalhook=True, tryfirst=True)
def pytest_xdist_make_scheduler(config: pytest.Config, log: Any) -> Any:
    """With ``--dist loadgroup``: xdist's group scheduling, grouping each module that shares a fixture."""
    if config.getvalue("dist") != "loadgroup":
        return None
    from xdist.scheduler import LoadGroupScheduling

    class ModuleFixtureGroups(LoadGroupScheduling):
        def _split_scope(self, nodeid: str) -> str:
            module = nodeid.split("::", 1)[0]
            return module if shares_a_fixture(config.rootpath / module) else str(super()._split_scope(nodeid))

    return ModuleFixtureGroups(config, log)
