"""Hostile round 7 (issues 46 and 49 as landed): what a careless or hostile user gives ``anydevice launch``, the device
grammar and ``anydevice run``'s counts, each refused in one line, nothing written, or written so the engine runs exactly
what was asked.

Each test is a case that failed before its fix: a line break in a script path became a YAML key or a shell command in
the spec's header; ``--out`` naming a missing folder, a directory or ``/dev/full`` was a traceback and a FIFO a hang;
``cpu:00`` (refused by torch) was accepted; an unknown 100,000-character device name was echoed whole; ``-n ٣`` ran 3
processes; an ``--image`` with a line break reached the spec.
"""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from anydevice.errors import SelectionError, UsageError
from anydevice.launch_specs import Plan, parse_target, write
from anydevice.runtime.registry import get_registry
from anydevice.runtime.selection import parse, resolve
from tests.utils import cli_in_process


@pytest.mark.parametrize("engine", ["skypilot", "jobset", "slurm"])
def test_a_line_break_in_the_script_path_stays_in_its_comment(engine: str, tmp_path: Path) -> None:
    marker = tmp_path / "injected"
    script = tmp_path / f"x\n  hostNetwork: true\ntouch {marker}\n#" / "train.py"
    plan = Plan(parse_target("cpu:1x2"), str(script), ("--note", "a\nb"), name="train")
    text = write(engine, plan, ("check said: line one\nline two",))
    header = [line for line in text.splitlines() if "anydevice launch" in line or "check said" in line]
    assert all(line.startswith("# ") for line in header) and "\\n  hostNetwork" in header[0]
    if engine == "slurm":  # bash runs the spec's own commands, with exactly the script and its arguments
        argv = _run_sbatch(text, tmp_path)
        assert not marker.exists() and argv[-3:] == [str(script), "--note", "a\nb"]
    else:  # the YAML loads with the same keys as a plain path's spec: none came from the path
        import yaml

        plain = write(engine, Plan(parse_target("cpu:1x2"), "train.py", ("--note", "a"), name="train"))
        assert _keys(list(yaml.safe_load_all(text))) == _keys(list(yaml.safe_load_all(plain)))


def _run_sbatch(text: str, tmp_path: Path) -> list[str]:
    """The sbatch script run by bash with stand-ins: srun runs its command, anydevice prints its arguments as JSON."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "srun").write_text('#!/bin/bash\nwhile [[ $1 == -* ]]; do shift; done\nexec "$@"\n')
    (bin_dir / "anydevice").write_text(f"#!{sys.executable}\nimport json, sys\nprint(json.dumps(sys.argv[1:]))\n")
    for tool in bin_dir.iterdir():
        tool.chmod(0o755)
    env = {"PATH": f"{bin_dir}:/usr/bin:/bin"}
    done = subprocess.run(["bash", "-c", text], capture_output=True, text=True, env=env, timeout=30, check=True)
    return list(json.loads(done.stdout.splitlines()[-1]))


def _keys(value: object, at: str = "") -> set[str]:
    """Every mapping key in ``value``, by where it is."""
    if isinstance(value, dict):
        return {f"{at}/{k}" for k in value} | {p for k, v in value.items() for p in _keys(v, f"{at}/{k}")}
    if isinstance(value, list):
        return {p for i, v in enumerate(value) for p in _keys(v, f"{at}[{i}]")}
    return set()


def _launch(*extra: str, script: Path) -> subprocess.CompletedProcess[str]:
    return cli_in_process("launch", str(script), "--target", "cpu:1x2", "--emit", "slurm", "--no-check", *extra)


@pytest.fixture
def script(tmp_path: Path) -> Path:
    path = tmp_path / "train.py"
    path.write_text("print('hi')\n")
    return path


@pytest.mark.parametrize("force", [(), ("--force",)])
def test_out_that_is_not_a_regular_file_is_refused_in_one_line(force: tuple[str, ...], script: Path, tmp_path: Path) -> None:
    folder = tmp_path / "a folder"
    folder.mkdir()
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    link = tmp_path / "to-null"
    link.symlink_to("/dev/null")
    for out, what in [(folder, "a directory"), (fifo, "a FIFO"), (link, "/dev/null"), (Path("/dev/full"), "character device")]:
        done = _launch("--out", str(out), *force, script=script)  # a FIFO was opened (a hang), /dev/full a traceback
        assert done.returncode == 2 and "Traceback" not in done.stderr, done.stderr
        assert f"Cannot write the spec to {out}" in done.stderr and what in done.stderr
    assert folder.is_dir() and not list(folder.iterdir()) and fifo.is_fifo() and os.readlink(link) == "/dev/null"


def test_out_in_a_missing_folder_is_written_and_an_existing_file_kept(script: Path, tmp_path: Path) -> None:
    out = tmp_path / "new folder" / "é\nspec.sbatch"
    done = _launch("--out", str(out), script=script)  # was FileNotFoundError's traceback
    assert done.returncode == 0 and out.read_text().startswith("#!/bin/bash") and os.access(out, os.X_OK)
    kept = tmp_path / "notes.sbatch"
    kept.write_text("mine")
    refused = _launch("--out", str(kept), script=script)
    assert refused.returncode == 2 and "exists" in refused.stderr and kept.read_text() == "mine"


def test_out_dash_is_stdout(script: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    done = _launch("--out", "-", script=script)
    assert done.returncode == 0 and done.stdout.startswith("#!/bin/bash") and not (tmp_path / "-").exists()


@pytest.mark.parametrize("image", ["img\n  hostNetwork: true", "python 3", "", "-x"])
def test_an_image_that_is_no_reference_is_refused(image: str) -> None:
    with pytest.raises(UsageError, match="is not a container image reference"):
        Plan(parse_target("cpu:1x2"), "train.py", image=image or " ")


def test_image_with_slurm_is_refused_not_ignored(script: Path) -> None:
    done = _launch("--image", "python:3.12-slim", script=script)
    assert done.returncode == 2 and "--image is for skypilot and jobset" in done.stderr


def test_a_target_with_hosts_names_what_the_user_wrote() -> None:
    with pytest.raises(SelectionError, match=r"--target cpu:1x1x1: "):
        parse_target("cpu:1x1x1")
    with pytest.raises(SelectionError, match=r"--target tpu:v5e-7x2: .*no v5e slice has 7 chips"):
        parse_target("tpu:v5e-7x2")


@pytest.mark.parametrize("text", ["cpu:00", "cpu:01", "cuda:007"])
def test_an_index_with_leading_zeros_is_refused_as_torch_refuses_it(text: str) -> None:
    with pytest.raises(SelectionError, match="without leading zeros"):
        parse(text)
    assert parse("cpu:0").items[0].index == 0 and parse("cuda:10").items[0].index == 10


def test_a_long_unknown_device_is_echoed_cut() -> None:
    with pytest.raises(SelectionError) as caught:
        resolve("x" * 100_000, get_registry())
    assert len(str(caught.value)) < 400 and "100,000 characters" in str(caught.value)


@pytest.mark.parametrize("count", ["٣", " 2", "1_0", "2.0"])
def test_run_counts_are_ascii_digits(count: str, script: Path) -> None:
    done = cli_in_process("run", "-n", count, str(script), env={"ANYDEVICE": "cpu"})
    assert done.returncode == 2 and "is not a whole number written with the ASCII digits 0-9" in done.stderr


LBFGS = """
import torch
model = torch.nn.Linear(4, 1)
opt = torch.optim.LBFGS(model.parameters())
x, y = torch.randn(8, 4), torch.randn(8, 1)
for _ in range(3):
    def closure():
        opt.zero_grad()
        loss = torch.nn.functional.mse_loss(model(x), y)
        loss.backward()
        return loss
    opt.step(closure)
"""


@pytest.mark.skipif(importlib.util.find_spec("jax") is None, reason="needs the TPU compiler (the tpu-check lane venv)")
def test_a_compile_the_compiler_refuses_is_its_refusal_alone(tmp_path: Path) -> None:
    script = tmp_path / "lbfgs.py"
    script.write_text(LBFGS)
    done = subprocess.run(
        [sys.executable, "-m", "anydevice", "check", str(script), "--target", "tpu:v5e-8"],
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "OMP_NUM_THREADS": "1"},
    )
    assert done.returncode == 2 and "does not model the LBFGS optimizer" in done.stderr.splitlines()[0], done.stderr
    assert "the script's last output" not in done.stderr and "ANYDEVICE=cpu python" not in done.stderr


def test_launch_timeout_of_zero_is_refused_before_any_check(script: Path) -> None:
    done = cli_in_process("launch", str(script), "--target", "cpu:1x2", "--emit", "slurm", "--check", "--timeout", "0")
    assert done.returncode == 2 and done.stderr.startswith("anydevice: error: --timeout must be a whole number of 1 or more")
    assert "could not run" not in done.stderr


ARGV = """
import sys, torch
assert sys.argv[1:] == ["--steps", "1", "--target", "x", "--json"], sys.argv
model = torch.nn.Linear(4, 1)
opt = torch.optim.SGD(model.parameters(), lr=0.1)
for _ in range(3):
    opt.zero_grad()
    model(torch.randn(8, 4)).sum().backward()
    opt.step()
"""


def test_the_check_before_the_spec_gets_the_script_arguments_spelled_like_its_options(tmp_path: Path) -> None:
    """``--steps 1 --target x --json`` were read by the check itself: it judged the script run without its arguments."""
    script = tmp_path / "argv.py"
    script.write_text(ARGV)
    done = cli_in_process(
        "launch",
        str(script),
        "--target",
        "cpu:1x2",
        "--emit",
        "slurm",
        "--check",
        "--",
        "--steps",
        "1",
        "--target",
        "x",
        "--json",
    )
    assert done.returncode == 0, done.stderr
    assert "# anydevice check --target cpu: RUNS" in done.stdout and f"{script} --steps 1 --target x --json" in done.stdout


@pytest.mark.parametrize("value", ["cpu,,xla", ",", "cpu,"])
def test_a_plugin_list_with_an_empty_entry_is_refused_as_a_device_list_is(value: str) -> None:
    done = cli_in_process("list", env={"ANYDEVICE_PLUGINS": value})
    assert done.returncode == 2 and f"ANYDEVICE_PLUGINS={value!r} has an empty entry." in done.stderr, done.stderr


def test_a_save_whose_folder_takes_no_new_file_names_the_folder_not_a_temporary() -> None:
    import anydevice as ad
    from anydevice.errors import CheckpointError

    with pytest.raises(CheckpointError) as caught:  # /proc/self takes no new file: it said '(.mem.anydevice-new.<hex>)'
        ad.save({"w": 1}, "/proc/self/mem")
    message = str(caught.value).splitlines()[0]
    assert "anydevice-new" not in message and "no new file can be made in its folder /proc/self" in message
