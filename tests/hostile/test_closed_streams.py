"""Issue 25, closed stdout or stderr (a daemon, a cron job: ``>&-``, ``2>&-``): every command keeps its exit status
and prints nothing extra."""

from __future__ import annotations

import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from tests.utils import REPO, child_env

JOB = """
import os, pathlib, sys
import anydevice as ad
print("rank", ad.device(), flush=True)  # to the closed stream: the rank's own problem, and it must not hit a file
pathlib.Path(sys.argv[1] + "." + os.environ["RANK"]).touch()
"""


def _shell(args: list[str], redirect: str) -> subprocess.CompletedProcess[str]:
    """``python -m anydevice ARGS REDIRECT`` through a shell; its own exit status, whatever the redirection."""
    command = shlex.join([sys.executable, "-m", "anydevice", *args])
    return subprocess.run(
        ["bash", "-c", f"{command} {redirect}"],
        capture_output=True,
        text=True,
        env=child_env({"ANYDEVICE": "cpu"}),
        cwd=REPO,
        timeout=300,
    )


@pytest.mark.parametrize("args", [["list"], ["info"], ["info", "--json"], ["doctor"]])
def test_a_closed_stdout_or_stderr_keeps_the_exit_status_and_adds_nothing(args: list[str]) -> None:
    normal = _shell(args, "")
    closed_out = _shell(args, ">&-")
    assert closed_out.returncode == normal.returncode, closed_out.stderr
    assert closed_out.stderr == normal.stderr and closed_out.stdout == ""
    closed_err = _shell(args, "2>&-")
    assert closed_err.returncode == normal.returncode
    assert closed_err.stdout == normal.stdout
    both = _shell(args, ">&- 2>&-")
    assert both.returncode == normal.returncode and both.stdout == both.stderr == ""


def test_run_with_closed_stdout_and_stderr_does_its_work_and_exits_0(tmp_path: Path) -> None:
    script = tmp_path / "job.py"
    script.write_text(JOB)
    marker = tmp_path / "done"
    for redirect in (">&-", "2>&-"):
        proc = _shell(["run", "-n", "2", str(script), str(marker)], redirect)
        assert proc.returncode == 0, proc.stderr
        assert sorted(p.name for p in tmp_path.glob("done*")) == ["done.0", "done.1"]  # every rank ran
        for path in tmp_path.glob("done*"):
            path.unlink()
