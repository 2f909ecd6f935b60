"""The contract of a selected device: four shims, the optional capabilities, and :class:`Shims`.

Each shim is a small base class. A member has a default wherever one exists, derived from the
device type and ``torch.accelerator`` (what an eager PyTorch device, a PrivateUse1 backend
included, does anyway); a device overrides only what differs. Required without a default: the
device type each shim is built with. The shared implementations beside this module (``eager``
for devices driven by ``torch.accelerator``, ``lazy_xla`` for torch_xla devices) subclass these
and are filled in from a table of the vendor's calls.

Optional capabilities (:class:`Diagnostics`, :class:`CudaShaped`, :class:`HostTransfer`) are separate base classes a shim
may also inherit; core asks for one with :meth:`Shims.capability` and gets None when it is absent.
"""

from __future__ import annotations

import random
from abc import ABC, abstractmethod
from collections.abc import Iterable, Mapping
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

from anydevice.shims.trace_session import TraceSession as TraceSession

if TYPE_CHECKING:
    from types import ModuleType

    import torch

T = TypeVar("T")
C = TypeVar("C")


class MemoryStats(dict[str, int]):
    """Device memory counters in bytes; empty with :attr:`reason` set where the runtime gives none."""

    def __init__(self, stats: Mapping[str, int] | None = None, reason: str | None = None) -> None:
        super().__init__(stats or {})
        self.reason = reason


def accelerator_matches(device_type: str) -> bool:
    """True when ``torch.accelerator`` drives ``device_type`` (it is torch's current accelerator)."""
    import torch

    accel = getattr(torch, "accelerator", None)
    current = accel.current_accelerator() if accel is not None else None
    return current is not None and current.type == device_type


def torch_device_module(device_type: str) -> ModuleType | None:
    """``torch.<device_type>`` (``torch.cuda``, ``torch.cpu``, a PrivateUse1 backend's module), or None."""
    from types import ModuleType

    import torch

    try:
        module = torch.get_device_module(device_type)
    except (RuntimeError, AttributeError):
        return None
    return module if isinstance(module, ModuleType) else None


class Placement:
    """Where tensors live and how a step ends on this device.

    The defaults use ``torch.accelerator`` when it drives :attr:`device_type`, else
    ``torch.<device_type>`` where that module has the call.
    """

    device_type: str
    """The ``torch.device`` type of the device's tensors (``cuda``, ``xla``, a PrivateUse1 name)."""
    lazy: bool = False
    """True when ops are recorded and run at :meth:`step` (torch_xla); integrations that switch modes read it."""
    host: bool = False
    """True when the device is the host CPU itself: ``device()`` has no index, copies to it are synchronous,
    ``anydevice run -n N`` bounds N by cores, not by a device count."""
    pinned_memory: bool = True
    """True when page-locked host memory exists for copies to this device (``Tensor.pin_memory()`` works)."""

    def __init__(self, device_type: str) -> None:
        self.device_type = device_type

    def _native(self, name: str) -> Any:
        """The call ``name`` of ``torch.accelerator`` when it drives this device, else of ``torch.<device>``; or None."""
        import torch

        if accelerator_matches(self.device_type):
            return getattr(torch.accelerator, name, None)
        return getattr(torch_device_module(self.device_type), name, None)

    def device(self, index: int | None = None) -> torch.device:
        """The torch.device for ``index`` (None: the process's default, local-rank aware)."""
        import torch

        from anydevice.settings import local_rank

        if index is None:
            count = self.device_count()
            index = local_rank() % count if count else 0
        return torch.device(self.device_type, index)

    def device_count(self) -> int:
        """How many devices of this type the process can see."""
        count = self._native("device_count")
        return int(count()) if count is not None else 0

    def set_device(self, index: int) -> None:
        """Make ``index`` the process's current device."""
        call = self._native("set_device_index") if accelerator_matches(self.device_type) else self._native("set_device")
        if call is not None:
            call(index)

    def synchronize(self) -> None:
        """Wait until queued work on the device has finished."""
        call = self._native("synchronize")
        if call is not None:
            call()

    def step(self) -> None:
        """Mark a step boundary (XLA sync on lazy devices); eager devices run each op as issued: nothing to do."""

    def materialize(self, tensors: list[Any]) -> None:
        """Compute ``tensors`` on their own before a step boundary (lazy devices: the step's graph then takes them as
        data); eager devices computed them already: nothing to do."""

    def manual_seed(self, seed: int) -> None:
        """Seed every RNG the device uses (Python's, torch's CPU and every initialised accelerator generator)."""
        import torch

        random.seed(seed)
        torch.manual_seed(seed)

    def generator(self, seed: int) -> torch.Generator:
        """A seeded ``torch.Generator`` usable with this device's tensors (``ad.generator()``)."""
        import torch

        return torch.Generator(device=self.device()).manual_seed(int(seed))

    def autocast_dtype(self) -> torch.dtype:
        """The device's preferred low-precision dtype (bf16 by default)."""
        import torch

        return torch.bfloat16

    def autocast(self, dtype: torch.dtype | None = None, enabled: bool = True) -> AbstractContextManager[Any]:
        """A ``torch.autocast`` context for this device."""
        import torch

        return torch.autocast(self.device_type, dtype=dtype or self.autocast_dtype(), enabled=enabled)

    def move(self, obj: T, non_blocking: bool = False) -> T:
        """Move tensors, modules (in place) and nested containers of them to :meth:`device` (``ad.to``)."""
        from anydevice.shims.common import move

        return move(obj, self.device(), non_blocking)

    def memory_stats(self) -> MemoryStats:
        """Allocator counters in bytes, or an empty result with the reason."""
        import torch

        index = self.device().index or 0
        if accelerator_matches(self.device_type) and hasattr(torch.accelerator, "memory_allocated"):
            accel = torch.accelerator
            return MemoryStats(
                {
                    "allocated_bytes": int(accel.memory_allocated(index)),
                    "reserved_bytes": int(accel.memory_reserved(index)),
                    "peak_allocated_bytes": int(accel.max_memory_allocated(index)),
                    "peak_reserved_bytes": int(accel.max_memory_reserved(index)),
                }
            )
        return MemoryStats(reason=f"{self.device_type}: this device's runtime reports no allocator statistics")

    def data_loader(self, loader: Iterable[T]) -> Iterable[T]:
        """Wrap a loader so that batches arrive on the device, the next one copied while the current one is used."""
        from anydevice.shims.common import Prefetcher

        return Prefetcher(loader, self.device(), non_blocking=True)


class Compilation:
    """How ``torch.compile`` is driven on this device."""

    device_type: str
    backend: str = "inductor"
    """The ``torch.compile`` backend."""
    understood: frozenset[str] = frozenset({"backend", "fullgraph", "dynamic", "mode", "options", "disable"})
    """``torch.compile`` keywords the backend understands (all of them by default)."""

    def __init__(self, device_type: str) -> None:
        self.device_type = device_type

    def compile(self, model: T, **options: Any) -> T:
        """``torch.compile`` with this device's backend.

        ``options`` are ``torch.compile``'s keywords. Those the device understands are passed on (with
        the device's defaults, e.g. ``dynamic=False`` on XLA); any other raises
        :class:`~anydevice.errors.UnsupportedFeatureError` naming the option and the device, before
        anything is compiled. ``backend=`` overrides the device's backend.
        """
        import torch

        from anydevice.shims import compile_options

        own = options.get("backend", self.backend) == self.backend  # another backend: only torch.compile's keywords
        compile_options.check(self.device_type, options, self.understood if own else compile_options.TORCH_COMPILE)
        compiled: T = torch.compile(model, **{"backend": self.backend, **options})  # type: ignore[call-overload]  # no overload takes **options
        return compiled

    def cache_dir(self) -> Path | None:
        """Where compiled artefacts are cached, or None when the backend has no persistent cache (the default)."""
        return None


class Collectives:
    """Process groups, the launcher and model wrapping on this device."""

    device_type: str
    backend: str = ""
    """The ``torch.distributed`` backend; empty: torch's default for :attr:`device_type` (``gloo``, ``nccl``, ...)."""
    init_method: str = "env://"
    lacking_reduce_ops: frozenset[str] = frozenset()
    """``torch.distributed.ReduceOp`` names the process group rejects (``{"AVG"}`` on torch_xla).
    ``anydevice.distributed`` emulates ``AVG`` (sum, then divide) and refuses the others clearly."""
    fsdp: bool = True
    """Whether FSDP2 (``fully_shard``) runs on this device."""

    mesh_device_type: str
    """The ``DeviceMesh`` device type (the device type by default)."""
    tensor_parallel: str = "dtensor"
    """How ``ad.distributed.parallelize`` lowers a plan here: ``"dtensor"`` (``parallelize_module`` over a
    ``DeviceMesh`` of the ranks), ``"spmd"`` (one process, torch_xla ``mark_sharding`` over the host's
    devices) or ``""`` (refused). :meth:`tensor_parallelism` returns the matching lowering."""

    def __init__(self, placement: Placement) -> None:
        self.placement = placement
        self.device_type = self.mesh_device_type = placement.device_type
        if not self.backend:
            self.backend = default_dist_backend(self.device_type)

    def tensor_parallelism(self) -> Any:
        """The lowering of :attr:`tensor_parallel` (meshes, plans, batches); DTensor by default."""
        from anydevice.shims.tp_dtensor import DTensorParallel

        return DTensorParallel(self.mesh_device_type)

    def wrap(self, model: Any, strategy: str, **options: Any) -> Any:
        """Wrap ``model`` for data parallelism: ``ddp`` or ``fsdp`` (``anydevice.distributed.wrap`` checked the name)."""
        from anydevice.shims import parallel

        if strategy == "fsdp":
            if not self.fsdp:
                from anydevice.errors import UnsupportedFeatureError

                raise UnsupportedFeatureError(f"FSDP is not supported on {self.device_type}.", "Use wrap(model, 'ddp').")
            return parallel.fsdp(model, self.mesh_device_type, **options)
        device = self.placement.device()
        ids = None if device.index is None else [device.index]  # DDP takes no device_ids for host modules
        return parallel.ddp(model, device_ids=ids, **options)


def default_dist_backend(device_type: str) -> str:
    """torch's default process-group backend for ``device_type`` (``gloo`` where torch names none)."""
    import torch.distributed as dist

    try:
        return str(dist.get_default_backend_for_device(device_type))
    except (AttributeError, RuntimeError, ValueError):  # torch < 2.6, or a device torch maps to no backend
        return "gloo"


class Profiling:
    """The vendor's profiler and the chip's peak; by default ``torch.profiler`` with the CPU activity."""

    device_type: str
    activities: tuple[str, ...] = ()
    """``torch.profiler.ProfilerActivity`` names to record besides ``CPU`` (``CUDA``, ``PrivateUse1``)."""

    def __init__(self, device_type: str) -> None:
        self.device_type = device_type

    def trace(self, directory: Path, **options: Any) -> AbstractContextManager[TraceSession]:
        """Record a trace into ``directory``; the session's ``files`` lists what was written."""
        from anydevice.shims.torch_profiler import torch_profiler_trace

        return torch_profiler_trace(Path(directory), self.activities, **options)

    def record(self, name: str) -> AbstractContextManager[None]:
        """Annotate the enclosed region by ``name`` in this vendor's trace (``ad.record``); cheap when no trace runs."""
        from anydevice.shims.torch_profiler import record

        return record(name)

    def chip(self) -> str | None:
        """The chip's marketing name (``H100``, ``TPU v5e``), or None (the default)."""
        return None

    def peak_flops(self, dtype: torch.dtype) -> float | None:
        """Dense peak FLOP/s of one chip for ``dtype``, or None when unknown (the default; never guessed)."""
        return None


# -- optional capabilities: a shim inherits one to offer it; core asks with Shims.capability ----------
class Diagnostics:
    """Optional: counters the runtime keeps that the compatibility matrix and ``ad.fallback_ops()`` read."""

    def fallback_ops(self) -> dict[str, int]:
        """Per-op counts of ops the runtime ran on the CPU instead of the device since the process started."""
        return {}

    def compilations(self) -> int | None:
        """Graphs compiled at ``step()`` since selection (lazy devices); None where nothing compiles per step."""
        return None


class HostTransfer:
    """Optional: the device's own way to bring tensors to the host for ``ad.save``.

    ``ad.save`` asks ``shims.capability(HostTransfer)`` and, without one, uses this class's defaults:
    each tensor copied with ``tensor.detach().to("cpu")``, and every process without a process
    group writes. torch_xla's placement overrides both (one batched transfer; ordinal 0 writes).
    """

    def to_host(self, obj: T) -> T:
        """A copy of ``obj`` with every device tensor on the CPU (modules copied, the caller's stay put)."""
        from anydevice.shims.common import to_cpu

        return to_cpu(obj)

    def is_writer(self) -> bool:
        """Whether this process writes an ``ad.save`` when no process group is up (False on a follower)."""
        return True


class CudaShaped(ABC):
    """Optional: a ``torch.cuda``-shaped module for this device (``ad.device_module()``, cuda-compat).

    There is no default: a shim that offers the capability must say which module it is.
    """

    @abstractmethod
    def device_module(self) -> Any:
        """The module: ``torch.<device>`` where complete, else an ``anydevice.shims.cuda_shaped.DeviceModule``."""


@dataclass
class Shims:
    """The four shims of a selected device, plus the versions that matter for it."""

    placement: Placement
    compilation: Compilation
    collectives: Collectives
    profiling: Profiling
    versions: dict[str, str] = field(default_factory=dict)

    def capability(self, kind: type[C]) -> C | None:
        """The shim offering the optional capability ``kind`` (:class:`Diagnostics`, :class:`CudaShaped`,
        :class:`HostTransfer`), or None."""
        return next(
            (s for s in (self.placement, self.compilation, self.collectives, self.profiling) if isinstance(s, kind)), None
        )
