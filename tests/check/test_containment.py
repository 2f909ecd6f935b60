"""`anydevice check` is contained by the kernel: the user's tree comes out byte-identical whatever the script does.

Each test is a real `anydevice check` of a user-shaped script in a real folder (files, subfolders, a home folder
inside it). The script writes through every route a training script has (relative, absolute, ``__file__``, ``~``,
the shell, a subprocess, ``shutil.rmtree``, ``os.rename``, ``O_TRUNC``, ``mmap``, C code); every file is hashed and
every entry listed before and after. The mechanism is forced with ``ANYDEVICE_CHECK_CONTAINMENT`` (an internal knob)
to test the fallbacks: a private mount namespace, a copy, none (refused without ``--allow-writes``).
"""

from __future__ import annotations

import hashlib
import os
import time
from pathlib import Path
from typing import Any

import pytest

from anydevice.cli.check import split
from anydevice.preflight.containment import REFER, TRUNCATE, landlock_abi, write_rights
from anydevice.preflight.schema import Report
from tests.utils import anydevice_cli

pytestmark = pytest.mark.slow

TRAIN = """
model = torch.nn.Linear(4, 1)
opt = torch.optim.SGD(model.parameters(), lr=0.1)
for _ in range(4):
    model(torch.randn(2, 4)).sum().backward()
    opt.step()
    opt.zero_grad()
"""

ROUTES = (
    """import ctypes, mmap, os, shutil, subprocess, sys
import torch

here = os.path.dirname(os.path.abspath(__file__))


def attempt(write):
    try:
        write()
    except OSError as exc:
        print("refused:", exc)


attempt(lambda: open("train.log", "w").write("relative"))
attempt(lambda: open(os.path.join(os.getcwd(), "data.txt"), "w").write("absolute"))
attempt(lambda: open(os.path.join(here, "notes.txt"), "a").write("__file__"))
attempt(lambda: open(os.path.expanduser("~/profile.txt"), "w").write("home"))
os.system(f"rm -rf {here}/runs; cp /dev/null {here}/train.log; echo x > {here}/notes.txt")  # ROUTE: shell
subprocess.run(["sh", "-c", f"echo y >> {here}/data.txt"])  # ROUTE: subprocess
subprocess.run([sys.executable, "-c", f"open({here!r} + '/runs/exp1/events.log', 'w')"])
shutil.rmtree(os.path.join(here, "runs"), ignore_errors=True)  # ROUTE: rmtree
attempt(lambda: os.rename(os.path.join(here, "config.yaml"), os.path.join(here, "moved.yaml")))  # ROUTE: rename
attempt(lambda: os.remove(os.path.expanduser("~/settings.cfg")))  # ROUTE: remove
attempt(lambda: os.close(os.open(os.path.join(here, "data.txt"), os.O_WRONLY | os.O_TRUNC)))
libc = ctypes.CDLL(None, use_errno=True)
path = os.path.join(here, "runs", "exp1", "events.log").encode()
fd = libc.open(path, os.O_WRONLY | os.O_TRUNC)  # C code: only the kernel stands in its way
if fd >= 0:
    libc.write(fd, b"C", 1)
    libc.close(fd)
with open(os.path.join(here, "weights.bin"), "r+b") as f:
    mapped = mmap.mmap(f.fileno(), 0)
    mapped[:4] = b"MMAP"
    mapped.flush()
    mapped.close()
"""
    + TRAIN
)

START_UP = (
    """import os, shutil
import torch
shutil.rmtree(os.path.join(os.path.dirname(__file__), "runs"))
"""
    + TRAIN
)


def _tree(folder: Path) -> dict[str, str]:
    """Every entry under ``folder``: a folder as ``dir``, a file as the sha256 of its bytes."""
    entries = {}
    for path in sorted(folder.rglob("*")):
        name = str(path.relative_to(folder))
        entries[name] = "dir" if path.is_dir() else hashlib.sha256(path.read_bytes()).hexdigest()
    return entries


def _project(tmp_path: Path, script: str, name: str = "train.py") -> Path:
    project = tmp_path / "project"
    (project / "runs" / "exp1").mkdir(parents=True)
    (project / "runs" / "exp1" / "events.log").write_text("a real run's events\n")
    (project / "train.log").write_text("a real run's log\n")
    (project / "data.txt").write_text("the data\n")
    (project / "config.yaml").write_text("lr: 0.1\n")
    (project / "notes.txt").write_text("my notes\n")
    (project / "weights.bin").write_bytes(bytes(range(256)) * 4)
    (project / "home").mkdir()
    (project / "home" / "settings.cfg").write_text("mine\n")
    (project / name).write_text(script)
    return project


def _line(script: str, mark: str) -> int:
    return next(i for i, line in enumerate(script.splitlines(), 1) if f"# ROUTE: {mark}" in line)


def _check(project: Path, tmp_path: Path, *extra: str, mechanism: str | None = None, name: str = "train.py") -> Any:
    env = {"HOME": str(project / "home"), "TMPDIR": str(tmp_path / "tmp")}
    (tmp_path / "tmp").mkdir(exist_ok=True)
    if mechanism is not None:
        env["ANYDEVICE_CHECK_CONTAINMENT"] = mechanism
    return anydevice_cli("check", name, "--target", "cpu", *extra, env=env, cwd=project)


needs_landlock = pytest.mark.skipif(landlock_abi() < 1, reason="the kernel has no Landlock")


@needs_landlock
def test_every_route_leaves_the_users_tree_byte_identical_and_each_refusal_is_named(tmp_path: Path) -> None:
    project = _project(tmp_path, ROUTES)
    before = _tree(project)
    done = _check(project, tmp_path, "--json")
    assert done.returncode == 0, done.stderr
    assert _tree(project) == before  # nothing created, changed or removed, by any route
    run = Report.model_validate_json(done.stdout).observation.run
    assert run is not None and run.containment == "landlock"
    refused = "\n".join(run.refused)
    assert run.refused[0].startswith(f"train.py:{_line(ROUTES, 'shell')} ran `rm -rf")  # in the order the script tried them
    for mark, said in [("shell", "ran `rm -rf"), ("subprocess", "ran `sh -c echo y"), ("rmtree", "tried to remove")]:
        assert f"train.py:{_line(ROUTES, mark)} {said}" in refused, (mark, refused)
    assert f"train.py:{_line(ROUTES, 'rename')} tried to rename {project / 'config.yaml'}" in refused
    assert f"train.py:{_line(ROUTES, 'remove')} tried to remove {project / 'home' / 'settings.cfg'}" in refused
    assert f"tried to remove {project / 'runs'}" in refused  # the folder rmtree was asked to remove, not a file in it
    assert "train.log" in run.files and "weights.bin" in run.files  # the redirected writes landed in scratch


@needs_landlock
def test_a_script_that_removes_its_runs_folder_at_start_up_is_told_so_with_its_line(tmp_path: Path) -> None:
    project = _project(tmp_path, START_UP)
    before = _tree(project)
    done = _check(project, tmp_path)
    assert done.returncode == 2
    assert _tree(project) == before
    first = done.stderr.splitlines()[0]
    assert f"train.py:3 tried to remove {project / 'runs'}: check never changes your files" in first
    assert "this is a script that writes at start-up" in first and "landlock" in first
    assert "before its first step" not in first


SHELL_AND_FILE = (
    """import os, shutil
import torch
here = os.path.dirname(os.path.abspath(__file__))
os.system(f"rm -rf {here}/runs; echo x > {here}/notes.txt")
shutil.rmtree(os.path.join(here, "runs"), ignore_errors=True)
open(os.path.join(here, "train.log"), "w").write("overwritten")
"""
    + TRAIN
)


@pytest.mark.parametrize("mechanism", ["namespace", "copy"])
def test_the_fallbacks_keep_the_tree_and_say_which_held(tmp_path: Path, mechanism: str) -> None:
    project = _project(tmp_path, SHELL_AND_FILE)
    before = _tree(project)
    done = _check(project, tmp_path, "--json", mechanism=mechanism)
    if mechanism == "namespace" and "namespace:" in done.stderr:
        pytest.skip(f"no user namespace here: {done.stderr.strip()[:200]}")
    assert done.returncode == 0, done.stderr
    assert _tree(project) == before
    run = Report.model_validate_json(done.stdout).observation.run
    assert run is not None and run.containment == mechanism
    if mechanism == "namespace":  # the kernel refused the shell's writes; the copy took them
        assert any("train.py:4 ran `rm -rf" in r for r in run.refused), run.refused


def test_where_nothing_holds_check_refuses_unless_allow_writes(tmp_path: Path) -> None:
    script = "import os, sys\nimport torch\nprint('the script ran', file=sys.stderr)\n" + TRAIN
    project = _project(tmp_path, script)
    done = _check(project, tmp_path, mechanism="none")
    assert done.returncode == 2 and "the script ran" not in done.stderr  # refused before the script starts
    assert "cannot keep train.py from changing your files" in done.stderr and "--allow-writes" in done.stderr
    assert len(done.stderr.strip().splitlines()) == 2  # one line, and its fix
    allowed = _check(project, tmp_path, "--json", "--allow-writes", mechanism="none")
    assert allowed.returncode == 0, allowed.stderr
    run = Report.model_validate_json(allowed.stdout).observation.run
    assert run is not None and run.containment == "none"  # said, never silent
    bad = _check(project, tmp_path, mechanism="sandbox")
    assert bad.returncode == 2 and "landlock, namespace, copy, none" in bad.stderr and "Traceback" not in bad.stderr


def test_allow_writes_is_checks_own_option_and_each_landlock_abi_handles_what_it_knows() -> None:
    options, script, rest = split(["train.py", "--lr", "3", "--allow-writes", "--target", "tpu"])
    assert options["--allow-writes"] is True and script == "train.py" and rest == ["--lr", "3"]
    assert split(["train.py", "--target", "tpu"])[0]["--allow-writes"] is False
    assert split(["train.py", "--target", "tpu", "--", "--allow-writes"])[2] == ["--allow-writes"]  # the script's
    v1, v2, v3, v7 = (write_rights(abi) for abi in (1, 2, 3, 7))
    assert not v1 & (REFER | TRUNCATE) and v2 & REFER and not v2 & TRUNCATE and v3 & TRUNCATE and v7 == v3


HELPERS = """import subprocess, sys
import torch
from torch.utils.data import DataLoader, Dataset

TOKEN = "anydevice-helper-{token}"
subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)", TOKEN], start_new_session=True)
subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)", TOKEN], start_new_session=True, env={{}})


class Noisy(Dataset):
    def __len__(self):
        return 64

    def __getitem__(self, i):
        print("noise from a worker " * 20, flush=True)
        print("noise on stderr", file=sys.stderr)
        return torch.randn(4), torch.randn(1)


print("noise " * 1000)
model = torch.nn.Linear(4, 1)
opt = torch.optim.SGD(model.parameters(), lr=0.1)
for x, y in DataLoader(Noisy(), batch_size=8, num_workers=2):
    torch.nn.functional.mse_loss(model(x), y).backward()
    opt.step()
    opt.zero_grad()
"""


def _running(token: str) -> list[int]:
    found = []
    for proc in Path("/proc").iterdir():
        try:
            if proc.name.isdigit() and token.encode() in (proc / "cmdline").read_bytes():
                found.append(int(proc.name))
        except OSError:
            continue
    return found


def test_helpers_in_their_own_session_end_with_check_and_a_noisy_loader_still_gets_its_report(tmp_path: Path) -> None:
    token = f"{os.getpid()}-{time.monotonic_ns()}"
    project = _project(tmp_path, HELPERS.format(token=token))
    try:
        done = _check(project, tmp_path, "--json")
        assert done.returncode == 0, done.stderr
        assert Report.model_validate_json(done.stdout).observation.steps == 4
        deadline = time.monotonic() + 10
        while _running(token) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert _running(token) == []  # both helpers: the one with the run's environment and the one with none
    finally:
        for pid in _running(token):
            os.kill(pid, 9)
