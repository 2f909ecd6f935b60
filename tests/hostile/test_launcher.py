"""``anydevice run`` under hostile conditions: kill -9 of the launcher, Ctrl-C, absurd ``-n``, bad
multi-node options, processes the ranks start themselves, modules in the working directory that
shadow the standard library, commands that fail or are signalled.

Real processes: the launcher and its ranks are started for real and signalled for real.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.utils import REPO, child_env, cli_in_process

SLEEPER = """
import os, time
import sys
sys.stdout.write(f"ready {os.getpid()}\\n")  # one write: lines of two ranks do not interleave, even unbuffered
sys.stdout.flush()
while True:
    time.sleep(0.1)
"""
# The spawn launcher (TorchTPU's path) driven the way a plugin's Collectives.launch drives it.
SPAWN_DRIVER = """
import sys
from anydevice.cli import lifeline
from anydevice.cli.launch import build_parser, plan, spawn
spec, _ = plan(build_parser().parse_args(["-n", "2", sys.argv[1]]))
lifeline.guard_descendants()
sys.exit(spawn(spec))
"""
# A rank that starts a process of its own (a data server, a shell helper) and then waits: the grandchild.
SPAWNS_GRANDCHILD = """
import os, subprocess, sys, time
hardy = "--hardy" in sys.argv  # its own session, deaf to SIGTERM: only SIGKILL ends it
code = "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN) if %r else None; time.sleep(1000)" % hardy
bare = {} if "--clear-env" in sys.argv else None  # an empty environment: nothing marks it as the run's
child = subprocess.Popen([sys.executable, "-c", code], start_new_session=hardy, env=bare)
time.sleep(1.0 if bare is not None else 0.0)  # the launcher's guardian notes its process tree every half second
sys.stdout.write(f"ready {os.getpid()} grandchild {child.pid}\\n")  # one write, as in SLEEPER
sys.stdout.flush()
if "--exit" in sys.argv:
    sys.exit(0)  # the rank ends and leaves its child behind
while True:
    time.sleep(0.1)
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
        pids += [int(pid) for pid in re.findall(r"ready (\d+)", line)]
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
    done = cli_in_process("run", "-n", n, str(script), env={"ANYDEVICE": "cpu"})  # refused before any process starts
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
    from anydevice.runtime.registry import get_registry

    registry = get_registry()
    cpu = registry.get("cpu")
    check_nproc(4 * (os.cpu_count() or 1), "cpu", cpu.spec, registry.detect("cpu"))


# --- multi-node options: refused before anything waits ----------------------------------------------------


@pytest.mark.parametrize(
    "options, first_line",
    [
        (
            ["--nnodes", "2", "--node-rank", "7", "--rdzv-endpoint", "127.0.0.1:29400"],
            "--node-rank 7 is outside 0..1 (--nnodes 2).",
        ),
        (["--nnodes", "2", "--node-rank", "-1", "--rdzv-endpoint", "127.0.0.1:29400"], "--node-rank -1 is outside 0..1"),
        (["--nnodes", "2", "--node-rank", "2", "--rdzv-endpoint", "127.0.0.1:29400"], "--node-rank 2 is outside 0..1"),
        (["--nnodes", "2", "--rdzv-endpoint", "node0"], "--rdzv-endpoint 'node0' is not HOST:PORT."),
        (["--nnodes", "2", "--rdzv-endpoint", ":29400"], "--rdzv-endpoint ':29400' is not HOST:PORT."),
        (["--nnodes", "2", "--rdzv-endpoint", "127.0.0.1:0"], "the port must be a number from 1 to 65535"),
        (["--nnodes", "2", "--rdzv-endpoint", "127.0.0.1:70000"], "the port must be a number from 1 to 65535"),
        (["--nnodes", "2", "--rdzv-endpoint", "127.0.0.1:http"], "the port must be a number from 1 to 65535"),
        (["--nnodes", "2", "--rdzv-endpoint", "a b:29400"], "'a b' is not a host name or IP address"),
        (["--nnodes", "2", "--rdzv-endpoint", "::1:29400"], "write an IPv6 host in brackets"),
        (["--nnodes", "2", "--rdzv-endpoint", "[nope]:29400"], "[nope] is not an IPv6 address"),
        (["--nnodes", "2", "--rdzv-endpoint", "no-such-host.invalid:29400"], "does not resolve here"),
        (["--run-id", "a/b"], "--run-id 'a/b' may hold only letters, digits"),
        (["--run-id", "job 7"], "--run-id 'job 7' may hold only letters, digits"),
        (["--run-id", "x" * 129], "may hold only letters, digits, '-', '_' and '.' (1 to 128 of them)"),
        (["--nnodes", "2"], "--nnodes 2 needs --rdzv-endpoint HOST:PORT"),
    ],
)
def test_bad_multi_node_options_fail_at_once_with_one_line(options: list[str], first_line: str, tmp_path: Path) -> None:
    script = tmp_path / "never.py"
    script.write_text("raise SystemExit('must not run')\n")
    started = time.monotonic()
    done = cli_in_process("run", *options, str(script), env={"ANYDEVICE": "cpu"})  # refused before any process starts
    assert done.returncode == 2, done.stderr
    assert done.stderr.startswith("anydevice: error: ")
    assert first_line in done.stderr.splitlines()[0]
    assert "Traceback" not in done.stderr and "must not run" not in done.stderr
    assert time.monotonic() - started < 60  # refused before any device work or rendezvous, not after a timeout


def test_good_multi_node_options_pass_the_checks() -> None:
    from anydevice.cli.launch_args import check_rendezvous, split_endpoint

    check_rendezvous(2, 1, "127.0.0.1:29400", "job-7.a_b")
    check_rendezvous(1, None, None, None)
    assert split_endpoint("[::1]:29400") == ("::1", 29400)
    assert split_endpoint("localhost:1") == ("localhost", 1)


# --- processes the ranks start end with the run -----------------------------------------------------------


def start_with_grandchildren(args: list[str], tmp_path: Path, *script_args: str) -> tuple[subprocess.Popen[str], list[int]]:
    """Start a launcher of SPAWNS_GRANDCHILD; returns it and the pids of the grandchildren once all are up."""
    script = tmp_path / "spawner.py"
    script.write_text(SPAWNS_GRANDCHILD)
    env = child_env({"ANYDEVICE": "cpu", "ANYDEVICE_QUIET": "1", "OMP_NUM_THREADS": "1"})
    proc = subprocess.Popen(
        [sys.executable, *args, str(script), *script_args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
        cwd=REPO,
        start_new_session=True,
    )
    assert proc.stdout is not None
    grandchildren: list[int] = []
    deadline = time.monotonic() + 240
    ranks = int(args[args.index("-n") + 1]) if "-n" in args else 1
    while len(grandchildren) < ranks and time.monotonic() < deadline:
        line = proc.stdout.readline()
        if not line:
            break
        grandchildren += [int(pid) for pid in re.findall(r"ready \d+ grandchild (\d+)", line)]
    if len(grandchildren) < ranks:
        os.killpg(proc.pid, signal.SIGKILL)
        pytest.fail(f"the ranks did not start: {proc.stderr.read() if proc.stderr else ''}")
    return proc, grandchildren


def test_a_ranks_own_children_die_when_the_launcher_is_killed(tmp_path: Path) -> None:
    proc, grandchildren = start_with_grandchildren(["-m", "anydevice", "run", "-n", "2"], tmp_path)
    try:
        assert all(alive(p) for p in grandchildren)
        proc.kill()  # SIGKILL: nothing in the launcher runs; the ranks die by the kernel, their children otherwise
        proc.wait(timeout=30)
        assert gone_within(grandchildren, 5.0) == [], "a rank's child outlived kill -9 of the launcher"
    finally:
        for pid in grandchildren:
            if alive(pid):
                os.kill(pid, signal.SIGKILL)


@pytest.mark.parametrize("kind", [[], ["--hardy"]], ids=["plain", "own-session-ignoring-SIGTERM"])
def test_a_child_left_behind_by_a_finished_rank_ends_with_the_run(kind: list[str], tmp_path: Path) -> None:
    proc, grandchildren = start_with_grandchildren(["-m", "anydevice", "run", "-n", "1"], tmp_path, "--exit", *kind)
    try:
        assert proc.wait(timeout=120) == 0, proc.stderr.read() if proc.stderr else ""
        assert gone_within(grandchildren, 5.0) == [], "a rank's child outlived the finished run"
    finally:
        for pid in grandchildren:
            if alive(pid):
                os.kill(pid, signal.SIGKILL)


def test_a_commands_children_die_when_the_launcher_is_killed(tmp_path: Path) -> None:
    proc, grandchildren = start_with_grandchildren(["-m", "anydevice", "run", "--", sys.executable], tmp_path)
    try:
        proc.kill()
        proc.wait(timeout=30)
        assert gone_within(grandchildren, 5.0) == [], "the command's child outlived kill -9 of the launcher"
    finally:
        for pid in grandchildren:
            if alive(pid):
                os.kill(pid, signal.SIGKILL)


# --- a rank's sys.path is python's: nothing in the working directory shadows the standard library ---------

SHOW_PATH = """
import json, random, sys
row = {"path0": sys.path[0], "json": json.__file__, "random": random.__file__, "argv": sys.argv}
sys.stdout.write(json.dumps(row) + "\\n")  # one write, as in SLEEPER: two ranks' lines never share a line
sys.stdout.flush()
"""


def shadowing_cwd(tmp_path: Path) -> Path:
    """A working directory whose json.py and random.py would break anything that imported them."""
    cwd = tmp_path / "cwd"
    cwd.mkdir()
    for name in ("json", "random", "logging", "uuid"):
        (cwd / f"{name}.py").write_text(f"raise SystemExit('the working directory shadowed {name}')\n")
    return cwd


def test_a_rank_imports_nothing_from_the_working_directory(tmp_path: Path) -> None:
    cwd = shadowing_cwd(tmp_path)
    scripts = tmp_path / "scripts"
    scripts.mkdir()
    (scripts / "show.py").write_text(SHOW_PATH)
    done = _run_in(cwd, ["-n", "2", str(scripts / "show.py")])
    assert done.returncode == 0, done.stderr
    rows = [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")]
    assert len(rows) == 2
    for row in rows:
        assert row["path0"] == str(scripts.resolve())  # as `python scripts/show.py`
        assert not row["json"].startswith(str(cwd)) and not row["random"].startswith(str(cwd))
    assert "shadowed" not in done.stderr


def test_m_runs_a_module_from_the_working_directory_like_python_m(tmp_path: Path) -> None:
    cwd = tmp_path / "proj"
    (cwd / "pkg").mkdir(parents=True)
    (cwd / "pkg" / "__init__.py").write_text("")
    (cwd / "pkg" / "show.py").write_text(SHOW_PATH.replace("import json, random, sys", "import json, random, sys, os"))
    done = _run_in(cwd, ["-n", "2", "-m", "pkg.show", "--help", "x"])
    assert done.returncode == 0, done.stderr
    rows = [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")]
    assert len(rows) == 2
    for row in rows:
        assert row["path0"] == str(cwd)  # python -m puts the working directory first
        assert row["argv"] == [str(cwd / "pkg" / "show.py"), "--help", "x"]  # --help is the module's, not ours


def test_m_of_a_missing_module_is_one_line(tmp_path: Path) -> None:
    done = _run_in(tmp_path, ["-m", "no_such_module_anywhere"])
    assert done.returncode == 2
    assert done.stderr.splitlines()[0] == (
        "anydevice: error: No module named no_such_module_anywhere (looked in the working directory and this Python's sys.path)."
    )
    assert "Traceback" not in done.stderr


def _run_in(cwd: Path, args: list[str]) -> subprocess.CompletedProcess[str]:
    """``anydevice run ARGS`` (the console script's way: the launcher's own sys.path[0] is not the cwd) in ``cwd``."""
    launcher = [sys.executable, "-c", "import sys; del sys.path[0]; from anydevice.cli import main; sys.exit(main())", "run"]
    env = child_env({"ANYDEVICE": "cpu", "ANYDEVICE_QUIET": "1", "OMP_NUM_THREADS": "1"})
    return subprocess.run([*launcher, *args], capture_output=True, text=True, timeout=240, env=env, cwd=cwd)


# --- anydevice run -- COMMAND --------------------------------------------------------------------------------

FORWARD_PROBE = """
import os, signal, sys, time
def stop(signum, frame):
    print(f"got {signal.Signals(signum).name}", flush=True)
    sys.exit(40 + signum)
signal.signal(signal.SIGINT, stop)
signal.signal(signal.SIGTERM, stop)
print(f"ready {os.getpid()}", flush=True)
while True:
    time.sleep(0.1)
"""


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM], ids=["SIGINT", "SIGTERM"])
def test_a_signal_to_the_launcher_reaches_the_command_and_its_status_comes_back(sig: signal.Signals, tmp_path: Path) -> None:
    probe = tmp_path / "probe.py"
    probe.write_text(FORWARD_PROBE)
    proc = subprocess.Popen(
        [sys.executable, "-m", "anydevice", "run", "--", sys.executable, str(probe)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=child_env({"ANYDEVICE": "cpu", "ANYDEVICE_QUIET": "1"}),
        cwd=REPO,
        start_new_session=True,  # no terminal: the signal reaches the launcher alone, which passes it on once
    )
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()
        assert line.startswith("ready "), proc.stderr.read() if proc.stderr else ""
        command = int(line.split()[1])
        proc.send_signal(sig)
        out, err = proc.communicate(timeout=60)
        assert out.strip() == f"got {sig.name}"
        assert proc.returncode == 40 + sig  # the command's own status
        assert "Traceback" not in err
        assert gone_within([command], 5.0) == []
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)


def test_a_command_killed_by_a_signal_reports_it_as_a_shell_does() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "anydevice", "run", "--", "sh", "-c", "kill -TERM $$"],
        capture_output=True,
        text=True,
        timeout=120,
        env=child_env({"ANYDEVICE": "cpu", "ANYDEVICE_QUIET": "1"}),
        cwd=REPO,
    )
    assert done.returncode == 128 + signal.SIGTERM, done.stderr


@pytest.mark.parametrize(
    "command, status, message",
    [
        (["no-such-command-xyz", "serve"], 127, "anydevice run: command not found: no-such-command-xyz on PATH"),
        (["./not-executable.sh"], 126, "anydevice run: cannot execute ./not-executable.sh"),
    ],
)
def test_a_command_that_cannot_start_is_one_line(command: list[str], status: int, message: str, tmp_path: Path) -> None:
    (tmp_path / "not-executable.sh").write_text("#!/bin/sh\necho never\n")  # mode 0644
    done = _run_in(tmp_path, ["--", *command])
    assert done.returncode == status
    assert done.stderr.startswith(message), done.stderr
    assert len(done.stderr.strip().splitlines()) == 1 and "never" not in done.stdout


@pytest.mark.parametrize("options", [["-n", "2"], ["--nnodes", "2"], ["--max-restarts", "1"], ["--run-id", "x"]])
def test_multi_process_options_with_a_command_are_refused(options: list[str]) -> None:
    done = cli_in_process("run", *options, "--", "true", env={"ANYDEVICE": "cpu", "ANYDEVICE_QUIET": "1"})
    assert done.returncode == 2
    assert done.stderr.splitlines()[0] == (
        f"anydevice: error: anydevice run -- true starts one process; {options[0]} apply to Python scripts and modules."
    )


COUNT_SIGINT = """
import os, signal, sys, time
seen = []
signal.signal(signal.SIGINT, lambda signum, frame: seen.append(signum))
print("ready", flush=True)
while not seen:
    time.sleep(0.05)
time.sleep(1.0)  # a second SIGINT, if one came, arrives in this window
print(f"SIGINTs {len(seen)}", flush=True)
sys.exit(40 + len(seen))
"""


def test_ctrl_c_in_a_terminal_reaches_the_command_and_its_status_comes_back(tmp_path: Path) -> None:
    """In a terminal the command shares the launcher's foreground group: Ctrl-C reaches it, its status is the run's."""
    import pty

    probe = tmp_path / "count.py"
    probe.write_text(COUNT_SIGINT)
    env = child_env({"ANYDEVICE": "cpu", "ANYDEVICE_QUIET": "1"})
    pid, fd = pty.fork()
    if pid == 0:  # the child: a session leader whose controlling terminal is the pty, in the foreground
        os.chdir(REPO)
        os.execve(sys.executable, [sys.executable, "-m", "anydevice", "run", "--", sys.executable, str(probe)], env)
    output = b""
    try:
        deadline = time.monotonic() + 240
        while b"ready" not in output and time.monotonic() < deadline:
            output += os.read(fd, 1024)
        assert b"ready" in output, output.decode(errors="replace")
        os.write(fd, b"\x03")  # Ctrl-C typed at the terminal
        while True:
            try:
                chunk = os.read(fd, 1024)
            except OSError:  # EIO: the terminal's last process ended
                break
            if not chunk:
                break
            output += chunk
        _, status = os.waitpid(pid, 0)
    finally:
        os.close(fd)
    text = output.decode(errors="replace")
    assert "SIGINTs 1" in text, text
    assert os.waitstatus_to_exitcode(status) == 41, text
