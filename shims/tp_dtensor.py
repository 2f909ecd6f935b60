"""Tensor parallelism with DTensor: a plan lowered to ``parallelize_module`` over a named ``DeviceMesh``.

The lowering of devices whose ``Collectives.tensor_parallel`` is ``"dtensor"``: cpu (gloo), cuda
(nccl) and native PrivateUse1 devices. One process per rank; the ``tp`` axis of the mesh splits
the weights, the ``dp`` axis takes ``wrap(model, "fsdp")`` and this rank's part of the batch.
"""

from __future__ import annotations

from typing import Any

import torch

from anydevice.errors import DistributedError
from anydevice.shims.tied import retie, tied_groups
from anydevice.shims.tp_lowering import Lowering
from anydevice.shims.tp_plan import DP_AXIS, TP_AXIS, Rule


def _style(rule: Rule, module: torch.nn.Module) -> Any:
    """The ``torch.distributed.tensor.parallel`` style for one rule (None: left replicated)."""
    from torch.distributed.tensor import Replicate
    from torch.distributed.tensor.parallel import ColwiseParallel, RowwiseParallel, SequenceParallel

    spec = rule.spec
    if spec.sequence:
        return SequenceParallel(use_local_output=True)
    if spec.weight_dim is None:
        return None
    if spec.weight_dim == 0:
        return ColwiseParallel() if spec.output_sharded else ColwiseParallel(output_layouts=Replicate())
    if spec.input_sharded and not isinstance(module, torch.nn.Embedding):
        return RowwiseParallel()
    return RowwiseParallel(input_layouts=Replicate())


class DTensorParallel(Lowering):
    """Meshes, plans and batches for one process per rank (``DeviceMesh`` and ``parallelize_module``)."""

    kind = "dtensor"

    def __init__(self, mesh_device_type: str) -> None:
        self.mesh_device_type = mesh_device_type

    def world(self) -> int:
        """The ranks a mesh spans: the process group's world, else the launched one (1 without a launcher)."""
        from anydevice.settings import world_size

        dist = torch.distributed
        return int(dist.get_world_size()) if dist.is_available() and dist.is_initialized() else world_size()

    def mesh(self, degrees: dict[str, int]) -> Any:
        """A ``DeviceMesh`` with one named axis per degree (the process group must exist)."""
        from torch.distributed.device_mesh import init_device_mesh

        return init_device_mesh(self.mesh_device_type, tuple(degrees.values()), mesh_dim_names=tuple(degrees))

    def degrees(self, mesh: Any) -> dict[str, int]:
        """``{axis: size}`` of a ``DeviceMesh`` (an unnamed 1-D mesh is all ``tp``)."""
        names = mesh.mesh_dim_names or ((TP_AXIS,) if mesh.ndim == 1 else ())
        if len(names) != mesh.ndim:
            raise DistributedError(
                f"The mesh {mesh} has unnamed dimensions.", "Build it with ad.distributed.mesh({'dp': -1, 'tp': 2})."
            )
        return {str(n): int(s) for n, s in zip(names, mesh.shape, strict=True)}

    def parallelize(self, model: torch.nn.Module, rules: list[Rule], mesh: Any) -> torch.nn.Module:
        """``parallelize_module`` over the ``tp`` axis with one style per rule."""
        from torch.distributed.tensor.parallel import parallelize_module

        tp_mesh = mesh[TP_AXIS] if mesh.mesh_dim_names and TP_AXIS in mesh.mesh_dim_names else mesh
        modules = dict(model.named_modules())
        plan = {r.name: s for r in rules if (s := _style(r, modules[r.name])) is not None}
        groups = tied_groups(model)
        parallelize_module(model, tp_mesh, plan)
        retie(groups)  # parallelize_module gives each module its own DTensor; check() made their placements agree
        return model

    def fsdp_mesh(self, mesh: Any) -> Any:
        """The mesh ``wrap(model, "fsdp")`` shards a tensor-parallel model over: the ``dp`` axis."""
        if not mesh.mesh_dim_names or DP_AXIS not in mesh.mesh_dim_names:
            raise DistributedError(
                "wrap(model, 'fsdp') on a tensor-parallel model needs a 'dp' axis in its mesh.",
                "Parallelize over ad.distributed.mesh({'dp': -1, 'tp': N}).",
            )
        return mesh[DP_AXIS]

    def shard_batch(self, batch: torch.Tensor, mesh: Any) -> torch.Tensor:
        """This rank's slice of the global ``batch`` along dim 0, by its ``dp`` coordinate (all of it without dp)."""
        if not mesh.mesh_dim_names or DP_AXIS not in mesh.mesh_dim_names:
            return batch
        dp = mesh[DP_AXIS]
        size, index = int(dp.size()), int(dp.get_local_rank())
        if batch.shape[0] % size:
            raise DistributedError(
                f"A batch of {batch.shape[0]} rows does not split over dp={size}.", f"Use a multiple of {size}."
            )
        return batch.chunk(size)[index]
