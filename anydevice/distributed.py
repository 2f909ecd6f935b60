"""Distributed training the device's way: process groups, collectives, wrapping, meshes.

Everything works in a single process without a launcher (world size 1, a local gloo/nccl/...
group on a loopback rendezvous), so the same script runs under ``python`` and ``anydevice run``.
"""

from __future__ import annotations

import os
import socket
from typing import TYPE_CHECKING, Any

from anydevice.backend import current
from anydevice.errors import DistributedError

if TYPE_CHECKING:
    import torch
    from torch.distributed.device_mesh import DeviceMesh

_LAUNCH_VARS = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT")
_REDUCE_OPS = {"sum": "SUM", "avg": "AVG", "mean": "AVG", "max": "MAX", "min": "MIN", "product": "PRODUCT"}
_owned_group = False


def _dist() -> Any:
    import torch.distributed as dist

    if not dist.is_available():
        raise DistributedError("This torch build has no torch.distributed.", "Install a torch build with distributed support.")
    return dist


def is_initialized() -> bool:
    """True once a process group exists (made by :func:`init` or by a launcher such as Ray)."""
    import torch.distributed as dist

    return bool(dist.is_available() and dist.is_initialized())


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _check_launch_env() -> bool:
    """True when a launcher set the environment; raise when it is only half set."""
    present = [v for v in _LAUNCH_VARS if os.environ.get(v)]
    if not present:
        return False
    needed = ("RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT")
    missing = [v for v in needed if not os.environ.get(v)]
    if missing:
        raise DistributedError(
            f"The launch environment is half set: {', '.join(present)} present but {', '.join(missing)} missing.",
            "Launch with `anydevice run -n N script.py` (or torchrun), or unset the stray variables to run one process.",
        )
    return True


def init(timeout_s: float | None = None) -> None:
    """Create the process group with the device's backend; safe to call twice.

    Adopts a group a launcher already made; binds this process to its local rank's device.
    Without a launcher it makes a world of one on a loopback rendezvous.
    """
    global _owned_group
    dist = _dist()
    backend = current()
    placement = backend.shims.placement
    if placement.device_type != "cpu" and placement.device_count() > 0:
        placement.set_device(placement.device(backend.index).index or 0)
    if dist.is_initialized():
        return
    launched = _check_launch_env()
    if not launched:
        os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
        os.environ.setdefault("MASTER_PORT", str(_free_port()))
        os.environ.setdefault("RANK", "0")
        os.environ.setdefault("WORLD_SIZE", "1")
        os.environ.setdefault("LOCAL_RANK", "0")
    kwargs: dict[str, Any] = {"backend": backend.shims.collectives.backend, "init_method": backend.shims.collectives.init_method}
    if timeout_s is not None:
        from datetime import timedelta

        kwargs["timeout"] = timedelta(seconds=timeout_s)
    if kwargs["init_method"] == "env://":
        kwargs["rank"] = int(os.environ["RANK"])
        kwargs["world_size"] = int(os.environ["WORLD_SIZE"])
    dist.init_process_group(**kwargs)
    _owned_group = True


def rank() -> int:
    """Global rank (0 without a process group or launcher)."""
    if is_initialized():
        return int(_dist().get_rank())
    return int(os.environ.get("RANK", "0") or 0)


def world_size() -> int:
    """Number of processes (1 without a process group or launcher)."""
    if is_initialized():
        return int(_dist().get_world_size())
    return int(os.environ.get("WORLD_SIZE", "1") or 1)


def local_rank() -> int:
    """Rank on this node (``LOCAL_RANK``; 0 without a launcher)."""
    return int(os.environ.get("LOCAL_RANK", "0") or 0)


def is_main() -> bool:
    """True on global rank 0."""
    return rank() == 0


def _op(op: str) -> Any:
    try:
        return getattr(_dist().ReduceOp, _REDUCE_OPS[op.lower()])
    except KeyError:
        raise DistributedError(f"Unknown reduce op '{op}'.", f"Use one of: {', '.join(_REDUCE_OPS)}.") from None


def _group_needed(what: str) -> None:
    if not is_initialized():
        init()


def barrier() -> None:
    """Wait until every rank reaches this point."""
    _group_needed("barrier")
    _dist().barrier()


def all_reduce(tensor: torch.Tensor, op: str = "sum") -> torch.Tensor:
    """Reduce ``tensor`` across ranks in place (``sum``, ``avg``, ``max``, ``min``, ``product``) and return it."""
    _group_needed("all_reduce")
    dist = _dist()
    if op.lower() in ("avg", "mean") and current().shims.collectives.backend == "gloo":
        dist.all_reduce(tensor, op=dist.ReduceOp.SUM)  # gloo has no AVG
        tensor.div_(dist.get_world_size())
        return tensor
    dist.all_reduce(tensor, op=_op(op))
    return tensor


def all_gather(tensor: torch.Tensor) -> torch.Tensor:
    """Concatenate every rank's ``tensor`` along a new leading dimension (shape ``[world, *tensor.shape]``)."""
    import torch

    _group_needed("all_gather")
    parts = [torch.empty_like(tensor) for _ in range(world_size())]
    _dist().all_gather(parts, tensor.contiguous())
    return torch.stack(parts)


def broadcast(tensor: torch.Tensor, src: int = 0) -> torch.Tensor:
    """Overwrite ``tensor`` on every rank with rank ``src``'s value, and return it."""
    _group_needed("broadcast")
    _dist().broadcast(tensor, src=src)
    return tensor


def reduce_scatter(tensor: torch.Tensor, op: str = "sum") -> torch.Tensor:
    """Reduce ``tensor`` across ranks and return this rank's equal slice of dim 0."""
    import torch

    _group_needed("reduce_scatter")
    dist = _dist()
    n = world_size()
    if tensor.shape[0] % n:
        raise DistributedError(f"reduce_scatter needs dim 0 ({tensor.shape[0]}) divisible by the world size ({n}).")
    if current().shims.collectives.backend == "gloo":  # gloo has no reduce_scatter: reduce, then slice
        full = all_reduce(tensor.clone(), op)
        return full.chunk(n)[rank()].clone()
    out = torch.empty((tensor.shape[0] // n, *tensor.shape[1:]), dtype=tensor.dtype, device=tensor.device)
    dist.reduce_scatter_tensor(out, tensor.contiguous(), op=_op(op))
    return out


def wrap(model: Any, strategy: str = "ddp", **options: Any) -> Any:
    """Wrap ``model`` for data parallelism: ``"ddp"`` or ``"fsdp"`` (FSDP2 where supported)."""
    _group_needed("wrap")
    return current().shims.collectives.wrap(model, strategy, **options)


def mesh(shape: tuple[int, ...] | int, names: tuple[str, ...] | None = None) -> DeviceMesh:
    """A ``DeviceMesh`` of the device's mesh type over every rank."""
    from torch.distributed.device_mesh import init_device_mesh

    _group_needed("mesh")
    dims = (shape,) if isinstance(shape, int) else tuple(shape)
    return init_device_mesh(current().shims.collectives.mesh_device_type, dims, mesh_dim_names=names)


def shutdown() -> None:
    """Destroy the process group if anydevice made it (a launcher's group is left alone)."""
    global _owned_group
    if is_initialized() and _owned_group:
        _dist().destroy_process_group()
    _owned_group = False
