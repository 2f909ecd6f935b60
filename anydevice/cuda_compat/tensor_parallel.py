"""cuda-compat for tensor parallelism written for GPUs, on devices that lower it with SPMD (torch_xla).

A CUDA script runs one process per GPU: ``init_device_mesh("cuda", (WORLD_SIZE,))`` then
``parallelize_module(model, mesh, {"in_proj": ColwiseParallel(), "out_proj": RowwiseParallel()})``. On a
device whose ``Collectives.tensor_parallel`` is ``"spmd"`` one process drives every device of the host,
so under ``anydevice run`` the script's world is one rank and its mesh has one entry. cuda-compat keeps
that view (every shape the script computes is the one-rank shape, so no number changes) and lowers the
plan onto the host's devices: each weight a ``ColwiseParallel``/``RowwiseParallel`` entry splits is
sharded with ``mark_sharding`` over all of them, and GSPMD computes the whole model's values (DTensor's
own hooks do not run on an XLA ``DeviceMesh``). Styles that split no weight (``SequenceParallel``,
``PrepareModuleInput``, ...) change only where activations live: nothing to lower. Other styles are kept
replicated, and the report says so.

A mesh of more than one entry in one process is refused: the script would compute per-rank shapes
(heads divided by the mesh size) that SPMD, which gives whole tensors, does not produce.
"""

from __future__ import annotations

import functools
import warnings
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

from anydevice.cuda_compat.migration_report import REDIRECTED
from anydevice.errors import DistributedError, UnsupportedFeatureError

if TYPE_CHECKING:
    import types

    from anydevice.cuda_compat.redirect import Redirect

MODULE = "torch.distributed.tensor.parallel"
"""Where scripts take ``parallelize_module`` from; its view is made when the script imports it."""


def style_name(style: Any, key: str = "<whole model>") -> str | None:
    """The anydevice style for a torch ``ParallelStyle`` (its weight split), or None when it splits no weight.

    A Colwise/Rowwise style whose output stays a DTensor (``use_local_output=False``, as ``loss_parallel`` wants) is
    refused: the script would call DTensor methods on the whole tensors SPMD gives."""
    from torch.distributed.tensor.parallel import ColwiseParallel, RowwiseParallel

    splits = isinstance(style, (ColwiseParallel, RowwiseParallel))
    if splits and getattr(style, "use_local_output", True) is False:
        raise UnsupportedFeatureError(
            f"parallelize_module plan entry {key!r}: {type(style).__name__}(use_local_output=False) gives the script "
            "DTensors, and under SPMD one process holds whole tensors instead.",
            "Leave use_local_output at its default (True), or run the script with one process per device.",
        )
    if isinstance(style, ColwiseParallel):
        return "colwise"
    if isinstance(style, RowwiseParallel):
        return "rowwise"
    return None


def plan_rules(model: Any, plan: Any) -> tuple[list[Any], list[str]]:
    """The weight-splitting rules of a torch plan (``{fqn: ParallelStyle}`` or one style for ``model``), and the
    entries kept replicated (styles that split no weight, or a whole-model style).

    An entry that names no submodule is skipped with a warning, as torch's ``parallelize_module`` does."""
    from anydevice.shims.tp_plan import expand

    if not isinstance(plan, Mapping):
        style_name(plan)
        return [], [f"<whole model>: {type(plan).__name__}"]
    rules: list[Any] = []
    kept: list[str] = []
    for key, style in plan.items():
        name = style_name(style, str(key))
        if name is None:
            kept.append(f"{key}: {type(style).__name__}")
            continue
        try:
            rules += expand(model, {str(key): name})
        except DistributedError as unresolved:
            warnings.warn(f"Parallelize plan key {key!r} could not be resolved: {unresolved.args[0]}", stacklevel=3)
    return rules, kept


def view(r: Redirect) -> Callable[[types.ModuleType], dict[str, Any]] | None:
    """The script's ``torch.distributed.tensor.parallel`` on an SPMD device (None elsewhere: DTensor runs as is)."""
    collectives = r.backend.shims.collectives
    if collectives.tensor_parallel != "spmd":
        return None

    def make(parallel: types.ModuleType) -> dict[str, Any]:
        original = parallel.parallelize_module

        @functools.wraps(original)
        def parallelize_module(module: Any, device_mesh: Any = None, parallelize_plan: Any = None, **kwargs: Any) -> Any:
            mesh_type = getattr(device_mesh, "device_type", None)
            if mesh_type != r.target.type:
                return original(module, device_mesh, parallelize_plan, **kwargs)
            return lower(r, collectives.tensor_parallelism(), module, device_mesh, parallelize_plan)

        return {"parallelize_module": parallelize_module}

    return make


def lower(r: Redirect, lowering: Any, model: Any, device_mesh: Any, plan: Any) -> Any:
    """Shard ``plan``'s split weights over the host's devices (one process); the script's one-rank view is kept."""
    from anydevice.shims.tp_plan import TP_AXIS

    size = int(device_mesh.size())
    if size != 1:
        raise UnsupportedFeatureError(
            f"parallelize_module over a DeviceMesh of {size} entries in one process on {r.name}: under SPMD one "
            "process drives every device of the host, and the script would compute per-rank shapes that SPMD, which "
            "gives whole tensors, does not produce.",
            "Size the mesh by the world (init_device_mesh('cuda', (int(os.environ['WORLD_SIZE']),)) is 1 here: "
            "cuda-compat then shards the plan's weights over every device of the host), or use "
            "ad.distributed.parallelize(model, plan).",
        )
    rules, kept = plan_rules(model, plan)
    devices = lowering.world()
    call = f"parallelize_module(DeviceMesh({r.target.type!r}, 1 rank))"
    try:  # real weights, split dimensions the host's device count divides, tied weights alike, split inputs taken split
        lowering.check(model, rules, {TP_AXIS: devices})
    except DistributedError as why:
        said = f"the tensor-parallel plan stays replicated on the {devices} devices: {why.args[0]}"
        r.notice(said)
        r.report.add(call, REDIRECTED, said)
        return model
    model = r.backend.shims.placement.move(model)  # as DTensor moves the weights it splits; every Parameter kept
    model = lowering.parallelize(model, rules, lowering.mesh({TP_AXIS: devices}))
    outcome = f"SPMD: {len(rules)} weight(s) sharded over the host's {devices} devices"
    r.report.add(call, REDIRECTED, outcome + (f"; replicated: {', '.join(kept)}" if kept else ""))
    return model
