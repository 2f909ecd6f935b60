"""Probes that start a long-lived child process (a probe's grandchild, seen from the runner), for tests/hostile.

Each writes its child's pid to ``$ANYDEVICE_TEST_PIDS`` (one per line); ``zz_orphan_hang`` then hangs so
that the runner kills its worker at the timeout, ``zz_orphan_done`` returns and leaves its child running.
"""

from __future__ import annotations

import os
import subprocess
import time

from anydevice.compat_matrix.execute import ProbeContext
from anydevice.compat_matrix.probe import Probe


def _start_child() -> None:
    child = subprocess.Popen(["sleep", "600"])
    with open(os.environ["ANYDEVICE_TEST_PIDS"], "a") as pids:
        pids.write(f"{child.pid}\n")


def orphan_hang(ctx: ProbeContext) -> None:
    _start_child()
    time.sleep(600)


def orphan_done(ctx: ProbeContext) -> None:
    _start_child()


PROBES = [
    Probe("zz_orphan_hang", "ops", orphan_hang, description="starts a child process, then hangs"),
    Probe("zz_orphan_done", "ops", orphan_done, description="starts a child process and returns"),
]
