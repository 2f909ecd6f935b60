"""Under pytest-xdist, the tests that share something run on one worker, one after another.

``scripts/test`` runs the main lane with ``--dist loadgroup``; this scheduler replaces that mode's grouping:

- Each test module is one unit of work, as ``--dist loadfile`` makes it: its module-scoped fixtures (a 2-rank
  launch, a built wheel that several tests read) run once, and the session fixtures its tests use are built on
  fewer workers. Spread test by test (``--dist load``), a module fixture ran once per worker that got one of
  its tests; round-robin one test at a time, every worker built nearly every session fixture (the main lane
  took 1,289 CPU-s that way against 1,138 with ``--dist load``).
- Modules naming one ``XDIST_GROUP`` are one unit: tests that start a heavy shared kind of thing (a local Ray
  cluster) crowd each other out on 2 cores when they run at once (three Ray tests took 144, 93 and 69 s side by
  side, 20-30 s apart).
- Units start largest first (xdist's default order for scoped scheduling), so small modules fill the tail.

Why not xdist's own ``xdist_group`` mark: xdist 3.8 attaches the group to the test id through an attribute
pytest 9 no longer reads, so the mark has no effect with the pytest this project pins.
"""

from __future__ import annotations

import re
from functools import cache
from pathlib import Path
from typing import Any

import pytest

NAMED_GROUP = re.compile(r"""^XDIST_GROUP = ["']([\w.-]+)["']""", re.MULTILINE)


@cache
def unit_of(module: Path, nodeid_module: str) -> str:
    """A test module's unit of work: ``group:NAME`` for its ``XDIST_GROUP``, else the module itself."""
    try:
        named = NAMED_GROUP.search(module.read_text())
    except OSError:
        named = None
    return f"group:{named.group(1)}" if named is not None else nodeid_module


@pytest.hookimpl(optionalhook=True, tryfirst=True)
def pytest_xdist_make_scheduler(config: pytest.Config, log: Any) -> Any:
    """With ``--dist loadgroup``: one unit per module, or per named group of modules."""
    if config.getvalue("dist") != "loadgroup":
        return None
    from xdist.scheduler import LoadGroupScheduling

    class ModulesAndGroups(LoadGroupScheduling):
        def _split_scope(self, nodeid: str) -> str:
            module = nodeid.split("::", 1)[0]
            return unit_of(config.rootpath / module, module)

    return ModulesAndGroups(config, log)
