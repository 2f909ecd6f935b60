"""Issue 36, no silent CPU run: rank 0 says before the first optimizer step that the device asked for is not used.

The rank runs as ``anydevice run`` starts it (``anydevice/cli/rank_start.py`` by its path): ``anydevice run``
itself refuses ``ANYDEVICE=xla`` here (no torch_xla), while the rank's check needs only the built-in
registry. Output is stderr merged into stdout, so the order of the lines is the real one. On xla, end to
end with and without cuda-compat: tests/xla/test_cuda_compat_xla.py.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from anydevice.cli import rank_start
from anydevice.cli.device_use import asked_device
from tests.utils import child_env

RANK_START = str(Path(rank_start.__file__).resolve())
STEPS = """
import importlib.util
import sys

if "probe" in sys.argv:  # as datasets and transformers ask at import whether torch is installed
    assert importlib.util.find_spec("torch") is not None
import torch
from torch.optim import optimizer

if "used" in sys.argv:
    sys.modules["torch_xla"] = type(sys)("torch_xla")  # as if the program had placed a tensor on xla
if "other-hook" in sys.argv:  # a global pre-hook after anydevice's: removing anydevice's then would break the step
    other = optimizer.register_optimizer_step_pre_hook(lambda *_: None)
model = torch.nn.Linear(2, 1)
opt = torch.optim.SGD(model.parameters(), lr=0.1)
for step in range(0 if "no-step" in sys.argv else 3):
    model(torch.ones(4, 2)).sum().backward()
    opt.step()
    print(f"step {step} done, global pre-hooks {len(optimizer._global_optimizer_pre_hooks)}", flush=True)
    if "other-hook" in sys.argv and step == 1:
        other.remove()
"""
FIRST_STEP = "is not imported at its first optimizer step, so this step runs on the CPU"


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


def test_the_rank_says_before_its_first_step_that_xla_is_not_used_once_and_not_again_at_exit(tmp_path: Path) -> None:
    lines = rank(tmp_path, "xla")
    said = [i for i, line in enumerate(lines) if FIRST_STEP in line]
    assert len(said) == 1 and said[0] < lines.index("step 0 done, global pre-hooks 0"), lines
    assert "ANYDEVICE=xla was asked for, but this process is not using xla: torch_xla" in lines[said[0]]
    assert "anydevice run --cuda-compat" in lines[said[0]]
    assert not any("never used" in line for line in lines), lines  # the exit line is not repeated
    assert lines[-1] == "step 2 done, global pre-hooks 0"  # the hook left at the first step


def test_without_a_step_the_rank_still_ends_with_the_exit_line(tmp_path: Path) -> None:
    lines = rank(tmp_path, "xla", "no-step")
    said = [line for line in lines if "anydevice:" in line]
    assert len(said) == 1 and "this process never used xla: torch_xla was never imported" in said[0], lines


def test_the_hook_waits_to_leave_until_no_global_pre_hook_follows_it(tmp_path: Path) -> None:
    lines = rank(tmp_path, "xla", "other-hook")
    assert sum(FIRST_STEP in line for line in lines) == 1, lines
    steps = [line for line in lines if line.startswith("step ")]
    assert steps == [  # steps 0 and 1 run with both hooks; after step 1 the other goes, at step 2 anydevice's
        "step 0 done, global pre-hooks 2",
        "step 1 done, global pre-hooks 2",
        "step 2 done, global pre-hooks 0",
    ], lines


def test_nothing_is_said_when_the_device_is_used_or_has_no_vendor_module(tmp_path: Path) -> None:
    for anydevice, args in (("xla", ("used",)), ("cpu", ())):
        lines = rank(tmp_path, anydevice, *args)
        assert not any("anydevice:" in line for line in lines), (anydevice, lines)
        assert lines[-1] == "step 2 done, global pre-hooks 0", lines
    for not_one in ("", " ", "auto", "AUTO", "cpu,xla"):
        assert asked_device(not_one) is None, not_one  # no device to check: no hook at all
    assert asked_device("XLA:1") == "xla"


def test_a_probe_for_torch_before_its_import_does_not_use_up_the_watch(tmp_path: Path) -> None:
    lines = rank(tmp_path, "xla", "probe")
    said = [i for i, line in enumerate(lines) if FIRST_STEP in line]
    assert len(said) == 1 and said[0] < lines.index("step 0 done, global pre-hooks 0"), lines
