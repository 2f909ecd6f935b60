"""``examples/train.py`` on ``xla`` for real, as a user runs it: a subprocess, its last stdout line JSON.

Three runs, each shared by several assertions (module-scoped fixtures):

- ``ANYDEVICE=xla python examples/train.py --steps 50`` with ``PJRT_DEVICE`` unset (anydevice sets it);
- the same with ``--compile --profile DIR`` (openxla and torch_xla's profiler in one run);
- ``ANYDEVICE=cpu`` with the same seed and data, in this same venv (torch 2.9), for the comparison.

Tolerance of the comparison: every step's loss on xla is within 1e-3 (relative) of cpu's; the runs
agree to about 1e-6 on this machine (the JSON rounds losses to 6 decimals).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.utils import TRAIN, child_env

pytestmark = pytest.mark.xla
pytest.importorskip("torch_xla")

STEPS = 50
RTOL = 1e-3


def train(device: str, *flags: str, pjrt: str | None = None) -> dict[str, Any]:
    env = child_env({"ANYDEVICE": device})
    env.pop("PJRT_DEVICE", None)
    if pjrt is not None:
        env["PJRT_DEVICE"] = pjrt
    done = subprocess.run(
        [sys.executable, str(TRAIN), "--steps", str(STEPS), *flags], env=env, capture_output=True, text=True, timeout=400
    )
    assert done.returncode == 0, done.stderr[-3000:]
    result: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    result["stderr"] = done.stderr
    return result


@pytest.fixture(scope="module")
def xla_run() -> dict[str, Any]:
    return train("xla")  # PJRT_DEVICE unset: the xla plugin sets it to CPU


@pytest.fixture(scope="module")
def compiled_profiled_run(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    directory = tmp_path_factory.mktemp("xla-trace")
    result = train("xla", "--compile", "--profile", str(directory), pjrt="CPU")
    result["trace_dir"] = directory
    return result


@pytest.fixture(scope="module")
def cpu_run() -> dict[str, Any]:
    return train("cpu")


def falls(losses: list[float]) -> bool:
    head, tail = losses[:10], losses[-10:]
    return sum(tail) / len(tail) < 0.7 * sum(head) / len(head) and losses[-1] < losses[0] - 2.0


def test_trains_on_xla(xla_run: dict[str, Any]) -> None:
    r = xla_run
    assert (r["backend"], r["device"], r["chip"], r["world_size"]) == ("xla", "xla:0", "PJRT CPU", 1)
    assert r["steps"] == r["trained_steps"] == STEPS == len(r["losses"])
    assert r["versions"]["torch_xla"].startswith("2.9")
    assert falls(r["losses"]), r["losses"]
    assert r["mfu"] is None and r["tokens_per_s"] > 0  # a PJRT CPU has no known peak: MFU unknown, not guessed


def test_losses_match_cpu(xla_run: dict[str, Any], cpu_run: dict[str, Any]) -> None:
    assert (cpu_run["backend"], cpu_run["device"]) == ("cpu", "cpu")
    assert cpu_run["versions"]["torch"] == xla_run["versions"]["torch"]  # same torch: a fair comparison
    for step, (x, c) in enumerate(zip(xla_run["losses"], cpu_run["losses"], strict=True)):
        assert x == pytest.approx(c, rel=RTOL), f"step {step}: xla {x} vs cpu {c}"


def test_trains_compiled_on_xla(compiled_profiled_run: dict[str, Any], xla_run: dict[str, Any]) -> None:
    r = compiled_profiled_run
    assert (r["backend"], r["device"], r["compile"]) == ("xla", "xla:0", True)
    assert falls(r["losses"]), r["losses"]
    assert r["losses"] == pytest.approx(xla_run["losses"], rel=RTOL)  # openxla runs the same math


def test_profile_writes_xplane(compiled_profiled_run: dict[str, Any]) -> None:
    files = [Path(f) for f in compiled_profiled_run["profile_files"]]
    assert files and all(f.is_file() for f in files)
    assert all(Path(compiled_profiled_run["trace_dir"]) in f.parents for f in files)
    xplane = [f for f in files if f.name.endswith(".xplane.pb")]
    assert len(xplane) == 1 and xplane[0].stat().st_size > 0
    assert b"train_step" in xplane[0].read_bytes()  # one xp.StepTrace per ad.step()
    assert any(f.name.endswith(".trace.json.gz") for f in files)
    assert "torch_xla.debug.profiler" in compiled_profiled_run["stderr"]


def test_pjrt_device_is_left_as_the_user_set_it() -> None:
    script = "import os, anydevice as ad; ad.use('xla'); print(os.environ['PJRT_DEVICE'], ad.device())"
    env = child_env({"PJRT_DEVICE": "cpu", "ANYDEVICE_QUIET": "1"})
    done = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["CPU", "xla:0"]  # kept, upper-cased: torch_xla rejects "cpu"


@pytest.mark.skipif(os.path.exists("/dev/vfio"), reason="this machine may have a TPU")
def test_pjrt_tpu_without_a_tpu_fails_clearly() -> None:
    env = child_env({"ANYDEVICE": "xla", "PJRT_DEVICE": "TPU"})
    done = subprocess.run([sys.executable, "-m", "anydevice", "info"], env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode != 0
    out = done.stdout + done.stderr
    assert "PJRT_DEVICE=TPU is set but this machine has no TPU chip" in out and "unset PJRT_DEVICE" in out
    assert "Traceback" not in out


def test_a_multi_process_launch_is_refused_clearly() -> None:
    """PJRT CPU gives every rank world size 1 under torchrun: anydevice refuses before launching."""
    env = child_env({"ANYDEVICE": "xla"})
    args = [sys.executable, "-m", "anydevice", "run", "-n", "2", str(TRAIN), "--steps", "2"]
    done = subprocess.run(args, env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode != 0
    assert "runs one process, but 2 were requested" in done.stderr and "ANYDEVICE=cpu" in done.stderr
    assert "Traceback" not in done.stderr and not done.stdout.strip()
