"""``anydevice run -- COMMAND [args...]``: one console command with the selected device's environment.

The command (``vllm serve MODEL``, ``accelerate launch ...``, a shell script) runs as one process in
the launcher's process group, so it keeps the terminal: Ctrl-C, Ctrl-Z and reads from the terminal
reach it as they would without anydevice. A signal sent to the launcher alone (``kill -TERM
<pid>``, a supervisor, a test harness) is passed on to the command; the launcher then keeps waiting
for it. The launcher's exit status is the command's (``128 + N`` when signal ``N`` ended it; 127
when it cannot be found, 126 when it cannot be executed), and the command and its own children end
with the launcher (:func:`anydevice.cli.lifeline.guard_descendants`).
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
from collections.abc import Callable, Mapping, Sequence
from types import FrameType

FORWARDED: tuple[signal.Signals, ...] = tuple(
    getattr(signal, name) for name in ("SIGINT", "SIGTERM", "SIGHUP", "SIGQUIT", "SIGUSR1", "SIGUSR2") if hasattr(signal, name)
)
"""Signals the launcher passes on to the command (those this platform has)."""
NOT_FOUND, NOT_EXECUTABLE = 127, 126  # what a shell returns


def run_command(command: Sequence[str], env: Mapping[str, str]) -> int:
    """Run ``command`` with ``env``; forward signals; return its exit status the way a shell reports it."""
    program = command[0]
    search = env.get("PATH", os.defpath)
    path = program if os.sep in program else shutil.which(program, path=search)
    try:
        if path is None:
            raise FileNotFoundError(program)
        proc = subprocess.Popen([path, *command[1:]], env=dict(env))
    except FileNotFoundError:
        where = "" if os.sep in program else f" on PATH ({search})"
        sys.stderr.write(f"anydevice run: command not found: {program}{where}\n")
        return NOT_FOUND
    except OSError as exc:  # no permission, no interpreter line (ENOEXEC), a directory, ...
        sys.stderr.write(f"anydevice run: cannot execute {program}: {exc.strerror or exc}\n")
        return NOT_EXECUTABLE
    previous = {sig: signal.signal(sig, _forward_to(proc)) for sig in FORWARDED}
    try:
        while True:
            try:
                code = proc.wait()
                break
            except KeyboardInterrupt:  # a SIGINT handler of the caller's raced ours: keep waiting
                continue
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    return 128 - code if code < 0 else code


def _forward_to(proc: subprocess.Popen[bytes]) -> Callable[[int, FrameType | None], None]:
    def forward(signum: int, _frame: FrameType | None) -> None:
        if signum in (signal.SIGINT, getattr(signal, "SIGQUIT", signal.SIGINT)) and _from_terminal():
            return  # Ctrl-C / Ctrl-\ went to the whole foreground group: the command has it already
        if proc.poll() is None:
            proc.send_signal(signum)

    return forward


def _from_terminal() -> bool:
    """True when this process group is the foreground of its terminal (so the terminal signalled all of it)."""
    try:
        fd = os.open("/dev/tty", os.O_RDONLY | os.O_NOCTTY)
    except OSError:
        return False  # no controlling terminal: the signal was sent to us, not typed
    try:
        return os.tcgetpgrp(fd) == os.getpgrp()
    except OSError:
        return False
    finally:
        os.close(fd)
