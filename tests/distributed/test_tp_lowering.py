"""Plan checking and DTensor lowering in one process: 4 simulated ranks (LocalTensorMode + the fake backend)."""

from __future__ import annotations

import copy
from collections.abc import Iterator
from types import SimpleNamespace
from typing import Any, ClassVar

import pytest
import torch
import torch.distributed as dist
from torch import nn

import anydevice as ad
from anydevice.errors import DistributedError
from anydevice.shims import tp_plan

pytestmark = pytest.mark.torch_version_sensitive  # docs/architecture.md, "Which tests the core lanes run"


class MLP(nn.Module):
    tp_plan: ClassVar[dict[str, str]] = {"up": "colwise", "down": "rowwise"}

    def __init__(self, width: int = 8) -> None:
        super().__init__()
        self.up = nn.Linear(width, 16)
        self.down = nn.Linear(16, width)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out: torch.Tensor = self.down(torch.relu(self.up(x)))
        return out


@pytest.fixture
def four_fake_ranks() -> Iterator[None]:
    local_tensor = pytest.importorskip("torch.distributed._local_tensor")
    from torch.testing._internal.distributed.fake_pg import FakeStore

    dist.init_process_group("fake", store=FakeStore(), rank=0, world_size=4)
    try:
        with local_tensor.LocalTensorMode(4):
            yield
    finally:
        dist.destroy_process_group()


def test_plan_globs_expand_to_the_modules_they_name() -> None:
    model = nn.Sequential(MLP(), MLP())
    rules = tp_plan.expand(model, {"*.up": "colwise", "1.down": "rowwise"})
    assert [(r.name, r.style) for r in rules] == [("0.up", "colwise"), ("1.up", "colwise"), ("1.down", "rowwise")]


def test_auto_is_the_plan_the_model_class_declares() -> None:
    assert [r.name for r in tp_plan.expand(MLP(), "auto")] == ["up", "down"]
    with pytest.raises(DistributedError, match="declares no tensor-parallel plan"):
        tp_plan.expand(nn.Linear(2, 2), "auto")


def test_a_glob_matching_nothing_names_the_glob_and_the_closest_modules() -> None:
    model = nn.Sequential(MLP())
    with pytest.raises(DistributedError, match=r"'0\.upp' matches no module of Sequential") as caught:
        tp_plan.expand(model, {"0.upp": "colwise"})
    assert "Closest module names: 0.up" in str(caught.value)


def test_an_unknown_style_is_named_with_the_known_ones() -> None:
    with pytest.raises(DistributedError, match="Unknown tensor-parallel style 'colwize'") as caught:
        tp_plan.expand(MLP(), {"up": "colwize"})
    assert "did you mean colwise" in str(caught.value)


def test_degrees_resolve_minus_one_and_must_divide_the_world() -> None:
    assert tp_plan.degrees({"dp": -1, "tp": 2}, 8) == {"dp": 4, "tp": 2}
    with pytest.raises(DistributedError, match="does not divide the world size 3"):
        tp_plan.degrees({"dp": -1, "tp": 2}, 3)
    with pytest.raises(DistributedError, match="but the world size is 4"):
        tp_plan.degrees({"dp": 1, "tp": 2}, 4)
    with pytest.raises(DistributedError, match="at most one is -1"):
        tp_plan.degrees({"dp": -1, "tp": -1}, 4)


def test_a_dimension_the_tp_degree_does_not_divide_is_refused_before_any_process_group() -> None:
    model = MLP(width=6)
    with pytest.raises(DistributedError, match=r"down\.weight dimension 1 has size 16, not divisible") as caught:
        tp_plan.check_divisible(model, tp_plan.expand(model, {"down": "rowwise"}), 3)
    assert "tensor-parallel degree 3" in str(caught.value)
    assert not dist.is_initialized()


def test_a_non_linear_module_cannot_be_split() -> None:
    model = nn.Sequential(nn.LayerNorm(4))
    with pytest.raises(DistributedError, match=r"only nn\.Linear and nn\.Embedding are split"):
        tp_plan.check_divisible(model, tp_plan.expand(model, {"0": "colwise"}), 2)


@pytest.mark.usefixtures("four_fake_ranks")
def test_colwise_rowwise_lowers_to_sharded_dtensors_with_equal_output_and_grads() -> None:
    torch.manual_seed(0)
    reference, x = MLP(), torch.randn(4, 8)
    model = copy.deepcopy(reference)
    reference(x).sum().backward()
    mesh = ad.distributed.mesh({"tp": 4})
    assert ad.distributed.mesh_degrees(mesh) == {"tp": 4}
    model = ad.distributed.parallelize(model, mesh=mesh)
    assert ad.distributed.mesh_of(model) is mesh
    assert str(model.up.weight.placements) == "(Shard(dim=0),)" and model.up.weight.to_local().shape == (4, 8)
    assert str(model.down.weight.placements) == "(Shard(dim=1),)"
    out = model(x)
    out.sum().backward()
    assert float((out - reference(x)).detach().abs().max()) < 1e-6
    assert float((model.up.weight.grad.full_tensor() - reference.up.weight.grad).abs().max()) < 1e-6


@pytest.mark.usefixtures("four_fake_ranks")
def test_a_two_d_mesh_names_dp_and_tp_and_ddp_on_a_split_model_is_refused() -> None:
    mesh = ad.distributed.mesh({"dp": -1, "tp": 2})
    assert ad.distributed.mesh_degrees(mesh) == {"dp": 2, "tp": 2}
    model = ad.distributed.parallelize(MLP(), mesh=mesh)
    with pytest.raises(DistributedError, match="DDP cannot replicate tensor-parallel"):
        ad.distributed.wrap(model, "ddp")


def test_named_and_positional_meshes_cannot_mix() -> None:
    with pytest.raises(DistributedError, match="drop names="):
        ad.distributed.mesh({"tp": 1}, names=("tp",))


def test_the_lowering_is_the_collectives_declared_capability(monkeypatch: pytest.MonkeyPatch) -> None:
    from anydevice.errors import UnsupportedFeatureError
    from anydevice.plugins import neuron, xla
    from anydevice.shims.lazy_xla import XlaCollectives
    from anydevice.shims.tp_dtensor import DTensorParallel
    from anydevice.shims.tp_spmd import SpmdParallel

    assert ad.backend().shims.collectives.tensor_parallel == "dtensor"
    assert isinstance(ad.backend().shims.collectives.tensor_parallelism(), DTensorParallel)
    placement: Any = SimpleNamespace(device_type="xla")  # XlaPlacement would start torch_xla's runtime
    on_xla = XlaCollectives(xla.vendor(), placement)
    assert on_xla.tensor_parallel == "spmd" and isinstance(on_xla.tensor_parallelism(), SpmdParallel)
    legacy = XlaCollectives(neuron.xla_vendor(), placement)
    assert legacy.tensor_parallel == ""
    with pytest.raises(UnsupportedFeatureError, match="NeuronX Distributed"):
        legacy.tensor_parallelism()
    # SPMD is one process per host: a launched world of several is refused before torch_xla is touched.
    monkeypatch.setenv("WORLD_SIZE", "2")
    monkeypatch.setenv("RANK", "0")
    monkeypatch.setenv("MASTER_ADDR", "127.0.0.1")
    monkeypatch.setenv("MASTER_PORT", "29500")
    with pytest.raises(UnsupportedFeatureError, match="runs in one process that drives every device"):
        on_xla.tensor_parallelism().world()
