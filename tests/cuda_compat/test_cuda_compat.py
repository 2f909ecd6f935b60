"""CUDA-written scripts run unmodified on cpu under cuda-compat, with the hand-ported script's losses.

Real subprocesses (``anydevice run``, ``python`` with ``ANYDEVICE_CUDA_COMPAT=1`` and nothing else),
no mocks: each CUDA-only script in ``scripts/`` sits beside the same script ported by hand, and their
fp32 losses agree within 1e-5. The in-process tests check the redirect's contract directly.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import torch

from tests.cuda_compat.gpu_checkpoint import gpt_state, save_as_gpu
from tests.distributed.helpers import Result, anydevice_run, python
from tests.utils import free_port

pytestmark = pytest.mark.torch_version_sensitive  # docs/architecture.md, "Which tests the core lanes run"

SCRIPTS = Path(__file__).parent / "scripts"
LOUD = {"ANYDEVICE_QUIET": ""}  # the helper silences anydevice's own lines; these tests read them
DRIVER_ERRORS = ("CUDA driver", "Torch not compiled with CUDA", "Found no NVIDIA driver", "Cannot access accelerator")


def last_json(result: Result) -> dict[str, Any]:
    assert result.returncode == 0, result.stderr[-3000:]
    row: dict[str, Any] = json.loads(result.stdout.strip().splitlines()[-1])
    return row


def assert_close(got: list[float], want: list[float], tol: float = 1e-5) -> None:
    assert len(got) == len(want) and got, (got, want)
    assert all(abs(a - b) <= tol for a, b in zip(got, want)), (got, want)


def assert_no_raw_cuda_error(result: Result) -> None:
    for text in DRIVER_ERRORS:
        assert text not in result.stderr, result.stderr[-3000:]


def test_gpt_script_runs_unmodified_with_anydevice_run_cuda_compat(tmp_path: Path) -> None:
    checkpoint = save_as_gpu(gpt_state(), tmp_path / "gpu.pt")
    report = tmp_path / "report.json"
    compat = anydevice_run(
        "--cuda-compat", SCRIPTS / "gpt_cuda.py", f"--init={checkpoint}", ANYDEVICE_CUDA_COMPAT_REPORT=str(report), **LOUD
    )
    by_hand = python(SCRIPTS / "gpt_port.py", "--device=cpu", f"--init={checkpoint}")
    got, want = last_json(compat), last_json(by_hand)
    assert got["device"] == "cpu" and got["elapsed_ms"] > 0
    assert_close(got["losses"], want["losses"])
    assert got["losses"][-1] < got["losses"][0]
    assert_no_raw_cuda_error(compat)
    assert "anydevice: cuda-compat is active: CUDA calls run on cpu" in compat.stderr
    assert compat.stderr.count("anydevice: cuda-compat report (cpu)") == 1  # one block, at exit
    assert compat.stderr.count("anydevice: cuda-compat: cpu has no pinned host memory") == 1  # one notice for all calls
    calls = {row["call"]: row for row in json.loads(report.read_text())["calls"]}
    assert calls["Tensor.pin_memory()"]["kind"] == "answered neutrally"
    assert calls["torch.load(<GPU checkpoint>)"]["kind"] == "redirected"
    assert calls["torch.cuda.max_memory_allocated()"]["outcome"].startswith("0 ")
    assert calls["torch.cuda.is_bf16_supported()"]["kind"] == "redirected"
    assert "torch.optim.AdamW(fused=True)" not in calls  # torch has a fused AdamW for cpu: kept


def test_environment_variable_alone_runs_an_unmodified_script(tmp_path: Path) -> None:
    report = tmp_path / "report.json"
    compat = python(SCRIPTS / "loader_cuda.py", ANYDEVICE_CUDA_COMPAT="1", ANYDEVICE_CUDA_COMPAT_REPORT=str(report))
    by_hand = python(SCRIPTS / "loader_port.py", "--device=cpu")
    got, want = last_json(compat), last_json(by_hand)
    assert got["device"] == got["reported"] == "cpu"  # torch.accelerator: no accelerator on cpu, as torch says
    assert_close(got["losses"], want["losses"])
    assert_no_raw_cuda_error(compat)
    calls = {row["call"]: row["kind"] for row in json.loads(report.read_text())["calls"]}
    assert calls["DataLoader(pin_memory=True)"] == "answered neutrally"
    assert "torch.accelerator.current_accelerator()" not in calls  # torch's own answer on a host device
    assert calls["GradScaler('cuda')"] == "redirected" and calls["Tensor.cuda()"] == "redirected"


GLOO_EXIT_ABORT = "terminate called without an active exception"
"""torch >= 2.13's gloo teardown at the exit of a process whose DDP model outlives its group (docs/distributed.md,
``shutdown()``): the by-hand script with no anydevice in it ends so too. A 15-line mp.spawn + gloo + DDP script
of plain torch aborted at exit in 9 of 25 runs on torch 2.13, 2 of 6 on 2.15, 0 of 12 on 2.9."""


def assert_spawned_ranks_ended_well(run: Result) -> None:
    """Exit status 0, or torch's own gloo abort at exit after every rank printed its result (nothing else)."""
    if run.returncode != 0:
        assert GLOO_EXIT_ABORT in run.stderr and sorted(run.by_rank()) == [0, 1], run.stderr[-3000:]


@pytest.mark.slow
def test_mp_spawn_children_are_redirected_too() -> None:
    compat = python(SCRIPTS / "loader_cuda.py", "--spawn=2", f"--port={free_port()}", ANYDEVICE_CUDA_COMPAT="1", timeout=300)
    by_hand = python(SCRIPTS / "loader_port.py", "--device=cpu", "--spawn=2", f"--port={free_port()}", timeout=300)
    assert_spawned_ranks_ended_well(compat)
    assert_spawned_ranks_ended_well(by_hand)
    got, want = compat.by_rank(), by_hand.by_rank()
    assert sorted(got) == [0, 1]
    for rank in (0, 1):
        assert_close(got[rank]["losses"], want[rank]["losses"])
    assert got[0]["losses"] != got[1]["losses"]


@pytest.mark.slow
def test_gpt_script_ddp_nccl_on_two_cpu_processes() -> None:
    compat = anydevice_run("-n", "2", "--cuda-compat", SCRIPTS / "gpt_cuda.py", timeout=300)
    by_hand = anydevice_run("-n", "2", SCRIPTS / "gpt_port.py", "--device=cpu", timeout=300)
    assert compat.returncode == 0, compat.stderr[-3000:]
    got, want = compat.by_rank(), by_hand.by_rank()
    assert sorted(got) == [0, 1]
    for rank in (0, 1):
        assert_close(got[rank]["losses"], want[rank]["losses"])


@pytest.mark.slow
def test_gpt_script_with_torch_compile() -> None:
    compat = anydevice_run("--cuda-compat", SCRIPTS / "gpt_cuda.py", "--compile=1", "--steps=3", timeout=600)
    by_hand = python(SCRIPTS / "gpt_port.py", "--device=cpu", "--compile=1", "--steps=3", timeout=600)
    assert_close(last_json(compat)["losses"], last_json(by_hand)["losses"])


def test_tutorial_fails_without_cuda_compat() -> None:
    plain = anydevice_run(SCRIPTS / "tutorial.py")
    assert plain.returncode != 0 and "this tutorial needs a GPU" in plain.stderr


def test_off_by_default_torch_untouched() -> None:
    code = (
        "import sys, torch; print('anydevice' in sys.modules, torch.cuda.is_available())\n"
        "before = (torch.Tensor.cuda, torch.zeros, torch.cuda.is_available, torch.autocast.__init__)\n"
        "import anydevice.cuda_compat as cc\n"
        "after = (torch.Tensor.cuda, torch.zeros, torch.cuda.is_available, torch.autocast.__init__)\n"
        "print(cc.enabled(), all(a is b for a, b in zip(before, after)))"
    )
    off = python("-c", code, **LOUD)
    assert off.returncode == 0, off.stderr
    assert off.stdout.split() == ["False", "False", "False", "True"]  # the start-up hook imported nothing
    assert "cuda-compat is off" in off.stderr


def test_ddp_nccl_script_runs_on_two_cpu_processes_with_gloo() -> None:
    compat = anydevice_run("-n", "2", "--cuda-compat", SCRIPTS / "ddp_nccl.py", timeout=300)
    by_hand = anydevice_run("-n", "2", SCRIPTS / "ddp_gloo.py", timeout=300)
    assert compat.returncode == 0, compat.stderr[-3000:]
    got, want = compat.by_rank(), by_hand.by_rank()
    for rank in (0, 1):
        assert got[rank]["backend"] == "gloo"
        assert got[rank]["losses"] == want[rank]["losses"]
    assert got[0]["weights"] == got[1]["weights"] == want[0]["weights"]


def test_tensor_parallel_with_a_cuda_device_mesh_on_two_cpu_processes() -> None:
    """pytorch/examples' tensor-parallel idiom: init_device_mesh("cuda"), ColwiseParallel/RowwiseParallel, DTensor."""
    compat = anydevice_run("-n", "2", "--cuda-compat", SCRIPTS / "tp_cuda.py", timeout=300, TP_DEVICE="cuda")
    plain = anydevice_run("-n", "2", SCRIPTS / "tp_cuda.py", timeout=300)  # the same program, "cpu" mesh, no compat
    assert compat.returncode == 0, compat.stderr[-3000:]
    got, want = compat.by_rank(), plain.by_rank()
    assert sorted(got) == [0, 1]
    for rank in (0, 1):
        assert got[rank]["mesh"] == want[rank]["mesh"] == "cpu"
        assert got[rank]["losses"] == want[rank]["losses"]
    assert "_cuda_setDevice" not in compat.stderr


@pytest.fixture
def compat() -> Any:
    import anydevice as ad
    from anydevice import cuda_compat

    ad.use("cpu")
    assert cuda_compat.enable() is True
    yield cuda_compat
    cuda_compat.disable()


def test_torch_internals_hold_the_real_torch_and_the_script_a_view(compat: Any) -> None:
    import sys

    real = sys.modules["torch"]
    assert torch is not real and torch.cuda is not real.cuda  # this test module was rebound at enable
    internal: dict[str, Any] = {"__name__": "torch.optim.optimizer"}
    exec("import torch\nanswers = (torch.cuda.is_available(), torch.cuda.device_count())", internal)
    assert internal["torch"] is real and internal["answers"] == (False, 0)  # torch's own code: untouched, the truth
    script: dict[str, Any] = {"__name__": "__main__"}
    exec("import torch\nfrom torch.cuda import is_available\nanswers = (is_available(), torch.cuda.device_count())", script)
    assert script["torch"] is torch and script["answers"] == (True, 1)
    assert (torch.cuda.is_available(), torch.cuda.device_count(), torch.cuda.is_current_stream_capturing()) == (True, 1, False)
    assert torch.accelerator.current_accelerator() == real.accelerator.current_accelerator()  # cpu selected: torch's own answer
    model = torch.nn.Linear(4, 4).cuda()
    opt = torch.optim.Adam(model.parameters())
    model(torch.randn(2, 4, device="cuda")).sum().backward()
    opt.step()  # Adam's CUDA-graph health check asks torch.cuda as torch's own code: no CUDA path
    assert model.weight.device.type == "cpu"


def test_no_torch_cuda_name_reaches_cuda(compat: Any) -> None:
    from anydevice.cuda_compat.torch_cuda import _cuda_names
    from anydevice.errors import UnsupportedDeviceFunctionError

    for name in _cuda_names():
        value = getattr(torch.cuda, name)  # the script's view (this module was rebound at enable)
        try:
            value() if not isinstance(value, type) else None
        except (UnsupportedDeviceFunctionError, TypeError):
            pass  # refused by name, or needs arguments
        except Exception as exc:
            raise AssertionError(f"torch.cuda.{name}() reached CUDA: {exc!r}") from exc
    with pytest.raises(UnsupportedDeviceFunctionError, match=r"torch.cuda.graph_pool_handle\(\) is not available on cpu"):
        torch.cuda.graph_pool_handle()
    assert torch.cuda.get_device_capability() == (0, 0)  # selects no CUDA-only path (test_truthful_answers.py)
    assert torch.cuda.is_bf16_supported() and torch.cuda.get_arch_list() == []
    assert torch.cuda.make_graphed_callables(len, ()) is len


def test_types_stay_types(compat: Any) -> None:
    for name in ("Event", "Stream", "StreamContext", "device", "device_of", "FloatTensor", "LongTensor", "CUDAGraph"):
        assert isinstance(getattr(torch.cuda, name), type), name
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    torch.randn(64, 64) @ torch.randn(64, 64)
    end.record()
    end.synchronize()
    assert isinstance(end, torch.cuda.Event) and start.elapsed_time(end) >= 0.0
    side = torch.cuda.Stream()
    with torch.cuda.stream(side), torch.cuda.device(0):  # an apex/imagenet-style prefetcher
        assert torch.cuda.current_stream() == torch.cuda.default_stream()
        batch = torch.ones(2).cuda(non_blocking=True)
    torch.cuda.current_stream().wait_stream(side)
    batch.record_stream(torch.cuda.current_stream())
    g = torch.Generator(device="cuda").manual_seed(0)
    assert isinstance(g, torch.Generator) and isinstance(torch.default_generator, torch.Generator)
    assert torch.equal(torch.randn(3, generator=g, device="cuda"), torch.randn(3, generator=torch.Generator().manual_seed(0)))
    legacy = torch.cuda.FloatTensor(3)
    assert isinstance(legacy, torch.cuda.FloatTensor) and legacy.device.type == "cpu"
    assert not isinstance(torch.zeros(2, dtype=torch.long), torch.cuda.FloatTensor)


def test_gpu_checkpoint_loads_without_map_location(compat: Any, tmp_path: Path) -> None:
    state = gpt_state()
    path = save_as_gpu(state, tmp_path / "gpu.pt")
    loaded = torch.load(path)
    assert all(loaded[k].device.type == "cpu" and torch.equal(loaded[k], v) for k, v in state.items())
    assert torch.equal(torch.load(path, map_location="cuda")["head.bias"], state["head.bias"])
    by_storage = torch.load(path, map_location=lambda storage, loc: storage.cuda())  # imagenet-style resume
    assert torch.equal(by_storage["emb.weight"], state["emb.weight"])


def test_pin_memory_and_fused_optimizer(compat: Any) -> None:
    x = torch.ones(3)
    assert x.pin_memory() is x and not x.is_pinned()
    loader = torch.utils.data.DataLoader(torch.utils.data.TensorDataset(torch.ones(4, 2)), batch_size=2, pin_memory=True)
    assert loader.pin_memory is False and len(list(loader)) == 2
    opt = torch.optim.AdamW([torch.nn.Parameter(torch.ones(2))], fused=True)
    assert opt.defaults["fused"]  # torch has a fused AdamW for cpu tensors: kept


def test_disable_restores_torch() -> None:
    import anydevice as ad
    from anydevice import cuda_compat

    ad.use("cpu")
    import sys

    names = ("is_available", "Event", "device", "get_device_capability", "FloatTensor")
    before = [getattr(torch.cuda, n) for n in names] + [torch.Tensor.to, torch.load, torch.utils.data.DataLoader.__init__]
    cuda_compat.enable()
    assert torch.cuda.is_available()  # this module holds the view while enabled
    cuda_compat.disable()
    after = [getattr(torch.cuda, n) for n in names] + [torch.Tensor.to, torch.load, torch.utils.data.DataLoader.__init__]
    assert all(a is b for a, b in zip(before, after))
    assert torch is sys.modules["torch"] and not torch.cuda.is_available()


def test_cuda_compat_is_importable_without_side_effects_on_anydevice_import() -> None:
    done = python("-c", "import anydevice, sys; print('torch' in sys.modules)")
    assert done.stdout.strip() == "False", done.stderr
