"""The public API on ``xla``, for real: torch_xla 2.9 on the PJRT CPU runtime, in this process.

Runs in the XLA lane (``PJRT_DEVICE=CPU pytest -m xla tests/xla``). Nothing is mocked.
"""

from __future__ import annotations

import gzip
import json
from collections.abc import Iterator
from pathlib import Path

import pytest

import anydevice as ad
from anydevice.errors import DeviceUnavailableError, UnsupportedFeatureError
from anydevice.shims.contracts import Collectives, Compilation, MemoryStats, Placement, Profiling
from tests.utils import python

pytestmark = [pytest.mark.torch_version_sensitive, pytest.mark.xla]

torch = pytest.importorskip("torch")
pytest.importorskip("torch_xla")


@pytest.fixture(autouse=True)
def on_xla(clean_anydevice: None, monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    monkeypatch.setenv("PJRT_DEVICE", "CPU")  # the lane's value; the plugin must respect it
    ad.use("xla")
    yield
    ad.distributed.shutdown()


def executions() -> int:
    """How many XLA graphs this process has executed (torch_xla's own metric)."""
    import torch_xla.debug.metrics as met

    data = met.metric_data("ExecuteTime")
    return int(data[0]) if data else 0


def test_backend_and_shims() -> None:
    b = ad.backend()
    assert (b.name, b.plugin, b.device_type, b.count, b.chip) == ("xla", "xla", "xla", 1, "PJRT CPU")
    assert b.versions["torch"].startswith("2.9") and b.versions["torch_xla"].startswith("2.9")
    d = b.as_dict()
    assert (d["device"], d["compile_backend"], d["dist_backend"]) == ("xla:0", "openxla", "xla")
    shims = b.shims
    assert isinstance(shims.placement, Placement) and isinstance(shims.compilation, Compilation)
    assert isinstance(shims.collectives, Collectives) and isinstance(shims.profiling, Profiling)
    import os

    assert os.environ["PJRT_DEVICE"] == "CPU"


def test_device_and_to() -> None:
    assert ad.device() == torch.device("xla", 0)
    model = ad.to(torch.nn.Linear(4, 2))
    assert all(p.device.type == "xla" for p in model.parameters())
    batch = ad.to({"x": torch.ones(2, 4), "rest": [torch.zeros(1), (torch.arange(3), "label")]})
    assert batch["x"].device.type == "xla" and batch["rest"][1][0].device.type == "xla"
    assert batch["rest"][1][1] == "label"
    assert torch.equal(model(batch["x"]).cpu(), model.cpu()(torch.ones(2, 4)))


def test_step_runs_the_pending_graph() -> None:
    x = ad.to(torch.arange(6.0))
    ad.step()
    before = executions()
    y = (x * 2 + 1).sum()  # traced, not run
    assert executions() == before
    ad.step()  # torch_xla.sync(): cuts and launches the graph
    ad.synchronize()
    assert executions() == before + 1
    assert y.item() == 36.0
    assert executions() == before + 1  # the value was already computed: no second execution


def test_autocast_is_bf16() -> None:
    a, b = ad.to(torch.randn(4, 4)), ad.to(torch.randn(4, 4))
    with ad.autocast():
        assert (a @ b).dtype == torch.bfloat16
    with ad.autocast(enabled=False):
        assert (a @ b).dtype == torch.float32


def test_manual_seed_repeats_device_randomness() -> None:
    ad.manual_seed(123)
    first = torch.randn(5, device=ad.device()).cpu()
    ad.manual_seed(123)
    again = torch.randn(5, device=ad.device()).cpu()
    ad.manual_seed(124)
    other = torch.randn(5, device=ad.device()).cpu()
    assert torch.equal(first, again) and not torch.equal(first, other)


def test_memory_stats_say_why_they_are_empty() -> None:
    stats = ad.memory_stats()
    assert isinstance(stats, MemoryStats) and dict(stats) == {}
    assert stats.reason and "PJRT CPU" in stats.reason and "GetAllocatorStats" in stats.reason


def test_data_loader_prefetches_onto_the_device() -> None:
    data = torch.utils.data.TensorDataset(torch.arange(20.0).reshape(10, 2), torch.arange(10))
    loader = torch.utils.data.DataLoader(data, batch_size=4)
    wrapped = ad.data_loader(loader)
    assert type(wrapped).__name__ == "MpDeviceLoader" and len(wrapped) == 3
    got = list(wrapped)
    assert [x.device.type for x, _ in got] == ["xla"] * 3
    for (x, y), (cx, cy) in zip(got, loader):
        assert torch.equal(x.cpu(), cx) and torch.equal(y.cpu(), cy)


def test_save_on_xla_loads_on_cpu_identically(tmp_path: Path) -> None:
    ad.manual_seed(0)
    model = ad.to(torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.ReLU(), torch.nn.Linear(8, 2)))
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
    model(ad.to(torch.randn(3, 8))).sum().backward()
    opt.step()
    ad.step()
    state = {"model": model.state_dict(), "optimizer": opt.state_dict(), "step": 1}
    path = tmp_path / "ckpt" / "state.pt"
    ad.save(state, path)
    assert [p.name for p in path.parent.iterdir()] == ["state.pt"]  # atomic: no temporary left behind
    expected = {k: v.cpu() for k, v in model.state_dict().items()}
    loaded = ad.load(path)
    assert loaded["step"] == 1 and loaded["optimizer"]["state"][0]["step"].device.type == "cpu"
    for name, value in expected.items():
        assert loaded["model"][name].device.type == "cpu" and torch.equal(loaded["model"][name], value)
    # A fresh process on the cpu device reads it without ever importing torch_xla.
    torch.save(expected, tmp_path / "expected.pt")
    check = (
        "import sys, torch, anydevice as ad\n"
        f"s, e = ad.load(r'{path}'), torch.load(r'{tmp_path / 'expected.pt'}')\n"
        "assert ad.device().type == 'cpu'\n"
        "assert all(torch.equal(s['model'][k], e[k]) for k in e), 'values differ'\n"
        "print('torch_xla' in sys.modules, len(e))\n"
    )
    done = python("-c", check, env={"ANYDEVICE": "cpu", "ANYDEVICE_QUIET": "1"}, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["False", str(len(expected))]


def test_compile_uses_openxla() -> None:
    ad.manual_seed(0)
    model = ad.to(torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.GELU()))
    x = ad.to(torch.randn(2, 4))
    compiled = ad.compile(model)
    assert torch.allclose(compiled(x).cpu(), model(x).cpu(), atol=1e-6)
    assert ad.backend().shims.compilation.cache_dir() is None  # PJRT CPU: the persistent cache is off


def test_distributed_world_of_one_on_the_xla_backend() -> None:
    import torch.distributed as dist

    ad.distributed.init()
    assert dist.get_backend() == "xla"
    assert (ad.distributed.world_size(), ad.distributed.rank(), ad.distributed.is_main()) == (1, 0, True)
    t = ad.to(torch.tensor([1.0, 2.0, 3.0]))
    assert ad.distributed.all_reduce(t) is t
    assert torch.equal(t.cpu(), torch.tensor([1.0, 2.0, 3.0]))  # a sum over one rank
    assert torch.equal(ad.distributed.all_gather(t).cpu(), torch.tensor([[1.0, 2.0, 3.0]]))
    assert torch.equal(ad.distributed.broadcast(t, src=0).cpu(), torch.tensor([1.0, 2.0, 3.0]))
    ad.distributed.barrier()
    ddp = ad.distributed.wrap(ad.to(torch.nn.Linear(3, 1)), "ddp")
    assert type(ddp).__name__ == "DistributedDataParallel" and ddp.gradient_as_bucket_view
    ddp(t.unsqueeze(0)).sum().backward()
    ad.step()
    assert all(p.grad is not None for p in ddp.parameters())
    with pytest.raises(UnsupportedFeatureError, match="FSDP2"):
        ad.distributed.wrap(ad.to(torch.nn.Linear(3, 1)), "fsdp")


def test_multi_process_is_refused_on_pjrt_cpu() -> None:
    """What `anydevice run` reads (DeviceSpec.launch, no shims needed) refuses a second process on PJRT CPU."""
    from anydevice.runtime.registry import get_registry

    launch = get_registry().get("xla").spec.launch
    assert launch.launcher_name() == "torchrun" and launch.rank_env(0, 1) == {}
    with pytest.raises(UnsupportedFeatureError, match="runs one process"):
        launch.rank_env(0, 2)


def test_profile_writes_xplane_with_step_traces(tmp_path: Path) -> None:
    w = ad.to(torch.randn(16, 16))
    with ad.profile(tmp_path / "trace", wait=1, active=2) as session:
        for _ in range(4):
            with ad.record("matmul"):
                y = (w @ w).relu().sum()
            ad.step()
    assert y.item() >= 0
    assert session.tool == "torch_xla.debug.profiler" and "XProf" in session.viewer
    xplane = [f for f in session.files if f.name.endswith(".xplane.pb")]
    assert len(xplane) == 1 and xplane[0].stat().st_size > 0
    chrome = next(f for f in session.files if f.name.endswith(".trace.json.gz"))
    events = json.loads(gzip.decompress(chrome.read_bytes()))["traceEvents"]
    names = [e.get("name") for e in events]
    assert names.count("train_step") == 2  # active=2 of the 4 steps, after wait=1
    assert "matmul" in names


def test_profile_rejects_options_it_has_not(tmp_path: Path) -> None:
    with pytest.raises(UnsupportedFeatureError, match="record_shapes"), ad.profile(tmp_path, record_shapes=True):
        pass


def test_a_conflicting_pjrt_device_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    from anydevice.shims.lazy_xla import XlaVendor, prepare_environment

    monkeypatch.setenv("PJRT_DEVICE", "CPU")
    with pytest.raises(DeviceUnavailableError, match="runs on PJRT_DEVICE=TPU but PJRT_DEVICE=CPU is set"):
        prepare_environment(XlaVendor(name="tpu", pjrt_device="TPU"))
    prepare_environment(XlaVendor(name="xla", pjrt_device="cpu"))  # same runtime, any case: fine
