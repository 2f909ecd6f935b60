"""How `anydevice check` runs a script: in a scratch working directory, dying with check, its output shown on failure.

Every run is real (a child process runs the script's first steps on the CPU). The scripts write files, read
their standard input, hang, or make their own mesh; the user's files and processes must come out untouched.
"""

from __future__ import annotations

import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from anydevice.cli.check import render
from anydevice.preflight.schema import RAN_ON_CPU, Report
from tests.utils import REPO, anydevice_cli, child_env, cli_in_process

pytestmark = pytest.mark.slow

SCRIPTS = REPO / "tests" / "check" / "scripts"
CASES = SCRIPTS / "cases.py"


def marker(case: str, script: Path = CASES) -> str:
    """``NAME:N`` of the line marked ``# CHECK: case``."""
    lines = script.read_text().splitlines()
    return f"{script.name}:{next(i for i, line in enumerate(lines, 1) if f'# CHECK: {case}' in line)}"


def _snapshot(folder: Path) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


def _check_processes(tmp: Path, command: str = "") -> list[int]:
    """Processes whose environment names ``tmp`` (check and its child) and whose command line has ``command``."""
    found = []
    for proc in Path("/proc").iterdir():
        if proc.name.isdigit():
            try:
                environ = (proc / "environ").read_bytes().decode(errors="replace")
                cmdline = (proc / "cmdline").read_bytes().decode(errors="replace")
            except OSError:
                continue
            if str(tmp) in environ and command in cmdline:
                found.append(int(proc.name))
    return found


def test_a_script_that_writes_its_files_leaves_the_users_untouched(tmp_path: Path) -> None:
    project, tmp = tmp_path / "project", tmp_path / "tmp"
    project.mkdir()
    tmp.mkdir()
    for name in ("writes_files.py", "local_helper.py"):
        shutil.copy(SCRIPTS / name, project / name)
    (project / "input.txt").write_text("3.0\n")
    (project / "train.log").write_text("a real run's log\n")
    (project / "ckpt.pt").write_bytes(b"a real run's checkpoint")
    (project / "out").mkdir()
    (project / "out" / "ckpt.pt").write_bytes(b"another real checkpoint")
    (project / "old_runs").mkdir()
    (project / "old_runs" / "run1.pt").write_bytes(b"an older run")
    (project / "stale.pt").write_bytes(b"kept")
    before = _snapshot(project)
    done = anydevice_cli("check", "writes_files.py", "--target", "tpu", "--json", env={"TMPDIR": str(tmp)}, cwd=project)
    assert done.returncode == 0, done.stderr
    assert _snapshot(project) == before  # nothing replaced, truncated, removed or added (beside.pt, __pycache__)
    report = Report.model_validate_json(done.stdout)
    assert report.kind == RAN_ON_CPU and report.observation.steps == 4
    run = report.observation.run
    assert run is not None and run.from_loader
    assert run.files == ["beside.pt", "ckpt.pt", "out/ckpt.pt", "train.log"]  # written in scratch, as the script named them
    assert list(tmp.iterdir()) == []  # the scratch folder is gone
    first, second = render(report).splitlines()[:2]  # the text report, as `anydevice check` without --json prints it
    assert first.startswith("anydevice check: first steps run on the CPU") and "not a run on the target" in first
    assert "scratch working directory, removed afterwards" in second and "out/ckpt.pt" in second


def test_a_script_reading_its_stdin_fails_at_once_and_shows_its_output(tmp_path: Path) -> None:
    script = tmp_path / "asks.py"
    script.write_text("print('hello from the script')\nanswer = input('continue? ')\n")
    started = time.monotonic()
    done = anydevice_cli("check", str(script), "--target", "tpu", cwd=tmp_path)
    assert time.monotonic() - started < 120  # not check's 600 s timeout
    assert done.returncode == 2
    assert "EOFError" in done.stderr and "standard input" in done.stderr and f"{script.name}:2" in done.stderr
    assert "| hello from the script" in done.stderr  # the script's own output, shown with its early end


def test_a_script_that_exits_early_shows_its_output(tmp_path: Path) -> None:
    script = tmp_path / "usage.py"
    script.write_text("import sys\nprint('usage: usage.py DATA', file=sys.stderr)\nsys.exit(2)\n")
    done = anydevice_cli("check", str(script), "--target", "tpu", cwd=tmp_path)
    assert done.returncode == 2 and "exited with status 2 before its first step" in done.stderr
    assert "| usage: usage.py DATA" in done.stderr


def _default_disposition(sig: signal.Signals) -> Callable[[], None]:
    """The signal's default action in the child: a run under ``nohup`` (SIGHUP ignored, which exec keeps) tests
    what a user's terminal sends, not what the runner's parent chose to ignore."""

    def reset() -> None:
        if sig != signal.SIGKILL:
            signal.signal(sig, signal.SIG_DFL)

    return reset


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGHUP, signal.SIGKILL], ids=["TERM", "HUP", "KILL"])
def test_the_script_dies_with_check_on_any_signal_and_its_folder_goes(tmp_path: Path, sig: signal.Signals) -> None:
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    script = tmp_path / "hangs.py"
    script.write_text("import time\nimport torch\nprint('started', flush=True)\ntime.sleep(600)\n")
    check = subprocess.Popen(
        [sys.executable, "-m", "anydevice", "check", str(script), "--target", "tpu"],
        env=child_env({"TMPDIR": str(tmp)}),
        cwd=tmp_path,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        preexec_fn=_default_disposition(sig),
    )
    try:
        deadline = time.monotonic() + 120
        while not _check_processes(tmp, "preflight.runner") and time.monotonic() < deadline:
            time.sleep(0.2)
        assert _check_processes(tmp, "preflight.runner"), "the script never started"
        check.send_signal(sig)
        check.wait(timeout=120)  # under a loaded CI machine the runner's import of torch can take a while to end
        deadline = time.monotonic() + 60
        while (_check_processes(tmp) or list(tmp.iterdir())) and time.monotonic() < deadline:
            time.sleep(0.2)
        assert _check_processes(tmp) == []  # the script is gone
        assert list(tmp.iterdir()) == []  # and so is its temporary folder
    finally:
        if check.poll() is None:
            check.kill()
            check.wait()


def test_the_scripts_own_mesh_under_mesh_is_noted_not_run_or_checked() -> None:
    done = cli_in_process("check", str(CASES), "mesh", "--target", "tpu,cpu", "--json", "--mesh", "dp=2,tp=4")
    assert done.returncode == 0, done.stderr  # before: the script's dp=-1,tp=3 over one process failed its first step
    report = Report.model_validate_json(done.stdout)
    obs = report.observation
    assert obs.mesh == {"dp": 2, "tp": 4} and obs.world_size == 8 and obs.mesh_line is None
    assert obs.script_mesh == {"dp": -1, "tp": 3} and obs.script_mesh_line and obs.script_mesh_line.endswith(marker("mesh"))
    for target in report.targets:
        (noted,) = [f for f in target.findings if f.check == "distributed" and "its own mesh" in f.message]
        assert noted.severity == "info" and "dp=2,tp=4" in noted.message and noted.line == obs.script_mesh_line


def test_a_short_last_batch_is_one_more_compile_on_static_shape_targets() -> None:
    done = cli_in_process("check", str(CASES), "short", "--target", "tpu,cpu", "--json")
    assert done.returncode == 1, done.stderr
    report = Report.model_validate_json(done.stdout)
    short = report.observation.short_last_batch
    assert short is not None and (short.rows, short.batch_size, short.last) == (26, 4, 2)
    assert short.line and short.line.endswith(marker("short"))
    tpu, cpu = report.targets
    assert len(report.observation.signatures) == 1  # the 4 batches run were whole: the short one comes at the epoch's end
    assert tpu.verdict == "will recompile" and tpu.recompiles == 1 and "drop_last=True" in tpu.fixes[0]
    assert cpu.verdict == "runs" and any("2 row(s), not 4" in f.message and f.severity == "info" for f in cpu.findings)


def test_a_script_without_a_dataloader_is_checked_from_its_optimizer_steps() -> None:
    script = SCRIPTS / "get_batch.py"
    done = anydevice_cli("check", str(script), "--target", "tpu,cpu", "--json", cwd=SCRIPTS)
    assert done.returncode == 0, done.stderr
    report = Report.model_validate_json(done.stdout)
    obs = report.observation
    assert obs.run is not None and not obs.run.from_loader and obs.steps == 4
    (sig,) = obs.signatures  # from the model's training calls (X, Y): the evaluation under no_grad is not the step
    assert sig.signature == "(4, 16):int64, (4, 16):int64" and sig.batches == 4
    assert obs.memory is not None and obs.memory.optimizer == "AdamW" and obs.memory.optimizer_state > 0
    assert obs.ops and any(u.op == "aten::embedding" and u.line and "get_batch.py" in u.line for u in obs.ops)
    assert [t.verdict for t in report.targets] == ["runs", "runs"]
