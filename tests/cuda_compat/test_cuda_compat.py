"""CUDA-written scripts run unmodified on cpu under cuda-compat, with the hand-edited script's losses.

Real subprocesses (``anydevice run`` and ``python``), no mocks: each CUDA-only script in ``scripts/``
sits beside the same script edited by hand for the target device, and their losses must be equal.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from tests.distributed.helpers import Result, anydevice_run, python

SCRIPTS = Path(__file__).parent / "scripts"
LOUD = {"ANYDEVICE_QUIET": ""}  # the helper silences anydevice's own lines; these tests read them


def last_json(result: Result) -> dict[str, Any]:
    assert result.returncode == 0, result.stderr[-3000:]
    row: dict[str, Any] = json.loads(result.stdout.strip().splitlines()[-1])
    return row


def test_tutorial_runs_unmodified_with_anydevice_run_cuda_compat() -> None:
    compat = anydevice_run("--cuda-compat", SCRIPTS / "tutorial.py", **LOUD)
    by_hand = python(SCRIPTS / "tutorial_cpu.py")
    got, want = last_json(compat), last_json(by_hand)
    assert got["device"] == "cpu"
    assert got["losses"] == want["losses"]  # same ops on the same device: equal, not close
    assert got["losses"][-1] < got["losses"][0]
    reports = [line for line in compat.stderr.splitlines() if line.startswith("anydevice: cuda-compat: CUDA calls run on cpu")]
    assert len(reports) == 1 and "init_process_group('nccl') -> 'gloo'" in reports[0]
    # torch.cuda.max_memory_allocated() has no CPU answer: one warning naming it, and the script goes on
    warned = [line for line in compat.stderr.splitlines() if "CudaCompatWarning" in line]
    assert len(warned) == 1 and "torch.cuda.max_memory_allocated()" in warned[0] and "returns 0" in warned[0]
    assert "peak memory: 0.0 MiB" in compat.stdout


def test_tutorial_fails_without_cuda_compat() -> None:
    plain = anydevice_run(SCRIPTS / "tutorial.py")
    assert plain.returncode != 0 and "this tutorial needs a GPU" in plain.stderr


def test_environment_variable_and_first_import() -> None:
    code = f"import anydevice.cuda_compat, runpy; runpy.run_path({str(SCRIPTS / 'tutorial.py')!r}, run_name='__main__')"
    compat = python("-c", code, ANYDEVICE_CUDA_COMPAT="1")
    by_hand = python(SCRIPTS / "tutorial_cpu.py")
    assert last_json(compat)["losses"] == last_json(by_hand)["losses"]


def test_off_by_default_torch_untouched() -> None:
    code = (
        "import torch; before = (torch.Tensor.cuda, torch.zeros, torch.cuda.is_available, torch.autocast.__init__)\n"
        "import anydevice.cuda_compat as cc\n"
        "after = (torch.Tensor.cuda, torch.zeros, torch.cuda.is_available, torch.autocast.__init__)\n"
        "print(cc.enabled(), all(a is b for a, b in zip(before, after)), torch.cuda.is_available())"
    )
    off = python("-c", code, **LOUD)
    assert off.returncode == 0, off.stderr
    assert off.stdout.split() == ["False", "True", "False"]
    assert "cuda-compat is off" in off.stderr


def test_ddp_nccl_script_runs_on_two_cpu_processes_with_gloo() -> None:
    compat = anydevice_run("-n", "2", "--cuda-compat", SCRIPTS / "ddp_nccl.py", timeout=300)
    by_hand = anydevice_run("-n", "2", SCRIPTS / "ddp_gloo.py", timeout=300)
    assert compat.returncode == 0, compat.stderr[-3000:]
    assert by_hand.returncode == 0, by_hand.stderr[-3000:]
    got, want = compat.by_rank(), by_hand.by_rank()
    assert sorted(got) == [0, 1]
    for rank in (0, 1):
        assert got[rank]["backend"] == "gloo"
        assert got[rank]["losses"] == want[rank]["losses"]
    assert got[0]["losses"] != got[1]["losses"]  # each rank saw its own data ...
    assert got[0]["weights"] == got[1]["weights"] == want[0]["weights"]  # ... and DDP kept the replicas equal


def test_in_process_enable_disable_and_unmapped_call_warns_once() -> None:
    import torch

    import anydevice as ad
    from anydevice import cuda_compat
    from anydevice.shims.cuda_redirect import CudaCompatWarning

    ad.use("cpu")
    originals = (torch.Tensor.cuda, torch.Tensor.to, torch.nn.Module.to, torch.zeros, torch.cuda.is_available)
    assert cuda_compat.enable() is True
    try:
        assert torch.cuda.is_available() and torch.cuda.device_count() == 1
        x = torch.ones(2, device="cuda:0")
        assert x.device.type == "cpu" and torch.ones(1).cuda().device.type == "cpu"
        assert torch.nn.Linear(2, 2).cuda().weight.device.type == "cpu"
        assert torch.zeros(1).to(torch.device("cuda")).device.type == "cpu"
        with torch.autocast("cuda"):
            assert torch.is_autocast_enabled("cuda")
            assert (torch.ones(2, 2) @ torch.ones(2, 2)).dtype == torch.bfloat16
        with pytest.warns(CudaCompatWarning, match=r"torch.cuda.get_device_capability has no equivalent on cpu"):
            with pytest.raises(ad.errors.UnsupportedDeviceFunctionError, match=r"get_device_properties\(\).major"):
                torch.cuda.get_device_capability()  # CUDA's own function, which asks for what cpu lacks
        with pytest.raises(ad.errors.UnsupportedDeviceFunctionError):  # no second warning (filterwarnings=error)
            torch.cuda.get_device_capability()
    finally:
        cuda_compat.disable()
    assert (torch.Tensor.cuda, torch.Tensor.to, torch.nn.Module.to, torch.zeros, torch.cuda.is_available) == originals
    assert not torch.cuda.is_available()


def test_cuda_compat_is_importable_without_side_effects_on_anydevice_import() -> None:
    done = python("-c", "import anydevice, sys; print('torch' in sys.modules)")
    assert done.stdout.strip() == "False", done.stderr
