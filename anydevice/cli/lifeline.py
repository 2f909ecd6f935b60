"""Ranks that live and die with ``anydevice run``, and interrupts that end quietly.

* :func:`die_with_parent` (in each rank, first thing): on Linux the kernel sends the rank SIGKILL
  when the launcher dies, even by ``kill -9`` (``prctl(PR_SET_PDEATHSIG)``); elsewhere a daemon
  thread polls the parent pid each second. A rank whose launcher is already gone exits at once.
* :func:`quiet_interrupt` (around the rank's script): Ctrl-C ends the rank with status 130 and no
  traceback; the launcher prints the one line that says the run was interrupted.
"""

from __future__ import annotations

import ctypes
import os
import signal
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager

from anydevice import settings

PR_SET_PDEATHSIG = 1  # from <linux/prctl.h>
INTERRUPTED = 128 + signal.SIGINT  # the shell's status for a process ended by Ctrl-C


def parent_env() -> dict[str, str]:
    """What the launcher puts in its ranks' environment so they can watch it (its pid)."""
    return {settings.ANYDEVICE_LAUNCH_PARENT.name: str(os.getpid())}


def die_with_parent() -> None:
    """Make this rank end when the launcher that started it ends (no-op outside ``anydevice run``)."""
    value = settings.ANYDEVICE_LAUNCH_PARENT.get()
    if value is None or not value.isdigit():
        return
    parent = int(value)
    if sys.platform.startswith("linux"):
        libc = ctypes.CDLL(None, use_errno=True)
        if libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0) != 0:
            _watch(parent)  # prctl refused (seccomp): poll instead
    else:
        _watch(parent)
    if os.getppid() != parent:  # the launcher died before the line above took effect
        os._exit(1)


def _watch(parent: int) -> None:
    def poll() -> None:
        while os.getppid() == parent:
            time.sleep(1.0)
        os._exit(1)

    threading.Thread(target=poll, name="anydevice-parent-watch", daemon=True).start()


@contextmanager
def quiet_interrupt() -> Iterator[None]:
    """Turn a KeyboardInterrupt that escapes the block into exit status 130, without a traceback."""
    try:
        yield
    except KeyboardInterrupt:
        sys.stderr.flush()
        raise SystemExit(INTERRUPTED) from None
