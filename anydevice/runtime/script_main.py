"""A script runs as ``__main__`` and its namespace stays ``__main__`` after it ends, as under ``python SCRIPT``.

Used wherever anydevice runs a user's script in its own process: a rank of ``anydevice run``
(:mod:`anydevice.cli.rank_start`), ``anydevice check``'s CPU run (:mod:`anydevice.preflight.runner`),
a SLURM task (:mod:`anydevice.integrations.slurm`). Standard library only: a rank imports it before the script.
"""

from __future__ import annotations

import runpy
import sys
import types
from collections.abc import Callable
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from types import TracebackType


def run_as_main(target: str, is_module: bool = False, check_module: Callable[[str], None] | None = None) -> None:
    """Run ``target`` as ``__main__`` (runpy), then leave its namespace as ``sys.modules["__main__"]``, as ``python`` does.

    runpy's ``__main__`` lasts only as long as the run: its functions hold its globals, so after the run they are
    garbage in a cycle, and the collector would finalize the script's objects wherever it next runs, in whichever
    thread allocates then, before the exit handlers (a DataLoader left with live workers then shuts them down from
    that thread, under whatever lock it holds). Kept as ``__main__``, they end as under ``python script.py``: when
    the interpreter ends, after the exit handlers.
    """
    try:
        if is_module:
            if check_module is not None:
                check_module(target)  # e.g. end as ``python -m`` does when there is no such module
            namespace = runpy.run_module(target, run_name="__main__", alter_sys=True)
        else:
            namespace = runpy.run_path(target, run_name="__main__")
    except BaseException as exc:  # SystemExit, Ctrl-C, an error: the script's frames still hold its namespace
        found = _main_namespace(exc.__traceback__)
        if found is not None:
            _keep_as_main(found)
        raise
    _keep_as_main(namespace)  # runpy's copy of it: the same objects


def _main_namespace(tb: TracebackType | None) -> dict[str, object] | None:
    """The globals of the script's top-level frame in ``tb`` (from :func:`run_as_main` down): the first ``__main__`` one."""
    while tb is not None:
        namespace = tb.tb_frame.f_globals
        if namespace.get("__name__") == "__main__":
            return namespace
        tb = tb.tb_next
    return None


def _keep_as_main(namespace: dict[str, object]) -> None:
    """A ``__main__`` module holding ``namespace``'s objects until the interpreter ends (and clears ``__main__``)."""
    main = types.ModuleType("__main__")
    main.__dict__.update(namespace)
    sys.modules["__main__"] = main
