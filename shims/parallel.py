"""Data-parallel wrapping shared by every device: DDP and FSDP2 (``fully_shard``)."""

from __future__ import annotations

from typing import Any

import torch
import torch.distributed as dist

from anydevice.errors import DistributedError, UnsupportedFeatureError


def _require_process_group() -> None:
    if not (dist.is_available() and dist.is_initialized()):
        raise DistributedError(
            "Wrapping a model for data parallelism needs a process group.",
            "Call anydevice.distributed.init() first (it works in a single process too).",
        )


def ddp(model: torch.nn.Module, device_ids: list[int] | None = None, **options: Any) -> torch.nn.Module:
    """``DistributedDataParallel`` over the current process group."""
    _require_process_group()
    from torch.nn.parallel import DistributedDataParallel

    return DistributedDataParallel(model, device_ids=device_ids, **options)


def fsdp(model: torch.nn.Module, device_type: str, **options: Any) -> torch.nn.Module:
    """FSDP2: ``fully_shard`` each child block, then the root, over a 1-D mesh of every rank."""
    _require_process_group()
    try:
        from torch.distributed.fsdp import fully_shard
    except ImportError as exc:  # torch < 2.6
        raise UnsupportedFeatureError(f"FSDP2 needs torch >= 2.6 ({exc}).", "Upgrade torch or use 'ddp'.") from exc
    from torch.distributed.device_mesh import init_device_mesh

    mesh = options.pop("mesh", None) or init_device_mesh(device_type, (dist.get_world_size(),))
    for unit in _shard_units(model):
        fully_shard(unit, mesh=mesh, **options)
    fully_shard(model, mesh=mesh, **options)
    return model


def _shard_units(model: torch.nn.Module) -> list[torch.nn.Module]:
    """The children to shard one by one: each trainable child, looking inside ModuleList/ModuleDict
    (containers without ``forward``, which ``fully_shard`` rejects), so each transformer block is a unit."""
    units: list[torch.nn.Module] = []
    for child in model.children():
        if isinstance(child, (torch.nn.ModuleList, torch.nn.ModuleDict)):
            units.extend(_shard_units(child))
        elif any(p.requires_grad for p in child.parameters()):
            units.append(child)
    return units
