"""Tensor parallelism on torch_xla SPMD: a plan lowered to per-parameter ``mark_sharding``, no hooks.

The lowering of devices whose ``Collectives.tensor_parallel`` is ``"spmd"``. One process drives
every device of the host (``xr.use_spmd()``; ``PJRT_DEVICE=CPU CPU_NUM_DEVICES=4`` gives four on
a CPU); GSPMD propagates the weights' shardings through the graph. DTensor's
``parallelize_module`` shards XLA parameters too, but its input hooks call ``DTensor.from_local``,
which fails on an XLA ``DeviceMesh`` (torch_xla 2.9), hence partition specs only:

* colwise: weight ``("tp", None)``, bias ``("tp",)``; rowwise: weight ``(None, "tp")``, bias replicated;
* an ``nn.Embedding``: colwise splits the embedding dim, rowwise the vocabulary;
* the batch: ``("dp", None, ...)`` (:meth:`SpmdParallel.shard_batch`).
"""

from __future__ import annotations

from typing import Any

import torch

from anydevice import settings
from anydevice.errors import UnsupportedFeatureError
from anydevice.shims.tp_lowering import Lowering
from anydevice.shims.tp_plan import DP_AXIS, TP_AXIS, Rule, split_dim


def _world_size() -> int:
    """Processes in this job: the process group's size, else what the launcher set (1 for plain ``python``)."""
    if torch.distributed.is_available() and torch.distributed.is_initialized():
        return int(torch.distributed.get_world_size())
    return settings.world_size()


def _refuse_multiprocess(name: str) -> None:
    if (world := _world_size()) > 1:
        raise UnsupportedFeatureError(
            f"Tensor parallelism on {name} (torch_xla SPMD) runs in one process that drives every device of the host, "
            f"but this is one of {world} launched processes.",
            "Run one process (plain `python`, or `anydevice run -n 1`): the mesh spans the host's devices.",
        )


def live_device_tensors() -> int:
    """How many tensors on an XLA device this process holds (0 at once when torch_xla never made one)."""
    import torch_xla.debug.metrics as met

    if not met.counter_value("CreateXlaTensor"):
        return 0
    import gc

    tensors = (obj for obj in gc.get_objects() if issubclass(type(obj), torch.Tensor))  # type(): no __class__ lookups
    return sum(1 for tensor in tensors if tensor.is_xla)


def _refuse_tensors_made_before(name: str) -> None:
    """SPMD switched on after tensors reached the device: torch_xla replicates them and the next step can die of
    SIGSEGV (torch_xla 2.9, ``xr.use_spmd()`` after ``model.to(device)``); refused with the order that works."""
    count = live_device_tensors()
    if count:
        raise UnsupportedFeatureError(
            f"Tensor parallelism on {name} (torch_xla SPMD) must be switched on before the first tensor reaches the "
            f"device, but {count} tensor(s) are there already (the model was moved before the mesh was made): torch_xla "
            "would replicate them and can crash (SIGSEGV) at the next step.",
            "Make the mesh first (init_device_mesh(...) or ad.distributed.mesh(...)), then move the model and its "
            "inputs to the device.",
        )


def spec_for(weight: torch.Tensor, dim: int | None) -> tuple[str | None, ...]:
    """The partition spec of a weight split on ``dim`` over ``tp`` (all None: replicated)."""
    spec: list[str | None] = [None] * weight.dim()
    if dim is not None:
        spec[dim] = TP_AXIS
    return tuple(spec)


class SpmdParallel(Lowering):
    """Meshes, plans and batches for torch_xla SPMD: one process, ``xs.Mesh`` over the host's devices."""

    kind = "spmd"
    local_shards = False

    def __init__(self, name: str) -> None:
        self.name = name

    def world(self) -> int:
        """The devices an SPMD mesh spans: every device of the host (switches torch_xla to SPMD)."""
        _refuse_multiprocess(self.name)
        import torch_xla.runtime as xr

        if not xr.is_spmd():
            _refuse_tensors_made_before(self.name)
            xr.use_spmd()
        return int(xr.global_runtime_device_count())

    def mesh(self, degrees: dict[str, int]) -> Any:
        """An ``xs.Mesh`` with one named axis per degree over devices 0..N-1."""
        import numpy as np
        import torch_xla.distributed.spmd as xs

        count = self.world()
        return xs.Mesh(np.arange(count), tuple(degrees.values()), tuple(degrees))

    def degrees(self, mesh: Any) -> dict[str, int]:
        """``{axis: size}`` of an ``xs.Mesh``."""
        return {str(n): int(s) for n, s in zip(mesh.axis_names, mesh.mesh_shape, strict=True)}

    def parallelize(self, model: torch.nn.Module, rules: list[Rule], mesh: Any) -> torch.nn.Module:
        """``mark_sharding`` each split weight (and a colwise bias) on ``tp``; the rest stays replicated."""
        import torch_xla.distributed.spmd as xs

        _refuse_multiprocess(self.name)
        modules = dict(model.named_modules())
        marked: set[int] = set()  # a tied weight is one tensor: marked once (check() made its owners agree)
        for rule in rules:
            module = modules[rule.name]
            dim = split_dim(module, rule.spec)
            weight = getattr(module, "weight", None)
            if dim is None or weight is None or id(weight) in marked:
                continue
            marked.add(id(weight))
            xs.mark_sharding(weight, mesh, spec_for(weight, dim))
            bias = getattr(module, "bias", None)
            if bias is not None and dim == 0 and isinstance(module, torch.nn.Linear):
                xs.mark_sharding(bias, mesh, (TP_AXIS,))
        return model

    def fsdp_mesh(self, mesh: Any) -> Any:
        """FSDP2 does not run on torch_xla; SPMD shards the batch on ``dp`` instead."""
        raise UnsupportedFeatureError(
            f"wrap(model, 'fsdp') does not run on {self.name}: FSDP2 (fully_shard) needs DeviceMesh process groups.",
            "On xla the 'dp' axis of the mesh is data parallelism already: shard each batch with "
            "ad.distributed.shard_batch(batch, mesh); GSPMD reduces the gradients.",
        )

    def shard_batch(self, batch: torch.Tensor, mesh: Any) -> torch.Tensor:
        """The global ``batch`` on the device, split along dim 0 over ``dp`` (replicated without a dp axis)."""
        import torch_xla
        import torch_xla.distributed.spmd as xs

        batch = batch.to(torch_xla.device())
        axis = DP_AXIS if DP_AXIS in mesh.axis_names else None
        xs.mark_sharding(batch, mesh, (axis,) + (None,) * (batch.dim() - 1))
        return batch
