"""torchtitan on the selected device, without editing torchtitan's files.

    python -m anydevice.integrations.torchtitan --module llama3 --config llama3_debugmodel [torchtitan flags]

or, in a script of your own (before torchtitan builds its ``Trainer``)::

    from anydevice.integrations.torchtitan import patch
    patch()

torchtitan picks its device once, at import, in ``torchtitan/tools/utils.py``:
``device_type = _get_available_device_type() or "cuda"`` and ``device_module =
_get_device_module(device_type)``; several modules copy both names at import
(``from torchtitan.tools.utils import device_module, device_type``: components/metrics.py,
distributed/utils.py, distributed/parallel_dims.py, models/common/token_dispatcher.py,
tools/profiler.py), and the trainer calls ``set_device``, ``current_device``,
``synchronize``, ``get_device_name``, ``get_device_properties``, ``memory_stats``,
``reset_peak_memory_stats`` and ``empty_cache`` through ``device_module``.

:func:`patch` rebinds ``device_type`` to ``ad.device().type`` and ``device_module`` to
``ad.device_module()`` (the ``torch.cuda``-shaped module of the selected device) in
``torchtitan.tools.utils`` and in every torchtitan module that copied them. Until
``ad.device_module`` exists in this build, ``torch.get_device_module(device_type)`` stands in
(said in the log line and in :attr:`Patched.module_source`). Where that module cannot give
torchtitan's memory monitor what it reads (torch's CPU module has no ``get_device_name`` nor
``memory_stats``), the monitor is replaced by one that reads :func:`anydevice.memory_stats`
and logs once why its numbers are -1 (torchtitan's own value for "unknown").

Attention: torchtitan 0.3.0 trains language models only with ``flex`` or ``varlen`` attention
(``sdpa`` is refused in models/common/config_utils.py ``get_attention_config``). Where torch's
FlexAttention has no backward (torch 2.13 on cpu: ``NotImplementedError: FlexAttention does not
support backward on CPU`` from torch/nn/attention/flex_attention.py ``_validate_device``) and
varlen has no kernel (``aten::_flash_attention_forward`` is CUDA-only), :func:`patch` wraps
``FlexAttention._compiled_flex_attn``: the first time the device refuses, it logs a warning and
from then on computes the same attention with ``scaled_dot_product_attention`` under the dense
form of torchtitan's own ``BlockMask`` (``create_mask(block_mask.mask_mod, ...)``). Exact, and
O(L^2) memory: fine for the debug model, not for long sequences.

Importing this module imports neither torch nor torchtitan.
"""

from __future__ import annotations

import importlib
import logging
import os
import sys
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

log = logging.getLogger("anydevice.integrations.torchtitan")

COPIES = (
    "torchtitan.components.metrics",
    "torchtitan.distributed.utils",
    "torchtitan.distributed.parallel_dims",
    "torchtitan.models.common.token_dispatcher",
    "torchtitan.tools.profiler",
)
"""torchtitan modules that copy ``device_type`` / ``device_module`` from torchtitan.tools.utils at import."""

MONITOR_NEEDS = (
    "get_device_name",
    "current_device",
    "get_device_properties",
    "memory_stats",
    "reset_peak_memory_stats",
    "empty_cache",
)
"""What torchtitan's ``DeviceMemoryMonitor`` calls on the device module."""


@dataclass
class Patched:
    """What :func:`patch` changed: the device, where its module came from, and the modules rebound."""

    device_type: str
    module_source: str
    was: tuple[str, str]
    modules: list[str] = field(default_factory=list)
    memory_monitor: str = "torchtitan's DeviceMemoryMonitor"
    attention: str = "torchtitan's FlexAttention"
    timeouts: str = "torch.distributed.set_timeout"
    gradient_reduction: str = "FSDP's own reduce-scatter op"


def device_module() -> tuple[Any, str]:
    """The selected device's ``torch.cuda``-shaped module and where it came from."""
    from anydevice import api as ad

    return ad.device_module(), "anydevice.device_module()"


def patch() -> Patched:
    """Point torchtitan's device globals at anydevice's selection (call before building a Trainer)."""
    from anydevice import api as ad

    utils = importlib.import_module("torchtitan.tools.utils")
    old_type, old_module = utils.device_type, utils.device_module
    kind = ad.device().type
    module, source = device_module()
    done = Patched(kind, source, (str(old_type), getattr(old_module, "__name__", repr(old_module))))
    setattr(utils, "device_type", kind)  # noqa: B010 - a module's globals, typed as ModuleType
    setattr(utils, "device_module", module)  # noqa: B010
    setattr(utils, "get_device_info", lambda: (kind, module))  # noqa: B010
    for name in COPIES:
        importlib.import_module(name)  # imported now, they copy the new values; imported before, rebind below
    done.modules = rebind_copies(old_type, old_module, kind, module)
    done.attention = _guard_flex_attention()
    done.timeouts = _pg_timeouts_for_this_torch()
    done.gradient_reduction = _sum_where_premul_sum_is_missing()
    missing = [f for f in MONITOR_NEEDS if not callable(getattr(module, f, None))]
    if missing or not _memory_stats_work(module):
        _replace_memory_monitor(kind, missing)
        done.memory_monitor = "anydevice.memory_stats()"
    log.info(
        "torchtitan: device %s (was %s); device_module from %s, in %d modules; memory from %s",
        kind,
        old_type,
        source,
        len(done.modules),
        done.memory_monitor,
    )
    return done


def rebind_copies(old_type: str, old_module: Any, kind: str, module: Any) -> list[str]:
    """Rebind every loaded torchtitan module that copied ``device_type`` or ``device_module`` (each name alone).

    A module counts as a copy when its global holds torchtitan's original value (the same string, the
    same module object): e.g. distributed/parallel_dims.py copies ``device_type`` only. Returns the
    names of the modules that now hold the selected device's values.
    """
    rebound = []
    for name, mod in list(sys.modules.items()):
        if mod is None or not (name == "torchtitan" or name.startswith("torchtitan.")):
            continue
        values = vars(mod)
        changed = False
        if isinstance(values.get("device_type"), str) and values["device_type"] == old_type != kind:
            values["device_type"] = kind
            changed = True
        if "device_module" in values and values["device_module"] is old_module:
            values["device_module"] = module
            changed = True
        if changed or values.get("device_module") is module or (values.get("device_type") == kind != old_type):
            rebound.append(name)
    return sorted(rebound)


def _pg_timeouts_for_this_torch() -> str:
    """torchtitan 0.3.0 calls ``torch.distributed.set_timeout``, which torch 2.13 lacks: use its private twin."""
    import torch.distributed as dist

    if hasattr(dist, "set_timeout"):
        return "torch.distributed.set_timeout"
    from torch.distributed.distributed_c10d import _set_pg_timeout

    utils = importlib.import_module("torchtitan.distributed.utils")

    def set_pg_timeouts(timeout: Any, parallel_dims: Any) -> None:
        """torchtitan's set_pg_timeouts (barrier, synchronize, then every group's timeout) on this torch."""
        module = importlib.import_module("torchtitan.tools.utils").device_module
        dist.barrier()
        module.synchronize()
        groups = [mesh.get_group() for mesh in parallel_dims.get_all_one_dimensional_meshes().values()]
        for group in [*groups, None]:
            _set_pg_timeout(timeout, group)

    setattr(utils, "set_pg_timeouts", set_pg_timeouts)  # noqa: B010
    log.info(
        "torchtitan: torch %s has no torch.distributed.set_timeout (torchtitan/distributed/utils.py set_pg_timeouts "
        "calls it after step 1); using torch.distributed.distributed_c10d._set_pg_timeout",
        importlib.import_module("torch").__version__,
    )
    return "torch.distributed.distributed_c10d._set_pg_timeout"


def _sum_where_premul_sum_is_missing() -> str:
    """Keep FSDP2 off ``ReduceOp.PREMUL_SUM`` where the process group lacks it (every backend but NCCL).

    torchtitan scales gradients itself (by the global token count) and turns FSDP's own division
    off with ``set_gradient_divide_factor(1.0)`` (distributed/fsdp.py
    ``disable_fsdp_gradient_division``); FSDP2 then reduce-scatters with ``PREMUL_SUM(1/1.0)``
    (torch/distributed/fsdp/_fully_shard/_fsdp_collectives.py ``_get_gradient_divide_factors``),
    which gloo refuses ("Cannot use ReduceOp.PREMUL_SUM with Gloo"). Where the default group's
    backend is not NCCL, the wrapper also sets ``set_force_sum_reduction_for_comms(True)``: FSDP
    then reduces with ``SUM`` and divides by the factor afterwards (by 1.0: nothing), the same value.
    """
    from torch.distributed.fsdp import FSDPModule

    original = FSDPModule.set_gradient_divide_factor
    if getattr(original, "_anydevice_guard", False):
        return "SUM where the backend has no PREMUL_SUM"

    def set_gradient_divide_factor(self: Any, factor: float) -> None:
        original(self, factor)
        if not _has_premul_sum():
            self.set_force_sum_reduction_for_comms(True)

    set_gradient_divide_factor.__dict__["_anydevice_guard"] = True  # marks our patch
    FSDPModule.set_gradient_divide_factor = set_gradient_divide_factor  # type: ignore[method-assign]  # the patch torchtitan 0.3 needs (docs/integrations.md)
    return "SUM where the backend has no PREMUL_SUM"


def _has_premul_sum() -> bool:
    """``ReduceOp.PREMUL_SUM`` exists only in NCCL (torch.distributed docs); a group that is not NCCL lacks it."""
    import torch.distributed as dist

    return dist.is_initialized() and dist.get_backend() == "nccl"


def _spmd_backend_args(argv: Sequence[str]) -> list[str]:
    """``--parallelism.spmd_backend partial_dtensor`` where torch's ``fully_shard`` cannot shard torchtitan's default.

    torchtitan 0.3 defaults to ``spmd_backend="spmd_types"``: parameters carry spmd_types annotations
    that ``fully_shard(..., dp_mesh_dims=...)`` must turn into DTensors. torch 2.13's FSDP2 does not
    read them and refuses ("When dp_mesh_dims is provided, all parameters must be DTensors") as soon
    as data parallelism shards over more than one rank. A flag the user gives is kept.
    """
    world = int(os.environ.get("WORLD_SIZE", "1"))
    if world == 1 or any(a.startswith("--parallelism.spmd_backend") for a in argv) or _fsdp_reads_spmd_types():
        return []
    log.warning(
        "torchtitan: torch %s's fully_shard does not read spmd_types annotations (torchtitan's default spmd_backend); "
        "using --parallelism.spmd_backend partial_dtensor (pass the flag to choose another)",
        importlib.import_module("torch").__version__,
    )
    return ["--parallelism.spmd_backend", "partial_dtensor"]


def _fsdp_reads_spmd_types() -> bool:
    """True when torch's FSDP2 parameter code knows spmd_types (it names the package where it does)."""
    from pathlib import Path

    source = importlib.import_module("torch.distributed.fsdp._fully_shard._fsdp_param").__file__
    return source is not None and "spmd_types" in Path(source).read_text(encoding="utf-8")


def _guard_flex_attention() -> str:
    """Fall back to SDPA with the dense block mask where the device's flex_attention has no backward."""
    attention = importlib.import_module("torchtitan.models.common.attention")
    flex = attention.FlexAttention
    original = flex.__dict__["_compiled_flex_attn"]
    if getattr(original, "_anydevice_guard", False):
        return "torchtitan's FlexAttention, SDPA where it has no backward"
    state = {"dense": False}

    def guarded(q: Any, k: Any, v: Any, **kw: Any) -> Any:
        if not state["dense"]:
            try:
                return original(q, k, v, **kw)
            except NotImplementedError as exc:
                if "backward" not in str(exc):
                    raise
                log.warning(
                    "torchtitan: flex_attention cannot train on %s (%s); using scaled_dot_product_attention "
                    "with the dense form of torchtitan's block mask from now on",
                    q.device.type,
                    exc,
                )
                state["dense"] = True
        return _dense_flex_attention(q, k, v, **kw)

    guarded.__dict__["_anydevice_guard"] = True  # marks our patch
    flex._compiled_flex_attn = staticmethod(guarded)
    return "torchtitan's FlexAttention, SDPA where it has no backward"


def _dense_flex_attention(
    q: Any,
    k: Any,
    v: Any,
    *,
    score_mod: Any = None,
    block_mask: Any = None,
    scale: float | None = None,
    enable_gqa: bool = False,
    return_aux: Any = None,
    kernel_options: Any = None,
) -> tuple[Any, Any]:
    """``flex_attention(q, k, v, block_mask=...)`` computed as SDPA under the dense token mask (B, N, L, H)."""
    import torch.nn.functional as F
    from torch.nn.attention.flex_attention import AuxOutput, create_mask

    if score_mod is not None or (return_aux is not None and any(return_aux)):
        raise NotImplementedError(
            "anydevice's dense attention fallback supports block masks only (no score_mod, no lse/aux outputs); "
            "use a device whose flex_attention has a backward, or a torchtitan model without them"
        )
    mask = None
    if block_mask is not None:
        heads = block_mask.kv_num_blocks.shape[1]
        mask = create_mask(block_mask.mask_mod, q.shape[0], heads, q.shape[-2], k.shape[-2], device=q.device)
    out = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, scale=scale, enable_gqa=enable_gqa)
    return out, AuxOutput(lse=None, max_scores=None)


def _memory_stats_work(module: Any) -> bool:
    try:
        module.memory_stats()
        return True
    except Exception:
        return False


def _replace_memory_monitor(kind: str, missing: list[str]) -> None:
    """Swap torchtitan's memory monitor for one that reads ``ad.memory_stats()`` (-1 where unknown)."""
    from anydevice import api as ad

    metrics = importlib.import_module("torchtitan.components.metrics")
    base = metrics.DeviceMemoryMonitor
    why = f"device module lacks {', '.join(missing)}" if missing else "its memory_stats() fails"

    class AnyDeviceMemoryMonitor(base):  # type: ignore[misc, valid-type]  # a base found at run time (torchtitan's monitor)
        """torchtitan's monitor on ``ad.memory_stats()``: byte counters where the device keeps them, else -1."""

        def __init__(self, device: str = kind) -> None:
            import torch

            self.device = torch.device(device)
            self.device_name = ad.backend().chip or kind
            self.device_index = self.device.index or 0
            stats = ad.memory_stats()
            self.device_capacity = int(stats.get("total_bytes", stats.get("limit_bytes", 0))) or -1
            self.device_capacity_gib = self._to_gib(self.device_capacity)
            if not stats:
                log.warning("torchtitan: %s memory numbers are -1: %s (%s)", kind, stats.reason, why)

        def _to_pct(self, memory: float) -> float:
            return 100 * memory / self.device_capacity if self.device_capacity > 0 else -1.0

        def get_peak_stats(self) -> Any:
            stats = ad.memory_stats()
            active = stats.get("peak_allocated_bytes", -1)
            reserved = stats.get("peak_reserved_bytes", -1)
            return metrics.DeviceMemStats(
                self._to_gib(active),
                self._to_pct(active),
                self._to_gib(reserved),
                self._to_pct(reserved),
                stats.get("num_alloc_retries", -1),
                stats.get("num_ooms", -1),
            )

        def reset_peak_stats(self) -> None:
            pass  # ad.memory_stats() has no reset; peaks are since the process started

    def build() -> Any:
        monitor = AnyDeviceMemoryMonitor(kind)
        log.info("%s capacity: %s (from anydevice.memory_stats)", kind.upper(), monitor.device_name)
        return monitor

    setattr(metrics, "DeviceMemoryMonitor", AnyDeviceMemoryMonitor)  # noqa: B010
    setattr(metrics, "build_device_memory_monitor", build)  # noqa: B010


def run(argv: Sequence[str] | None = None) -> None:
    """Patch, then run torchtitan's own entry point (``torchtitan.train.main``) with ``argv``.

    A process started without a launcher gets torchrun's single-process variables
    (``RANK=0``, ``LOCAL_RANK=0``, ``WORLD_SIZE=1``, ``MASTER_ADDR=127.0.0.1``, a free
    ``MASTER_PORT``); under ``anydevice run -n N`` or torchrun the launcher's are kept.
    """
    if "LOCAL_RANK" not in os.environ:
        os.environ.update(RANK="0", LOCAL_RANK="0", WORLD_SIZE="1", LOCAL_WORLD_SIZE="1", MASTER_ADDR="127.0.0.1")
        os.environ.setdefault("MASTER_PORT", str(_free_port()))
    logging.basicConfig(level=logging.INFO)
    patch()
    train = importlib.import_module("torchtitan.train")
    saved = sys.argv
    args = list(sys.argv[1:] if argv is None else argv)
    sys.argv = ["torchtitan.train", *args, *_spmd_backend_args(args)]
    try:
        train.main()
    finally:
        sys.argv = saved


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


if __name__ == "__main__":
    run()
