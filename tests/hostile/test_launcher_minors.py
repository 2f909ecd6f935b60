"""``anydevice run``'s minor promises, each one clear line: the failing rank's own status comes back, the failure
summary never replays a rank's terminal escapes nor doubles a huge message, a rank number outside the world is
refused at once, nothing a rank started outlives the launcher's exit, and Ctrl-C ends the run at any moment.

Real processes where the behaviour is a process's; torch elastic's own ``ProcessFailure`` for the ordering.
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
from torch.distributed.elastic.multiprocessing.errors import ProcessFailure

from anydevice.cli.launch import exit_status, failure_summary, first_failure
from anydevice.errors import AnyDeviceError
from tests.distributed.helpers import anydevice_run
from tests.hostile.test_launcher import alive, start_with_grandchildren
from tests.utils import REPO, child_env

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="signals and /proc as on Linux")

FAILS_WITH = """
import os, sys, time
if os.environ["RANK"] == "1":
    if sys.argv[1] == "status":
        sys.exit(3)
    raise ValueError("\\x1b[31mred\\x1b[0m\\x07 " + "x" * 300_000)
time.sleep(60)
"""


def test_a_rank_the_launcher_stopped_is_never_the_root_cause_of_its_second() -> None:
    stopped = ProcessFailure(local_rank=0, pid=1000, exitcode=-signal.SIGTERM, error_file="")
    failed = ProcessFailure(local_rank=1, pid=1001, exitcode=3, error_file="")
    stopped.timestamp = failed.timestamp  # the same second, no error file: torch elastic names rank 0
    assert first_failure({0: stopped, 1: failed}) == (1, failed)
    assert [exit_status(code) for code in (3, -signal.SIGSEGV, 0)] == [3, 128 + signal.SIGSEGV, 1]


def test_the_summary_escapes_control_characters_and_says_where_it_was_cut() -> None:
    text = failure_summary("Root Cause\n  error: \x1b[31mred\x1b[0m\ttab " + "x" * 50, limit=40)
    assert "\x1b" not in text and "\\x1b[31mred" in text and "\ttab" in text  # lines and tabs stay as they are
    assert text.endswith("(the summary was cut: 47 more characters; the rank's own stderr above has its message whole)")


@pytest.mark.slow
@pytest.mark.parametrize("case", ["status", "message"])
def test_a_failing_rank_gives_the_run_its_status_and_a_clean_summary(case: str, tmp_path: Path) -> None:
    script = tmp_path / "fails.py"
    script.write_text(FAILS_WITH)
    result = anydevice_run("-n", "2", script, case, timeout=240)
    if case == "status":
        assert result.returncode == 3, result.stderr[-3000:]
        assert "rank 1 failed (exit code 3)" in result.stderr
        return
    assert result.returncode == 1, result.stderr[-3000:]
    summary = result.stderr[result.stderr.index("Root Cause") :]
    assert "\x1b" not in summary and "\x07" not in summary and "\\x1b[31mred" in summary
    assert "the summary was cut" in summary
    assert result.stderr.count("x" * 300_000) == 1  # the rank's own traceback, once; not again in the summary
    assert len(result.stderr) < 300_000 + 60_000


@pytest.mark.parametrize(
    ("env", "named"),
    [({"RANK": "5", "WORLD_SIZE": "2"}, "RANK=5"), ({"RANK": "-1", "WORLD_SIZE": "2"}, "RANK='-1'"),
     ({"RANK": "0", "WORLD_SIZE": "0"}, "WORLD_SIZE='0'"), ({"RANK": "one", "WORLD_SIZE": "2"}, "RANK='one'")],
)  # fmt: skip
def test_a_rank_outside_the_world_is_refused_before_any_rendezvous(
    env: dict[str, str], named: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    import anydevice as ad

    for key, value in {**env, "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": "29999"}.items():
        monkeypatch.setenv(key, value)
    began = time.monotonic()
    with pytest.raises(AnyDeviceError, match=re.escape(named)) as refused:
        ad.distributed.init(timeout_s=30)
    assert time.monotonic() - began < 5.0  # refused, not timed out in gloo's rendezvous
    assert not ad.distributed.is_initialized()
    assert "\n" not in str(refused.value).split("\n")[0]


def test_a_helper_deaf_to_sigterm_in_its_own_session_is_gone_when_the_launcher_exits(tmp_path: Path) -> None:
    proc, helpers = start_with_grandchildren(["-m", "anydevice", "run", "-n", "1"], tmp_path, "--exit", "--hardy")
    try:
        assert proc.wait(timeout=120) == 0, proc.stderr.read() if proc.stderr else ""
        assert [pid for pid in helpers if alive(pid)] == [], "a rank's helper outlived the launcher's exit"
    finally:
        for pid in helpers:
            if alive(pid):
                os.kill(pid, signal.SIGKILL)


@pytest.mark.slow
def test_ctrl_c_at_any_moment_of_the_start_ends_the_run_quietly(tmp_path: Path) -> None:
    script = tmp_path / "sleeper.py"
    script.write_text("import time\ntime.sleep(120)\n")
    env = child_env({"ANYDEVICE": "cpu", "ANYDEVICE_QUIET": "1", "OMP_NUM_THREADS": "1"})
    for delay in (0.3, 0.6, 1.0, 1.6, 2.5):  # loading the CLI, planning, torch elastic starting the ranks
        proc = subprocess.Popen(
            [sys.executable, "-m", "anydevice", "run", "-n", "2", str(script)],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=env,
            cwd=REPO,
            start_new_session=True,
        )
        time.sleep(delay)
        proc.send_signal(signal.SIGINT)
        try:
            _, stderr = proc.communicate(timeout=40)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.communicate()
            pytest.fail(f"Ctrl-C {delay} s after the start did not end the run within 40 s")
        assert proc.returncode in (130, -signal.SIGINT), f"{delay} s: {proc.returncode} {stderr[-2000:]}"
        assert "Traceback" not in stderr, f"{delay} s: {stderr[-3000:]}"
        assert len([line for line in stderr.splitlines() if line.strip()]) <= 1, f"{delay} s: {stderr[-3000:]}"
