"""Issue 25: what a rank starts ends with the run, even a child that clears its environment, starts its own
session and ignores SIGTERM (the guardian finds it in the launcher's process tree and escalates to SIGKILL).

Real launches: ``anydevice run -n 2`` whose ranks start such a child and then finish (or are killed with
their launcher); the script is test_launcher's SPAWNS_GRANDCHILD with ``--hardy --clear-env``.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from tests.hostile.test_launcher import alive, gone_within, start_with_grandchildren

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="signals and /proc as on Linux")
RUN = ["-m", "anydevice", "run", "-n", "2"]
STUBBORN = ("--hardy", "--clear-env")


def outlived(proc: subprocess.Popen[str], grandchildren: list[int]) -> list[int]:
    """The grandchildren still alive 5 s after the launcher ended; then every one of them is killed."""
    try:
        return gone_within(grandchildren, 5.0)
    finally:
        for pid in grandchildren:
            if alive(pid):
                os.kill(pid, signal.SIGKILL)
        proc.communicate()


def test_a_child_with_a_cleared_environment_ignoring_sigterm_ends_with_the_finished_run(tmp_path: Path) -> None:
    proc, grandchildren = start_with_grandchildren(RUN, tmp_path, "--exit", *STUBBORN)
    assert proc.wait(timeout=120) == 0
    assert outlived(proc, grandchildren) == [], "a rank's SIGTERM-deaf child with a cleared environment outlived the run"


def test_a_child_with_a_cleared_environment_ends_when_the_launcher_is_killed(tmp_path: Path) -> None:
    proc, grandchildren = start_with_grandchildren(RUN, tmp_path, *STUBBORN)
    proc.kill()  # SIGKILL: the ranks die by the kernel, their children by the guardian
    proc.wait(timeout=30)
    assert outlived(proc, grandchildren) == [], "a rank's SIGTERM-deaf child with a cleared environment outlived kill -9"
