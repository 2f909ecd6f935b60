"""Ranks that live and die with ``anydevice run``, and interrupts that end quietly.

* :func:`die_with_parent` (in each rank, first thing): on Linux the kernel sends the rank SIGKILL
  when the launcher dies, even by ``kill -9`` (``prctl(PR_SET_PDEATHSIG)``); elsewhere a daemon
  thread polls the parent pid each second. A rank whose launcher is already gone exits at once.
* :func:`quiet_interrupt` (around the rank's script): Ctrl-C ends the rank with status 130 and no
  traceback; the launcher prints the one line that says the run was interrupted.
* :func:`guard_descendants` (in the launcher, before anything starts): the processes the ranks (or a
  command) start themselves end with the run. Every process the launcher starts, and every process
  those start, inherits ``ANYDEVICE_LAUNCH_PARENT=<launcher pid>``; a small guardian process waits
  on a pipe only the launcher holds, and when the launcher ends in any way (return, exception,
  ``kill -9``) it sends SIGTERM to every process still carrying that value, then SIGKILL one second
  later. Linux only (it reads ``/proc``); a process that clears its environment escapes it.
"""

from __future__ import annotations

import os
import subprocess
import sys

from anydevice import settings
from anydevice.cli.rank_start import INTERRUPTED as INTERRUPTED
from anydevice.cli.rank_start import die_with_parent as die_with_parent
from anydevice.cli.rank_start import quiet_interrupt as quiet_interrupt

# The guardian: a bare interpreter (-S, no anydevice import) that blocks on its stdin, the read end of
# a pipe only the launcher holds, and at EOF ends every process whose environment holds argv[1].
_GUARDIAN = r"""
import os, signal, sys, time
signal.signal(signal.SIGINT, signal.SIG_IGN)
marker = sys.argv[1].encode()
while os.read(0, 1024):
    pass
me = os.getpid()
def marked():
    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit() and int(entry) != me:
            try:
                with open(f"/proc/{entry}/environ", "rb") as f:
                    if marker in f.read().split(b"\0"):
                        found.append(int(entry))
            except OSError:
                pass
    return found
deadline = time.monotonic() + 5.0
sig = signal.SIGTERM
kill_at = time.monotonic() + 1.0
while time.monotonic() < deadline:
    pids = marked()
    if not pids:
        break
    for pid in pids:
        try:
            os.kill(pid, sig)
        except OSError:
            pass
    time.sleep(0.1)
    if time.monotonic() > kill_at:
        sig = signal.SIGKILL
"""


def parent_env() -> dict[str, str]:
    """What the launcher puts in its ranks' environment so they can watch it (its pid)."""
    return {settings.ANYDEVICE_LAUNCH_PARENT.name: str(os.getpid())}


def guard_descendants() -> None:
    """Start the guardian that ends this launcher's descendants when it ends (Linux; once per process)."""
    global _guardian
    if _guardian is not None or not sys.platform.startswith("linux"):
        return
    marker = f"{settings.ANYDEVICE_LAUNCH_PARENT.name}={os.getpid()}"
    read, write = os.pipe()  # not inherited by anything else the launcher starts (PEP 446)
    env = {k: v for k, v in os.environ.items() if k != settings.ANYDEVICE_LAUNCH_PARENT.name}
    try:
        guardian = subprocess.Popen(
            [sys.executable, "-S", "-c", _GUARDIAN, marker],
            stdin=read,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            env=env,
            start_new_session=True,  # Ctrl-C and a kill of the launcher's process group leave it to do its job
            close_fds=True,
        )
    finally:
        os.close(read)
    _guardian = (guardian, write)  # the pipe stays open until this process ends: its end is the guardian's signal


_guardian: tuple[subprocess.Popen[bytes], int] | None = None
