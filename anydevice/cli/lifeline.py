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
  ``kill -9``) it sends SIGTERM to every process still carrying that value or seen descending from
  the launcher (the launcher is their subreaper, so a rank's orphans stay in its tree; the guardian
  notes the tree every half second), and their descendants, then SIGKILL one second later: a process
  that ignores SIGTERM, clears its environment or starts its own session still ends. When the launcher ends
  by itself (a result, a failure, Ctrl-C) it waits for that (:func:`end_descendants`), so nothing the run
  started outlives its exit. Linux only (it reads ``/proc``); a process started with a cleared environment in
  the last half second before the launcher ends may escape it.
"""

from __future__ import annotations

import ctypes
import os
import subprocess
import sys

from anydevice import settings
from anydevice.cli.rank_start import INTERRUPTED as INTERRUPTED
from anydevice.cli.rank_start import die_with_parent as die_with_parent
from anydevice.cli.rank_start import quiet_interrupt as quiet_interrupt

# The guardian: a bare interpreter (-S, no anydevice import) that waits on its stdin, the read end of a
# pipe only the launcher holds (argv[2] is the launcher's pid). While it waits it notes, every half
# second, the launcher's descendants (pid and start time, so a reused pid is never mistaken for one).
# At EOF it ends every process whose environment holds argv[1] or that it saw descending from the
# launcher, and their descendants: SIGTERM, then SIGKILL one second later.
_GUARDIAN = r"""
import os, select, signal, sys, time
signal.signal(signal.SIGINT, signal.SIG_IGN)
marker, root, me = sys.argv[1].encode(), int(sys.argv[2]), os.getpid()
def processes():
    table = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit() and int(entry) != me:
            try:
                with open(f"/proc/{entry}/stat", "rb") as f:
                    fields = f.read().rsplit(b")", 1)[1].split()
                table[int(entry)] = (int(fields[1]), fields[19])
            except (OSError, IndexError, ValueError):
                pass
    return table
def below(table, roots):
    children = {}
    for pid, (ppid, _) in table.items():
        children.setdefault(ppid, []).append(pid)
    found, todo = set(), list(roots)
    while todo:
        for child in children.get(todo.pop(), ()):
            if child not in found:
                found.add(child)
                todo.append(child)
    return found
def marked(table):
    found = set()
    for pid in table:
        try:
            with open(f"/proc/{pid}/environ", "rb") as f:
                if marker in f.read().split(b"\0"):
                    found.add(pid)
        except OSError:
            pass
    return found
seen = {}
while True:
    if select.select([0], [], [], 0.5)[0] and not os.read(0, 1024):
        break
    table = processes()
    seen.update((pid, table[pid][1]) for pid in below(table, [root]))
def targets():
    table = processes()
    known = {pid for pid, start in seen.items() if pid in table and table[pid][1] == start}
    roots = known | marked(table)
    return roots | below(table, roots)
deadline = time.monotonic() + 5.0
sig = signal.SIGTERM
kill_at = time.monotonic() + 1.0
while time.monotonic() < deadline:
    pids = targets()
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

PR_SET_CHILD_SUBREAPER = 36  # from <linux/prctl.h>


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
            [sys.executable, "-S", "-c", _GUARDIAN, marker, str(os.getpid())],
            stdin=read,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            env=env,
            start_new_session=True,  # Ctrl-C and a kill of the launcher's process group leave it to do its job
            close_fds=True,
        )
    finally:
        os.close(read)
    # orphans of a rank become the launcher's children, not init's: they stay in the tree the guardian watches
    ctypes.CDLL(None, use_errno=True).prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)
    _guardian = (guardian, write)  # the pipe stays open until this process ends: its end is the guardian's signal


def end_descendants(wait_s: float = 6.0) -> None:
    """End this launcher's descendants now and wait until they are gone (the guardian's SIGTERM, then SIGKILL one
    second later), so that nothing the run started outlives the launcher's own exit; no-op without a guardian."""
    global _guardian
    if _guardian is None:
        return
    guardian, write = _guardian
    _guardian = None
    try:
        os.close(write)  # the guardian's signal: it ends every descendant, then exits
    except OSError:
        pass
    try:
        guardian.wait(wait_s)
    except subprocess.TimeoutExpired:  # it keeps working on its own: the launcher ends now
        pass


_guardian: tuple[subprocess.Popen[bytes], int] | None = None
