"""Issues 36 and 46, no silent CPU run: rank 0 says at the first step (backward pass or optimizer step) that the
device asked for is not used, whatever the loop's update and however it ends; a run that never stepped says so.

The rank runs as ``anydevice run`` starts it (``anydevice/cli/rank_start.py`` by its path): ``anydevice run``
itself refuses ``ANYDEVICE=xla`` here (no torch_xla), while the rank's check needs only the built-in
registry. Output is stderr merged into stdout, so the order of the lines is the real one. On xla, end to
end with and without cuda-compat: tests/xla/test_cuda_compat_xla.py.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from anydevice.cli import rank_start
from anydevice.cli.device_use import asked_device
from anydevice.contract.detect import torch_version
from tests.support.fake_torch_neuronx import install_simulated_device
from tests.utils import anydevice_cli, child_env

NATIVE_TORCH = tuple(int(part) for part in (torch_version() or "0.0").split(".")[:2]) >= (2, 10)

RANK_START = str(Path(rank_start.__file__).resolve())
STEPS = """
import importlib.util
import sys

if "probe" in sys.argv:  # as datasets and transformers ask at import whether torch is installed
    assert importlib.util.find_spec("torch") is not None
import torch
from torch.optim import optimizer

where = "meta" if "used" in sys.argv else "cpu"  # "used": the step's tensors are off the CPU
if "other-hook" in sys.argv:  # a global pre-hook after anydevice's: removing anydevice's then would break the step
    other = optimizer.register_optimizer_step_pre_hook(lambda *_: None)
model = torch.nn.Linear(2, 1).to(where)
opt = torch.optim.SGD(model.parameters(), lr=0.1)
for step in range(0 if "no-step" in sys.argv else 3):
    model(torch.ones(4, 2, device=where)).sum().backward()
    opt.step()
    print(f"step {step} done, global pre-hooks {len(optimizer._global_optimizer_pre_hooks)}", flush=True)
    if "other-hook" in sys.argv and step == 1:
        other.remove()
"""
FIRST_STEP = "the tensors of its first backward pass are on the CPU, so this step runs on the CPU"


def rank(tmp_path: Path, anydevice: str, *args: str) -> list[str]:
    """The output lines of rank 0 running :data:`STEPS` with ``ANYDEVICE=anydevice`` (stderr merged, in order)."""
    script = tmp_path / "steps.py"
    script.write_text(STEPS)
    env = child_env({"ANYDEVICE": anydevice, "RANK": "0", "TORCH_DEVICE_BACKEND_AUTOLOAD": "0"})
    done = subprocess.run(
        [sys.executable, RANK_START, str(script), "script", str(tmp_path), *args],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stdout[-3000:]
    return done.stdout.splitlines()


# The rank's check needs no device: ANYDEVICE=cuda here (no vendor module, so nothing is imported at torch's import),
# and the step's tensors are on the CPU. The vendor-module wording (torch_xla not imported) is end to end on xla:
# tests/xla/test_cuda_compat_xla.py and tests/xla/test_silent_cpu_and_mesh_order_xla.py.


def test_the_rank_says_before_its_first_step_that_the_device_is_not_used_once_and_not_again_at_exit(tmp_path: Path) -> None:
    lines = rank(tmp_path, "cuda")
    said = [i for i, line in enumerate(lines) if FIRST_STEP in line]
    assert len(said) == 1 and said[0] < lines.index("step 0 done, global pre-hooks 0"), lines
    assert "ANYDEVICE=cuda was asked for, but this process is not using cuda" in lines[said[0]]
    assert "move the model and its inputs with .to(ad.device())" in lines[said[0]]
    assert sum("anydevice:" in line for line in lines) == 1, lines  # nothing more at exit
    assert lines[-1] == "step 2 done, global pre-hooks 0"  # the hook left at the first step


def test_without_a_step_the_rank_ends_with_the_never_stepped_line(tmp_path: Path) -> None:
    lines = rank(tmp_path, "cuda", "no-step")
    said = [line for line in lines if "anydevice:" in line]
    assert len(said) == 1 and "ANYDEVICE=cuda was asked for, but this process never stepped" in said[0], lines


def test_the_hook_waits_to_leave_until_no_global_pre_hook_follows_it(tmp_path: Path) -> None:
    lines = rank(tmp_path, "cuda", "other-hook")
    assert sum(FIRST_STEP in line for line in lines) == 1, lines
    steps = [line for line in lines if line.startswith("step ")]
    assert steps == [  # steps 0 and 1 run with both hooks; after step 1 the other goes, at step 2 anydevice's
        "step 0 done, global pre-hooks 2",
        "step 1 done, global pre-hooks 2",
        "step 2 done, global pre-hooks 0",
    ], lines


def test_nothing_is_said_when_the_step_is_off_the_cpu_or_the_cpu_was_asked(tmp_path: Path) -> None:
    for anydevice, args in (("cuda", ("used",)), ("cpu", ())):
        lines = rank(tmp_path, anydevice, *args)
        assert not any("anydevice:" in line for line in lines), (anydevice, lines)
        assert lines[-1] == "step 2 done, global pre-hooks 0", lines
    for not_one in ("", " ", "auto", "AUTO", "cpu,xla"):
        assert asked_device(not_one) is None, not_one  # no one device to check
    assert asked_device("xla:1") == "xla"


def test_a_probe_for_torch_before_its_import_does_not_use_up_the_watch(tmp_path: Path) -> None:
    lines = rank(tmp_path, "cuda", "probe")
    said = [i for i, line in enumerate(lines) if FIRST_STEP in line]
    assert len(said) == 1 and said[0] < lines.index("step 0 done, global pre-hooks 0"), lines


LOOP = """
import os
import sys

import torch

update, end = sys.argv[1], sys.argv[2]
torch.manual_seed(0)
model = torch.nn.Linear(2, 1)
opt = torch.optim.SGD(model.parameters(), lr=0.1)
x = torch.ones(4, 2)


def closure():
    opt.zero_grad()
    loss = model(x).sum()
    loss.backward()
    return loss


for step in range(3):
    if update == "optimizer":
        opt.zero_grad()
        model(x).sum().backward()
        opt.step()
    elif update == "closure":
        opt.step(closure)
    elif update == "by-hand":
        model.zero_grad()
        model(x).sum().backward()
        for p in model.parameters():
            p.data -= 0.1 * p.grad
    else:  # "no-grad": torch.autograd.grad, then an in-place update under no_grad
        grads = torch.autograd.grad(model(x).sum(), list(model.parameters()))
        with torch.no_grad():
            for p, g in zip(model.parameters(), grads):
                p -= 0.1 * g
    print(f"step {step} done", flush=True)
if end == "os._exit":
    os._exit(0)  # skips the exit handlers: only a line said at the first step is ever said
if end == "sys.exit":
    sys.exit(0)
"""
SAID = "anydevice: ANYDEVICE=cuda was asked for, but this process is not using cuda: the tensors of its first"


def loop(tmp_path: Path, anydevice: str, update: str, end: str) -> list[str]:
    script = tmp_path / "loop.py"
    script.write_text(LOOP)
    env = child_env({"ANYDEVICE": anydevice, "RANK": "0", "TORCH_DEVICE_BACKEND_AUTOLOAD": "0"})
    done = subprocess.run(
        [sys.executable, RANK_START, str(script), "script", str(tmp_path), update, end],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stdout[-3000:]
    return done.stdout.splitlines()


@pytest.mark.parametrize("end", ["return", "sys.exit", "os._exit"])
@pytest.mark.parametrize("update", ["optimizer", "by-hand", "closure", "no-grad"])
def test_a_cpu_loop_is_told_once_at_its_first_step_whatever_its_update_and_its_end(tmp_path: Path, update: str, end: str) -> None:
    lines = loop(tmp_path, "cuda", update, end)  # the rank's check needs no cuda: the step's tensors are on the CPU
    said = [i for i, line in enumerate(lines) if line.startswith("anydevice:")]
    assert len(said) == 1 and SAID in lines[said[0]], lines
    assert said[0] < lines.index("step 0 done"), lines  # at the first step, before os._exit could skip it
    moment = "optimizer step" if update == "closure" else "backward pass"  # a closure's backward runs inside the step
    assert f"its first {moment} are on the CPU, so this step runs on the CPU" in lines[said[0]], lines
    assert lines[-1] == "step 2 done", lines


@pytest.mark.parametrize("end", ["return", "os._exit"])
def test_on_the_cpu_a_loop_that_steps_hears_nothing(tmp_path: Path, end: str) -> None:
    lines = loop(tmp_path, "cpu", "by-hand", end)
    assert lines == ["step 0 done", "step 1 done", "step 2 done"], lines


@pytest.fixture(scope="module")
def simulated_neuron(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return install_simulated_device(tmp_path_factory.mktemp("fake-neuron"))


@pytest.mark.skipif(not NATIVE_TORCH, reason="the fake native TorchNeuron needs torch >= 2.10")
@pytest.mark.parametrize(("update", "end"), [("by-hand", "os._exit"), ("optimizer", "sys.exit")])
def test_anydevice_run_on_a_device_tells_a_loop_left_on_the_cpu_once(
    tmp_path: Path, simulated_neuron: Path, update: str, end: str
) -> None:
    """End to end: ``ANYDEVICE=neuron anydevice run`` (the fake device, its vendor module imported) of a loop whose
    model never leaves the CPU; on the cpu the same run hears nothing."""
    script = tmp_path / "loop.py"
    script.write_text(LOOP)
    env = {"ANYDEVICE_PLUGINS": "cpu,neuron_simulated", "TORCH_DEVICE_BACKEND_AUTOLOAD": "0"}
    on = anydevice_cli("run", str(script), update, end, env={**env, "ANYDEVICE": "neuron"}, pythonpath=simulated_neuron)
    assert on.returncode == 0 and on.stdout.splitlines()[-1] == "step 2 done", on.stderr[-3000:]
    said = [line for line in on.stderr.splitlines() if "was asked for" in line]
    assert len(said) == 1, on.stderr
    assert "ANYDEVICE=neuron was asked for, but this process is not using neuron: the tensors of its first" in said[0]
    cpu = anydevice_cli("run", str(script), update, end, env={**env, "ANYDEVICE": "cpu"}, pythonpath=simulated_neuron)
    assert cpu.returncode == 0 and "anydevice:" not in cpu.stderr, cpu.stderr


NO_STEP = """
import sys

import torch

if torch.accelerator.device_count() >= 2:  # the program decides itself whether there is anything to do
    print("training")
else:
    print("fewer than 2 accelerators: nothing to do", flush=True)
    sys.exit(int(sys.argv[1]) if len(sys.argv) > 1 else 0)
"""
NEVER_STEPPED = "anydevice: ANYDEVICE=cpu was asked for, but this process never stepped: no backward pass and no optimizer step"


def test_a_run_that_never_stepped_says_so_once_at_its_end_unless_it_failed(tmp_path: Path) -> None:
    script = tmp_path / "gate.py"
    script.write_text(NO_STEP)
    env = child_env({"ANYDEVICE": "cpu", "RANK": "0", "TORCH_DEVICE_BACKEND_AUTOLOAD": "0"})

    def rank(*args: str, **extra: str) -> subprocess.CompletedProcess[str]:
        command = [sys.executable, RANK_START, str(script), "script", str(tmp_path), *args]
        return subprocess.run(command, env={**env, **extra}, capture_output=True, text=True, timeout=300)

    ended = rank()
    assert ended.returncode == 0 and ended.stdout == "fewer than 2 accelerators: nothing to do\n"
    assert ended.stderr.count(NEVER_STEPPED) == 1 and len(ended.stderr.splitlines()) == 1, ended.stderr
    failed = rank("3")
    assert failed.returncode == 3 and "never stepped" not in failed.stderr, failed.stderr  # its status says enough
    quiet = rank(ANYDEVICE_QUIET="1")
    assert quiet.returncode == 0 and quiet.stderr == "", quiet.stderr


@pytest.mark.slow
def test_a_two_rank_cuda_compat_run_on_the_cpu_that_gated_itself_out_says_it_never_stepped(tmp_path: Path) -> None:
    """Issue 46: gated on ``torch.accelerator.device_count() >= 2`` (truthful on the cpu), it trained nothing."""
    script = tmp_path / "gate.py"
    script.write_text(NO_STEP)
    done = anydevice_cli("run", "-n", "2", "--cuda-compat", str(script), env={"ANYDEVICE": "cpu"})
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.count("nothing to do") == 2
    assert done.stderr.count("this process never stepped") == 1, done.stderr  # rank 0 only
