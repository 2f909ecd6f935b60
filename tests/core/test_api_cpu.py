"""The public API on cpu, for real."""

from __future__ import annotations

import json
from collections import namedtuple
from dataclasses import dataclass
from pathlib import Path

import pytest
import torch

import anydevice as ad
from anydevice.errors import CheckpointError, UnknownDeviceError, UnsupportedFeatureError
from anydevice.shims.contracts import (
    Collectives,
    Compilation,
    CudaShaped,
    Diagnostics,
    MemoryStats,
    Placement,
    Profiling,
    Shims,
)

pytestmark = pytest.mark.torch_version_sensitive  # docs/architecture.md, "Which tests the core lanes run"


def test_backend_describes_the_selection() -> None:
    b = ad.use("cpu")
    assert (b.name, b.plugin, b.device_type, b.count) == ("cpu", "cpu", "cpu", 1)
    assert b.versions["torch"] == torch.__version__
    d = b.as_dict()
    assert d["device"] == "cpu" and d["compile_backend"] == "inductor" and d["dist_backend"] == "gloo"
    assert ad.backend() is b


def test_cpu_shims_satisfy_the_contracts() -> None:
    shims = ad.use("cpu").shims
    assert isinstance(shims.placement, Placement)
    assert isinstance(shims.compilation, Compilation)
    assert isinstance(shims.collectives, Collectives)
    assert isinstance(shims.profiling, Profiling)
    assert shims.capability(Diagnostics) is shims.placement and shims.capability(CudaShaped) is shims.placement


def test_the_contract_defaults_make_a_working_device_from_its_type_alone() -> None:
    """The base classes with nothing overridden: what a new eager device gets for free (here torch's ``meta``)."""
    meta = Shims(Placement("meta"), Compilation("meta"), Collectives(Placement("meta")), Profiling("meta"))
    placement = meta.placement
    assert placement.device() == torch.device("meta", 0) and placement.device_count() == 0
    moved = placement.move({"w": torch.ones(2), "rest": [torch.zeros(1), 3]})
    assert moved["w"].device.type == "meta" and moved["rest"][0].device.type == "meta" and moved["rest"][1] == 3
    assert [b.device.type for b in placement.data_loader([torch.ones(1), torch.ones(1)])] == ["meta", "meta"]
    assert placement.autocast_dtype() == torch.bfloat16 and placement.memory_stats().reason
    assert meta.compilation.backend == "inductor" and meta.compilation.cache_dir() is None
    assert meta.collectives.backend == "gloo" and meta.collectives.mesh_device_type == "meta"
    assert meta.profiling.chip() is None and meta.profiling.peak_flops(torch.bfloat16) is None
    assert meta.capability(Diagnostics) is None and meta.capability(CudaShaped) is None
    with pytest.raises(UnsupportedFeatureError, match=r"'fullgraf', which torch\.compile does not have"):
        meta.compilation.compile(torch.nn.Linear(1, 1), fullgraf=True)


def test_use_wins_over_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ANYDEVICE", "tpuu")  # would fail if read
    assert ad.use("cpu").name == "cpu"
    assert ad.device() == torch.device("cpu")


def test_environment_wins_over_auto(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ANYDEVICE", "tpuu")
    with pytest.raises(UnknownDeviceError):
        ad.device()


def test_use_with_a_bad_name_keeps_the_previous_selection() -> None:
    ad.use("cpu")
    with pytest.raises(UnknownDeviceError):
        ad.use("cpux")
    assert ad.backend().name == "cpu"


Pair = namedtuple("Pair", "a b")


@dataclass
class Batch:
    x: torch.Tensor
    label: str


def test_to_moves_nested_containers_and_keeps_other_leaves() -> None:
    """Every tensor in the tree reaches the device: shown on torch's ``meta`` device, where a move is visible."""
    placement = Placement("meta")  # ad.to(x) is the selected placement's move(x)
    obj = {"t": torch.ones(2), "l": [torch.zeros(1), 3], "p": Pair(torch.ones(1), "s"), "d": Batch(torch.ones(1), "y")}
    moved = placement.move(obj)
    assert [moved["t"].device.type, moved["l"][0].device.type, moved["p"].a.device.type, moved["d"].x.device.type] == ["meta"] * 4
    assert moved["l"][1] == 3 and isinstance(moved["p"], Pair) and moved["p"].b == "s"
    assert isinstance(moved["d"], Batch) and moved["d"].label == "y"
    module = torch.nn.Linear(2, 2)
    assert placement.move(module) is module and next(module.parameters()).device.type == "meta"  # in place, like .to
    ad.use("cpu")
    t = torch.ones(2)
    assert ad.to({"t": t})["t"] is t  # already on the device: no copy


def test_manual_seed_makes_runs_repeatable() -> None:
    ad.use("cpu")
    ad.manual_seed(123)
    a = torch.randn(4)
    ad.manual_seed(123)
    assert torch.equal(a, torch.randn(4))


def test_autocast_uses_bf16_on_cpu() -> None:
    ad.use("cpu")
    with ad.autocast():
        out = torch.nn.functional.linear(torch.randn(2, 4), torch.randn(3, 4))
    assert out.dtype == torch.bfloat16
    with ad.autocast(enabled=False):
        assert torch.nn.functional.linear(torch.randn(2, 4), torch.randn(3, 4)).dtype == torch.float32


def test_step_on_an_eager_device_compiles_nothing() -> None:
    """Eager devices run each op as issued: ``ad.step()`` cuts no graph, so no compile is ever counted."""
    b = ad.use("cpu")
    x = torch.ones(3) * 2
    ad.step()
    ad.synchronize()
    assert b.compilations is None and torch.equal(x, torch.full((3,), 2.0))
    assert ad.fallback_ops() == {}


def test_step_calls_listeners() -> None:
    from anydevice.api import add_step_listener

    ad.use("cpu")
    calls: list[int] = []
    remove = add_step_listener(lambda: calls.append(1))
    ad.step()
    ad.step()
    remove()
    ad.step()
    assert calls == [1, 1]


def test_memory_stats_on_cpu_is_empty_with_a_reason() -> None:
    ad.use("cpu")
    stats = ad.memory_stats()
    assert isinstance(stats, MemoryStats) and dict(stats) == {}
    assert stats.reason and "cpu" in stats.reason


def test_data_loader_prefetches_every_batch_in_order() -> None:
    ad.use("cpu")
    data = torch.arange(10.0).reshape(5, 2)
    loader = torch.utils.data.DataLoader(torch.utils.data.TensorDataset(data), batch_size=2)
    wrapped = ad.data_loader(loader)
    batches = [b[0] for b in wrapped]
    assert len(wrapped) == 3  # type: ignore[arg-type]
    assert torch.equal(torch.cat(batches), data)
    assert all(b.device == ad.device() for b in batches)
    assert list(ad.data_loader([])) == []


def test_save_and_load_roundtrip(tmp_path: Path) -> None:
    ad.use("cpu")
    state = {"w": torch.randn(3, 3), "step": 7, "nested": [torch.arange(4)]}
    ad.save(state, tmp_path / "ckpt" / "state.pt")
    loaded = ad.load(tmp_path / "ckpt" / "state.pt")
    assert torch.equal(loaded["w"], state["w"]) and loaded["step"] == 7 and torch.equal(loaded["nested"][0], torch.arange(4))
    assert [p.name for p in (tmp_path / "ckpt").iterdir()] == ["state.pt"]  # no temporary files left


def test_failed_save_keeps_the_previous_checkpoint(tmp_path: Path) -> None:
    ad.use("cpu")
    path = tmp_path / "state.pt"
    ad.save({"v": torch.ones(2)}, path)

    class Unpicklable:
        def __reduce__(self) -> object:
            raise RuntimeError("crash mid-write")

    with pytest.raises(CheckpointError, match=r"^Cannot save .*state\.pt: RuntimeError: crash mid-write$"):
        ad.save({"v": torch.zeros(2), "bad": Unpicklable()}, path)
    assert torch.equal(ad.load(path)["v"], torch.ones(2))
    assert [p.name for p in tmp_path.iterdir()] == ["state.pt"]


def test_compile_uses_inductor_and_matches_eager() -> None:
    ad.use("cpu")
    model = torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.ReLU())
    compiled = ad.compile(model)
    x = torch.randn(4, 8)
    torch.testing.assert_close(compiled(x), model(x))
    assert ad.backend().shims.compilation.cache_dir() is not None


def test_profile_writes_a_chrome_trace_with_annotations(tmp_path: Path) -> None:
    ad.use("cpu")
    with ad.profile(tmp_path / "trace") as session:
        with ad.record("my_region"):
            torch.randn(64, 64) @ torch.randn(64, 64)
    assert session.files and all(f.exists() for f in session.files)
    trace = json.loads(session.files[0].read_text())
    assert any(e.get("name") == "my_region" for e in trace["traceEvents"])
    assert "Perfetto" in session.viewer


def test_step_meter_on_cpu_has_no_mfu_and_says_why() -> None:
    ad.use("cpu")
    meter = ad.StepMeter(flops_per_step=1e9, tokens_per_step=100)
    for _ in range(3):
        torch.randn(32, 32) @ torch.randn(32, 32)
        meter.step()
    report = meter.report()
    assert report.timed_steps == 2 and report.tokens_per_s and report.tokens_per_s > 0
    assert report.mfu is None and "unknown" in report.mfu_note.lower()


def test_transformer_flops_helper_matches_torchs_flop_counter() -> None:
    """The formula against torch's own count of a real forward+backward: L layers of a projection and attention."""
    from torch.utils.flop_counter import FlopCounterMode

    layers, d, tokens = 3, 16, 8
    blocks = torch.nn.ModuleList(torch.nn.Linear(d, d, bias=False) for _ in range(layers))
    x = torch.randn(tokens, d, requires_grad=True)
    with FlopCounterMode(display=False) as counter:
        h = x
        for block in blocks:
            h = block(h)
            h = torch.softmax(h @ h.T / d**0.5, dim=-1) @ h  # scores and values over the whole context
        h.sum().backward()
    n_params = sum(p.numel() for p in blocks.parameters())
    assert ad.transformer_training_flops_per_token(n_params, layers, d, tokens) == counter.get_total_flops() / tokens


def test_distributed_single_process_does_the_obvious_thing() -> None:
    ad.use("cpu")
    dist = ad.distributed
    assert (dist.rank(), dist.world_size(), dist.local_rank(), dist.is_main()) == (0, 1, 0, True)
    t = torch.tensor([3.0])
    assert dist.all_reduce(t).item() == 3.0
    assert dist.all_gather(torch.tensor([1.0, 2.0])).tolist() == [[1.0, 2.0]]
    assert dist.broadcast(torch.tensor([5.0])).item() == 5.0
    dist.barrier()
    dist.shutdown()
    assert not dist.is_initialized()


def test_to_moves_modules_nested_in_containers_and_save_leaves_them_in_place(tmp_path: Path) -> None:
    model = torch.nn.Linear(2, 2)
    moved_model, y = Placement("meta").move((model, torch.ones(1, 2)))
    assert moved_model is model and next(model.parameters()).device.type == "meta" and y.device.type == "meta"
    ad.use("cpu")
    model, x = torch.nn.Linear(2, 2), torch.ones(1, 2)
    ad.save({"model": model}, tmp_path / "m.pt")
    assert next(model.parameters()).device == ad.device()  # saving copied it, did not move it
    loaded = ad.load(tmp_path / "m.pt", weights_only=False)
    torch.testing.assert_close(loaded["model"](x), model(x))
