"""Issue 46 on ``xla`` (PJRT CPU), as a user runs it with ``anydevice run``:

* a loop that never imports torch_xla, updates its weights by hand and ends with ``os._exit(0)`` is told once,
  at its first backward pass, that it runs on the CPU (before, nothing was said: the check needed an
  optimizer step or a normal exit);
* a CUDA script that moves its model to the device before ``init_device_mesh`` (a common order) is refused with
  one clear error before torch_xla's switch to SPMD, instead of dying of SIGSEGV with no message.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from tests.utils import REPO, child_env

pytestmark = pytest.mark.xla
pytest.importorskip("torch_xla")

BY_HAND = """
import os

import torch

model = torch.nn.Linear(4, 2)
for step in range(3):
    model.zero_grad()
    model(torch.ones(3, 4)).sum().backward()
    for p in model.parameters():
        p.data -= 0.1 * p.grad  # no torch.optim
    print(f"step {step} done", flush=True)
os._exit(0)  # no exit handlers: only a line said at the first step is ever said
"""

MESH_AFTER_MODEL = """
import os

import torch
from torch.distributed.device_mesh import init_device_mesh

model = torch.nn.Linear(8, 8).cuda()  # moved first, as many scripts do
mesh = init_device_mesh("cuda", (int(os.environ.get("WORLD_SIZE", "1")),), mesh_dim_names=("tp",))
print(model(torch.ones(2, 8).cuda()).sum().item())
"""


def anydevice_run(tmp_path: Path, script: str, *options: str) -> subprocess.CompletedProcess[str]:
    path = tmp_path / "script.py"
    path.write_text(script)
    return subprocess.run(
        [sys.executable, "-m", "anydevice", "run", *options, str(path)],
        env=child_env({"PJRT_DEVICE": "CPU", "ANYDEVICE": "xla", "ANYDEVICE_QUIET": "1"}),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        timeout=400,
        cwd=REPO,
    )


def test_a_by_hand_loop_ending_in_os_exit_is_told_once_at_its_first_backward(tmp_path: Path) -> None:
    done = anydevice_run(tmp_path, BY_HAND)
    assert done.returncode == 0, done.stdout[-3000:]
    lines = done.stdout.splitlines()
    said = [i for i, line in enumerate(lines) if "anydevice: ANYDEVICE=xla was asked for" in line]
    assert len(said) == 1 and said[0] < lines.index("step 0 done"), lines
    assert "is not using xla" in lines[said[0]] and "first backward pass" in lines[said[0]], lines[said[0]]
    assert lines[-1] == "step 2 done"


def test_a_model_moved_before_the_mesh_is_refused_in_one_error_not_a_sigsegv(tmp_path: Path) -> None:
    done = anydevice_run(tmp_path, MESH_AFTER_MODEL, "--cuda-compat")
    assert done.returncode == 1, done.stdout[-3000:]  # not -11 / 139
    assert "Tensor parallelism on xla (torch_xla SPMD) must be switched on before the first tensor" in done.stdout
    assert "Make the mesh first" in done.stdout and "script.py:8" in done.stdout, done.stdout[-3000:]
    assert "Traceback" not in done.stdout
