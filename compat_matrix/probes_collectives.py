"""Probes for the collectives shim.

Without a launcher these run in a single-process world (world_size 1, the device's process-group
backend): they prove the backend initialises and each collective runs and returns the right
values, not cross-process traffic. ``anydevice run -n N`` gives a real multi-process world.
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import Any

import torch
import torch.distributed as tdist

from anydevice.compat_matrix.execute import ProbeContext
from anydevice.compat_matrix.probe import Probe, Skip
from anydevice.compat_matrix.schema import Stage

T = torch.Tensor
_WORLD1 = " Single process (world_size 1) unless launched with anydevice run."


def _world(ctx: ProbeContext) -> tuple[Any, int, int]:
    with ctx.stage(Stage.PLACE):
        dist = ctx.dist()
    return dist, dist.rank(), dist.world_size()


def _result(returned: Any, tensor: T) -> T:
    """Collectives may work in place (returning None) or return the result."""
    if returned is None:
        return tensor
    if isinstance(returned, (list, tuple)):
        return torch.cat([r.reshape(-1) for r in returned])
    if isinstance(returned, torch.Tensor):
        return returned
    raise AssertionError(f"collective returned {type(returned).__name__}")


def init_process_group(ctx: ProbeContext) -> None:
    _world(ctx)
    expected = ctx.api("backend")().shims.collectives.backend
    actual = tdist.get_backend()
    if expected and str(actual) not in str(expected).split(":") and str(actual) != str(expected):
        raise AssertionError(f"process group backend {actual}, the shim declares {expected}")


def rank_world_size(ctx: ProbeContext) -> None:
    dist, rank, world = _world(ctx)
    if (rank, world) != (tdist.get_rank(), tdist.get_world_size()):
        raise AssertionError(f"ad.distributed says rank {rank}/{world}, torch says {tdist.get_rank()}/{tdist.get_world_size()}")
    if not 0 <= dist.local_rank() < max(world, 1) or dist.is_main() != (rank == 0):
        raise AssertionError(f"local_rank {dist.local_rank()} / is_main {dist.is_main()} inconsistent with rank {rank}")


def all_reduce(ctx: ProbeContext) -> None:
    dist, rank, world = _world(ctx)
    t = ctx.place(torch.full((4,), float(rank + 1)))
    with ctx.stage(Stage.EXECUTE):
        out = _result(dist.all_reduce(t), t)
        ctx.sync()
    ctx.compare(out, torch.full((4,), world * (world + 1) / 2), atol=0, rtol=0)


def all_reduce_max(ctx: ProbeContext) -> None:
    dist, rank, world = _world(ctx)
    t = ctx.place(torch.tensor([float(rank), -float(rank)]))
    with ctx.stage(Stage.EXECUTE):
        out = _result(dist.all_reduce(t, op="max"), t)
        ctx.sync()
    ctx.compare(out, torch.tensor([float(world - 1), 0.0]), atol=0, rtol=0)


def all_gather(ctx: ProbeContext) -> None:
    dist, rank, world = _world(ctx)
    t = ctx.place(torch.tensor([float(rank), 10.0 + rank]))
    with ctx.stage(Stage.EXECUTE):
        out = _result(dist.all_gather(t), t)
        ctx.sync()
    expected = torch.cat([torch.tensor([float(r), 10.0 + r]) for r in range(world)])
    ctx.compare(out.reshape(-1), expected, atol=0, rtol=0)


def broadcast(ctx: ProbeContext) -> None:
    dist, rank, _ = _world(ctx)
    t = ctx.place(torch.arange(5, dtype=torch.float32) if rank == 0 else torch.zeros(5))
    with ctx.stage(Stage.EXECUTE):
        out = _result(dist.broadcast(t, src=0), t)
        ctx.sync()
    ctx.compare(out, torch.arange(5, dtype=torch.float32), atol=0, rtol=0)


def reduce_scatter(ctx: ProbeContext) -> None:
    _, rank, world = _world(ctx)
    full = ctx.place(torch.arange(2 * world, dtype=torch.float32) + rank)
    out = ctx.place(torch.zeros(2))
    with ctx.stage(Stage.EXECUTE):
        getattr(tdist, "reduce_scatter_single", tdist.reduce_scatter_tensor)(out, full)
        ctx.sync()
    base = torch.arange(2 * world, dtype=torch.float32)[2 * rank : 2 * rank + 2]
    ctx.compare(out, base * world + sum(range(world)), atol=0, rtol=0)


def all_to_all(ctx: ProbeContext) -> None:
    _, rank, world = _world(ctx)
    send = ctx.place(torch.tensor([100.0 * rank + r for r in range(world)]))
    recv = ctx.place(torch.zeros(world))
    with ctx.stage(Stage.EXECUTE):
        tdist.all_to_all_single(recv, send)
        ctx.sync()
    ctx.compare(recv, torch.tensor([100.0 * r + rank for r in range(world)]), atol=0, rtol=0)


def barrier(ctx: ProbeContext) -> None:
    dist, _, _ = _world(ctx)
    with ctx.stage(Stage.EXECUTE):
        dist.barrier()


def _train_step(ctx: ProbeContext, strategy: str) -> None:
    dist, _, world = _world(ctx)
    torch.manual_seed(ctx.seed)
    model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 4))
    x = torch.randn(4, 8, generator=torch.Generator().manual_seed(ctx.seed))
    ref = copy.deepcopy(model)
    ref_opt = torch.optim.SGD(ref.parameters(), lr=0.1)
    torch.autograd.backward(ref(x).pow(2).mean())
    ref_opt.step()
    with ctx.stage(Stage.PLACE):
        wrapped = dist.wrap(ctx.place(model), strategy)
    x_dev = ctx.place(x)
    with ctx.stage(Stage.EXECUTE):
        opt = torch.optim.SGD(wrapped.parameters(), lr=0.1)
        torch.autograd.backward(wrapped(x_dev).pow(2).mean())
        opt.step()
        ctx.sync()
        after = wrapped(x_dev)
        if hasattr(after, "full_tensor"):
            after = after.full_tensor()
    if world == 1:
        ctx.compare(after, ref(x), atol=1e-5, rtol=1e-5)


def ddp_step(ctx: ProbeContext) -> None:
    _train_step(ctx, "ddp")


def fsdp_step(ctx: ProbeContext) -> None:
    _train_step(ctx, "fsdp")


def device_mesh(ctx: ProbeContext) -> None:
    dist, _, world = _world(ctx)
    with ctx.stage(Stage.EXECUTE):
        mesh = dist.mesh((world,), ("dp",))
    want = ctx.api("backend")().shims.collectives.mesh_device_type
    if mesh.device_type != want:
        raise AssertionError(f"mesh device_type {mesh.device_type}, the shim declares {want}")
    if mesh.size() != world or tuple(mesh.mesh_dim_names or ()) != ("dp",):
        raise AssertionError(f"mesh size {mesh.size()} names {mesh.mesh_dim_names}, expected {world} ('dp',)")


def shutdown(ctx: ProbeContext) -> None:
    dist, _, _ = _world(ctx)
    if not ctx.ad.distributed.is_main() and dist.world_size() > 1:
        raise Skip("only checked in a single-process world")
    with ctx.stage(Stage.EXECUTE):
        dist.shutdown()
    if tdist.is_initialized():
        raise AssertionError("the default process group is still initialised after shutdown()")


def _p(name: str, fn: Callable[[ProbeContext], None], what: str) -> Probe:
    return Probe(name, "collectives", fn, description=what + _WORLD1)


PROBES = [
    _p("init_process_group", init_process_group, "ad.distributed.init() starts the shim's process-group backend."),
    _p("rank_world_size", rank_world_size, "rank, world_size, local_rank and is_main agree with torch.distributed."),
    _p("all_reduce", all_reduce, "all_reduce sum of a device tensor."),
    _p("all_reduce_max", all_reduce_max, "all_reduce with op='max'."),
    _p("all_gather", all_gather, "all_gather of a device tensor."),
    _p("broadcast", broadcast, "broadcast from rank 0."),
    _p("reduce_scatter", reduce_scatter, "torch.distributed.reduce_scatter_tensor on the device's process group."),
    _p("all_to_all", all_to_all, "torch.distributed.all_to_all_single on the device's process group."),
    _p("barrier", barrier, "ad.distributed.barrier() returns."),
    _p("ddp_step", ddp_step, "wrap(model, 'ddp'): one SGD step equals the unwrapped CPU step."),
    _p("fsdp_step", fsdp_step, "wrap(model, 'fsdp'): one SGD step equals the unwrapped CPU step."),
    _p("device_mesh", device_mesh, "ad.distributed.mesh() builds a 1-D mesh of the declared device type."),
    _p("shutdown", shutdown, "ad.distributed.shutdown() tears the process group down."),
]
