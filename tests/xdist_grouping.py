"""Under pytest-xdist, the tests that share something run on one worker, one after another.

- A module-scoped fixture (one 2-rank launch, one built wheel that several tests read) runs once per
  worker that gets one of its tests: with ``--dist load`` a module's tests are spread over the workers,
  so the expensive job ran up to once per worker. Such a module's tests go to one worker.
- Tests that start a heavy shared kind of thing (a local Ray cluster) crowd each other out on a
  2-core machine when they run at once (three Ray tests took 144, 93 and 69 s side by side, 20-30 s
  apart). Their modules say ``XDIST_GROUP = "ray"``; every module of a group goes to one worker.

``scripts/test`` runs the main lane with ``--dist loadgroup``; this scheduler keeps that mode's
``@group`` rule, adds the two above, and still spreads every other test one by one.

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
NAMED_GROUP = re.compile(r"""^XDIST_GROUP = ["']([\w.-]+)["']""", re.MULTILINE)


@cache
def group_of(module: Path, nodeid_module: str) -> str | None:
    """The group of a test module: its ``XDIST_GROUP``, else the module itself when it declares a fixture wider than
    one test, else None (its tests are spread one by one)."""
    try:
        source = module.read_text()
    except OSError:
        return None
    named = NAMED_GROUP.search(source)
    if named is not None:
        return f"group:{named.group(1)}"
    return nodeid_module if MODULE_FIXTURE.search(source) is not None else None


@pytest.hookimpl(optionalhook=True, tryfirst=True)
def pytest_xdist_make_scheduler(config: pytest.Config, log: Any) -> Any:
    """With ``--dist loadgroup``: xdist's group scheduling, with the module and named groups above."""
    if config.getvalue("dist") != "loadgroup":
        return None
    from xdist.scheduler import LoadGroupScheduling

    class SharedThingsGroups(LoadGroupScheduling):
        def _split_scope(self, nodeid: str) -> str:
            module = nodeid.split("::", 1)[0]
            return group_of(config.rootpath / module, module) or str(super()._split_scope(nodeid))

    return SharedThingsGroups(config, log)
