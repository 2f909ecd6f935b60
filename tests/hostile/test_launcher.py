"""``anydevice run`` under hostile conditions: kill -9 of the launcher, Ctrl-C, absurd ``-n``.

Real processes: the launcher and its ranks are started for real and signalled for real.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.utils import REPO, child_env

SLEEPER = """
import os, time
print(f"ready {os.getpid()}", flush=True)
while True:
    time.sleep(0.1)
"""
# The spawn launcher (TorchTPU's path) driven the way a plugin's Collectives.launch drives it.
SPAWN_DRIVER = """
import sys
from anydevice.cli.launch import build_parser, plan, spawn
spec, _ = plan(build_parser().parse_args(["-n", "2", sys.argv[1]]))
sys.exit(spawn(spec))
"""
pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="signals and /proc as on Linux")


def alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (FileNotFoundError, IndexError):
        return False
    return state != "Z"


def start(args: list[str], tmp_path: Path) -> tuple[subprocess.Popen[str], list[int]]:
    """Start a launcher in its own session and wait until both ranks print their pid."""
    script = tmp_path / "sleeper.py"
    script.write_text(SLEEPER)
    env = child_env({"ANYDEVICE": "cpu", "ANYDEVICE_QUIET": "1", "OMP_NUM_THREADS": "1"})
    proc = subprocess.Popen(
        [sys.executable, *args, str(script)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
        cwd=REPO,
        start_new_session=True,
    )
    assert proc.stdout is not None
    pids: list[int] = []
    deadline = time.monotonic() + 240
    while len(pids) < 2 and time.monotonic() < deadline:
        line = proc.stdout.readline()
        if not line:
            break
        if line.startswith("ready "):
            pids.append(int(line.split()[1]))
    if len(pids) < 2:
        os.killpg(proc.pid, signal.SIGKILL)
        pytest.fail(f"the ranks did not start: {proc.stderr.read() if proc.stderr else ''}")
    return proc, pids


def gone_within(pids: list[int], seconds: float) -> list[int]:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        left = [p for p in pids if alive(p)]
        if not left:
            return []
        time.sleep(0.1)
    return [p for p in pids if alive(p)]


@pytest.mark.parametrize(
    "launcher",
    [["-m", "anydevice", "run", "-n", "2"], ["-c", SPAWN_DRIVER]],
    ids=["torchrun-path", "spawn-path"],
)
def test_kill_9_of_the_launcher_takes_the_ranks_with_it(launcher: list[str], tmp_path: Path) -> None:
    proc, ranks = start(launcher, tmp_path)
    try:
        assert all(alive(p) for p in ranks)
        proc.kill()  # SIGKILL: the launcher cannot clean up anything itself
        proc.wait(timeout=30)
        assert gone_within(ranks, 5.0) == [], "ranks survived their launcher"
    finally:
        for pid in ranks:
            if alive(pid):
                os.kill(pid, signal.SIGKILL)


def test_ctrl_c_ends_the_run_with_one_line_and_status_130(tmp_path: Path) -> None:
    proc, ranks = start(["-m", "anydevice", "run", "-n", "2"], tmp_path)
    try:
        os.killpg(proc.pid, signal.SIGINT)  # what Ctrl-C in a terminal does: the whole foreground group
        _, stderr = proc.communicate(timeout=120)
        assert proc.returncode == 130
        assert stderr.strip().splitlines() == ["anydevice run: interrupted by SIGINT; every rank was stopped."]
        assert gone_within(ranks, 5.0) == []
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM], ids=["SIGINT", "SIGTERM"])
def test_a_signal_to_the_launcher_alone_stops_the_ranks_in_one_line(sig: signal.Signals, tmp_path: Path) -> None:
    proc, ranks = start(["-m", "anydevice", "run", "-n", "2"], tmp_path)
    try:
        proc.send_signal(sig)  # kill -INT / -TERM <launcher>: it relays the signal to the ranks
        _, stderr = proc.communicate(timeout=120)
        assert proc.returncode == 128 + sig
        assert stderr.strip().splitlines() == [f"anydevice run: interrupted by {sig.name}; every rank was stopped."]
        assert gone_within(ranks, 5.0) == []
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)


@pytest.mark.parametrize("n", ["100000000", str(4 * (os.cpu_count() or 1) + 1)])
def test_n_above_what_cpu_takes_is_refused_before_planning(n: str, tmp_path: Path) -> None:
    script = tmp_path / "never.py"
    script.write_text("raise SystemExit('must not run')\n")
    started = time.monotonic()
    done = subprocess.run(
        [sys.executable, "-m", "anydevice", "run", "-n", n, str(script)],
        capture_output=True,
        text=True,
        timeout=120,
        env=child_env({"ANYDEVICE": "cpu"}),
        cwd=REPO,
    )
    cores = os.cpu_count() or 1
    assert done.returncode == 2, done.stderr
    assert done.stderr.splitlines()[0] == (
        f"anydevice: error: -n {n} is more than cpu can take on this machine: at most {4 * cores} "
        f"(4 processes per CPU core, {cores} core(s) here)."
    )
    assert "Traceback" not in done.stderr and "must not run" not in done.stderr
    assert time.monotonic() - started < 60  # no minute of planning (the bound is checked first)


def test_n_at_the_bound_is_accepted_by_the_check() -> None:
    from anydevice.cli.launch import check_nproc
    from anydevice.registry import get_registry

    registry = get_registry()
    cpu = registry.get("cpu")
    check_nproc(4 * (os.cpu_count() or 1), "cpu", cpu.spec, registry.detect("cpu"))
