"""Issue 25: what a rank starts ends with the run, even a child that clears its environment, starts its own
session and ignores SIGTERM (the guardian escalates to SIGKILL after a one-second grace).

Real launches: ``anydevice run -n 2`` whose ranks start such a child and then finish (or are killed with
their launcher).
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.hostile.test_launcher import alive, gone_within
from tests.utils import REPO, child_env

# A rank that starts a child with an empty environment (no ANYDEVICE_LAUNCH_PARENT to find it by), in its own
# session and deaf to SIGTERM, prints the child's pid, then exits or waits.
STUBBORN = """
import os, subprocess, sys, time
code = "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); time.sleep(1000)"
child = subprocess.Popen([sys.executable, "-c", code], env={}, start_new_session=True)
sys.stdout.write(f"child {child.pid}\\n")
sys.stdout.flush()
time.sleep(1.5)  # the guardian notes the tree every half second
if "--wait" in sys.argv:
    while True:
        time.sleep(0.1)
"""
pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="signals and /proc as on Linux")


def launch(tmp_path: Path, *script_args: str) -> tuple[subprocess.Popen[str], list[int]]:
    script = tmp_path / "stubborn.py"
    script.write_text(STUBBORN)
    env = child_env({"ANYDEVICE": "cpu", "ANYDEVICE_QUIET": "1", "OMP_NUM_THREADS": "1"})
    proc = subprocess.Popen(
        [sys.executable, "-m", "anydevice", "run", "-n", "2", str(script), *script_args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
        cwd=REPO,
        start_new_session=True,
    )
    assert proc.stdout is not None
    children: list[int] = []
    deadline = time.monotonic() + 240
    while len(children) < 2 and time.monotonic() < deadline:
        line = proc.stdout.readline()
        if not line:
            break
        children += [int(pid) for pid in re.findall(r"child (\d+)", line)]
    if len(children) < 2:
        os.killpg(proc.pid, signal.SIGKILL)
        pytest.fail(f"the ranks did not start: {proc.stderr.read() if proc.stderr else ''}")
    return proc, children


def test_a_child_with_a_cleared_environment_ignoring_sigterm_ends_with_the_finished_run(tmp_path: Path) -> None:
    proc, children = launch(tmp_path)
    try:
        assert proc.wait(timeout=120) == 0, proc.stderr.read() if proc.stderr else ""
        assert gone_within(children, 5.0) == [], "a rank's SIGTERM-deaf child outlived the run"
    finally:
        for pid in children:
            if alive(pid):
                os.kill(pid, signal.SIGKILL)
        proc.communicate()


def test_a_child_with_a_cleared_environment_ends_when_the_launcher_is_killed(tmp_path: Path) -> None:
    proc, children = launch(tmp_path, "--wait")
    try:
        time.sleep(1.0)
        proc.kill()
        proc.wait(timeout=30)
        assert gone_within(children, 5.0) == [], "a rank's SIGTERM-deaf child outlived kill -9 of the launcher"
    finally:
        for pid in children:
            if alive(pid):
                os.kill(pid, signal.SIGKILL)
        proc.communicate()
