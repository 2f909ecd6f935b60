"""ad.distributed in one process without a launcher: every function works and does the obvious thing."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import torch
from torch import nn

import anydevice as ad
from anydevice.errors import DistributedError

pytestmark = pytest.mark.torch_version_sensitive  # docs/architecture.md, "Which tests the core lanes run"

dist = ad.distributed


@pytest.fixture(autouse=True)
def cpu_and_no_group(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    monkeypatch.setenv("ANYDEVICE", "cpu")
    yield
    dist.shutdown()
    assert not dist.is_initialized()


def test_identity_and_ranks_without_a_group():
    assert (dist.rank(), dist.world_size(), dist.local_rank(), dist.is_main()) == (0, 1, 0, True)
    t = torch.tensor([1.0, 2.0, 3.0, 4.0])
    for op in ("sum", "avg", "max", "min", "product"):
        assert dist.all_reduce(t.clone(), op).tolist() == [1.0, 2.0, 3.0, 4.0]
    assert dist.all_gather(t).tolist() == [[1.0, 2.0, 3.0, 4.0]]
    assert dist.broadcast(t.clone(), src=0).tolist() == [1.0, 2.0, 3.0, 4.0]
    assert dist.reduce_scatter(t, "sum").tolist() == [1.0, 2.0, 3.0, 4.0]
    dist.barrier()
    assert not dist.is_initialized()  # the collectives above made no process group


def test_init_makes_a_world_of_one_and_is_safe_twice(monkeypatch: pytest.MonkeyPatch):
    dist.init(timeout_s=30)
    dist.init(timeout_s=30)
    assert dist.is_initialized()
    assert torch.distributed.get_backend() == "gloo"  # the cpu plugin's backend
    assert (dist.rank(), dist.world_size()) == (0, 1)
    import os

    assert "MASTER_PORT" not in os.environ  # no port taken, no launch variables left behind
    assert dist.all_reduce(torch.tensor([2.0, 5.0]), "sum").tolist() == [2.0, 5.0]  # through gloo now
    assert dist.all_gather(torch.tensor([3.0])).tolist() == [[3.0]]
    assert dist.reduce_scatter(torch.arange(2.0), "sum").tolist() == [0.0, 1.0]
    dist.barrier()
    dist.shutdown()
    assert not dist.is_initialized()


def test_wrap_and_mesh_in_one_process():
    model = nn.Sequential(nn.Linear(4, 4), nn.Linear(4, 1))
    ddp = dist.wrap(model, "ddp")
    assert type(ddp).__name__ == "DistributedDataParallel"
    ddp(torch.randn(2, 4)).sum().backward()
    fsdp = dist.wrap(nn.Sequential(nn.Linear(4, 4), nn.Linear(4, 1)), "fsdp")
    assert {type(p).__name__ for p in fsdp.parameters()} == {"DTensor"}  # FSDP2 fully_shard on CPU/gloo
    fsdp(torch.randn(2, 4)).sum().backward()
    m = dist.mesh(1, ("dp",))
    assert m.mesh_dim_names == ("dp",) and tuple(m.shape) == (1,)


def test_adopts_a_group_it_did_not_make():
    """Like Ray Train: the launcher made the group; init() adopts it and shutdown() leaves it alone."""
    torch.distributed.init_process_group("gloo", store=torch.distributed.HashStore(), rank=0, world_size=1)
    try:
        dist.init()
        assert dist.world_size() == 1 and dist.is_initialized()
        dist.shutdown()
        assert torch.distributed.is_initialized()  # not ours to destroy
    finally:
        torch.distributed.destroy_process_group()


@pytest.mark.parametrize("present", [{"RANK": "1"}, {"LOCAL_RANK": "0", "WORLD_SIZE": "2"}, {"MASTER_ADDR": "10.0.0.1"}])
def test_half_set_launch_environment_is_a_clear_error(monkeypatch: pytest.MonkeyPatch, present: dict[str, str]):
    for key, value in present.items():
        monkeypatch.setenv(key, value)
    with pytest.raises(DistributedError, match="half set") as info:
        dist.init()
    assert "anydevice run" in (info.value.hint or "")
    assert not dist.is_initialized()


def test_bad_arguments_are_clear_errors():
    with pytest.raises(DistributedError, match="Unknown reduce op 'median'"):
        dist.all_reduce(torch.ones(1), "median")
    with pytest.raises(DistributedError, match="not a rank"):
        dist.broadcast(torch.ones(1), src=3)
    with pytest.raises(DistributedError, match="Unknown wrapping strategy 'zero3'"):
        dist.wrap(nn.Linear(1, 1), "zero3")
    with pytest.raises(DistributedError, match=r"needs 4 ranks, but the world has 1"):
        dist.mesh((2, 2))
