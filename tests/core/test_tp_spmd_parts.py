"""Tensor parallelism on torch_xla SPMD (anydevice.shims.tp_spmd): the plain-Python parts, in the main lane.

Tested here: the partition specs a split weight gets, the mesh degrees read back from a mesh, the
one-process rule, the refusal of FSDP2 with the SPMD way to shard data, and the torch_xla import a
mesh or a split needs. The xla lane (tests/xla/) shards real models on a four-device PJRT CPU mesh.
"""

from __future__ import annotations

from importlib.util import find_spec
from types import SimpleNamespace

import pytest
import torch

from anydevice.errors import UnsupportedFeatureError
from anydevice.shims.tp_plan import Rule
from anydevice.shims.tp_spmd import SpmdParallel, _world_size, spec_for

needs_no_torch_xla = pytest.mark.skipif(find_spec("torch_xla") is not None, reason="torch_xla is installed here (the xla lane)")


@pytest.fixture
def launched_world_of_two(monkeypatch: pytest.MonkeyPatch) -> None:
    for name, value in {"WORLD_SIZE": "2", "RANK": "1", "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": "29500"}.items():
        monkeypatch.setenv(name, value)


def test_a_split_weight_is_sharded_on_tp_along_its_split_dim_and_replicated_elsewhere() -> None:
    linear = torch.zeros(8, 4)
    assert spec_for(linear, 0) == ("tp", None)  # colwise
    assert spec_for(linear, 1) == (None, "tp")  # rowwise
    assert spec_for(linear, None) == (None, None)  # replicated
    assert spec_for(torch.zeros(8), 0) == ("tp",)  # a colwise bias
    assert spec_for(torch.zeros(2, 3, 4), 2) == (None, None, "tp")


def test_mesh_degrees_are_read_back_by_axis_name_in_order() -> None:
    mesh = SimpleNamespace(axis_names=("dp", "tp"), mesh_shape=(2, 4))  # the two fields of an xs.Mesh it reads
    assert SpmdParallel("xla").degrees(mesh) == {"dp": 2, "tp": 4}
    with pytest.raises(ValueError):  # a mesh whose names and shape disagree is not silently truncated
        SpmdParallel("xla").degrees(SimpleNamespace(axis_names=("tp",), mesh_shape=(2, 2)))


def test_a_plain_python_process_is_a_world_of_one() -> None:
    assert _world_size() == 1
    lowering = SpmdParallel("tpu")
    assert (lowering.kind, lowering.local_shards, lowering.name) == ("spmd", False, "tpu")


@pytest.mark.usefixtures("launched_world_of_two")
def test_a_launched_process_of_several_is_refused_before_torch_xla_is_touched() -> None:
    assert _world_size() == 2
    lowering = SpmdParallel("tpu")
    with pytest.raises(UnsupportedFeatureError) as caught:
        lowering.world()
    assert caught.value.message == (
        "Tensor parallelism on tpu (torch_xla SPMD) runs in one process that drives every device of the host, "
        "but this is one of 2 launched processes."
    )
    assert "Run one process (plain `python`, or `anydevice run -n 1`)" in str(caught.value)
    with pytest.raises(UnsupportedFeatureError, match="one of 2 launched processes"):
        lowering.default_degrees()  # the mesh parallelize makes when given none asks world() too


def test_fsdp_is_refused_pointing_at_the_dp_axis_and_shard_batch() -> None:
    with pytest.raises(UnsupportedFeatureError) as caught:
        SpmdParallel("xla").fsdp_mesh(object())
    assert caught.value.message == (
        "wrap(model, 'fsdp') does not run on xla: FSDP2 (fully_shard) needs DeviceMesh process groups."
    )
    assert "ad.distributed.shard_batch(batch, mesh)" in str(caught.value)


@needs_no_torch_xla
def test_without_torch_xla_meshes_splits_and_batches_fail_naming_it() -> None:
    lowering = SpmdParallel("xla")
    model = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.Linear(8, 4))
    mesh = SimpleNamespace(axis_names=("tp",), mesh_shape=(2,))
    attempts = {
        "world": lambda: lowering.world(),
        "mesh": lambda: lowering.mesh({"tp": 2}),
        "parallelize": lambda: lowering.parallelize(model, [Rule("0", "colwise", "0")], mesh),
        "shard_batch": lambda: lowering.shard_batch(torch.zeros(4, 4), mesh),
    }
    for name, attempt in attempts.items():
        with pytest.raises(ModuleNotFoundError) as caught:
            attempt()
        assert caught.value.name == "torch_xla", name
