"""The four shim contracts every device plugin provides once it is selected.

Each is a small :class:`typing.Protocol`; :class:`Shims` bundles one of each. Shared
implementations live beside this module (``eager`` for devices driven by ``torch.accelerator``,
``lazy_xla`` for torch_xla devices); a plugin mostly fills in a table of its vendor's calls.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol, TypeVar, runtime_checkable

if TYPE_CHECKING:
    import torch

    from anydevice.cli.launch import LaunchSpec

T = TypeVar("T")


class MemoryStats(dict[str, int]):
    """Device memory counters in bytes; empty with :attr:`reason` set where the runtime gives none."""

    def __init__(self, stats: Mapping[str, int] | None = None, reason: str | None = None) -> None:
        super().__init__(stats or {})
        self.reason = reason


@runtime_checkable
class Placement(Protocol):
    """Where tensors live and how a step ends on this device."""

    device_type: str

    def device(self, index: int | None = None) -> torch.device:
        """The torch.device for ``index`` (None: the process's default, local-rank aware)."""

    def device_count(self) -> int:
        """How many devices of this type the process can see."""

    def set_device(self, index: int) -> None:
        """Make ``index`` the process's current device."""

    def synchronize(self) -> None:
        """Wait until queued work on the device has finished."""

    def step(self) -> None:
        """Mark a step boundary (XLA sync on lazy devices, no-op on eager ones)."""

    def manual_seed(self, seed: int) -> None:
        """Seed every RNG the device uses."""

    def autocast_dtype(self) -> torch.dtype:
        """The device's preferred low-precision dtype."""

    def autocast(self, dtype: torch.dtype | None = None, enabled: bool = True) -> AbstractContextManager[Any]:
        """A ``torch.autocast`` context for this device."""

    def memory_stats(self) -> MemoryStats:
        """Allocator counters in bytes, or an empty result with the reason."""

    def data_loader(self, loader: Iterable[T]) -> Iterable[T]:
        """Wrap a loader so that batches arrive on the device, prefetched the device's way."""

    def fallback_ops(self) -> dict[str, int]:
        """Per-op counts of ops the runtime ran on the CPU instead of the device since the process started.

        The compatibility matrix reads it before and after each probe to name the ops that fell back.
        Empty where the runtime counts none (eager devices report fallbacks as warnings instead).
        """

    def device_module(self) -> Any:
        """A ``torch.cuda``-shaped module for this device (``ad.device_module()``); ``torch.<device>`` where complete."""

    def generator(self, seed: int) -> torch.Generator:
        """A seeded ``torch.Generator`` usable with this device's tensors (``ad.generator()``)."""

    def compilations(self) -> int | None:
        """Graphs compiled at ``step()`` since selection (lazy devices); None where nothing compiles per step."""


@runtime_checkable
class HostTransfer(Protocol):
    """Optional placement capability ``ad.save`` asks for: the device's own way to bring tensors to the host.

    A placement without it gets the portable default: every tensor copied with
    ``tensor.detach().to("cpu")`` and every process without a process group writes.
    """

    def to_host(self, obj: T) -> T:
        """A copy of ``obj`` with every device tensor on the CPU, in as few transfers as the device allows."""

    def is_writer(self) -> bool:
        """Whether this process writes an ``ad.save`` when no process group is up (False on a follower)."""


@runtime_checkable
class Compilation(Protocol):
    """How ``torch.compile`` is driven on this device."""

    backend: str

    def compile(self, model: T, **options: Any) -> T:
        """``torch.compile`` with this device's backend.

        ``options`` are ``torch.compile``'s keywords. Those the device understands are passed on (with
        the device's defaults, e.g. ``dynamic=False`` on XLA); any other raises
        :class:`~anydevice.errors.UnsupportedFeatureError` naming the option and the device, before
        anything is compiled. ``backend=`` overrides the device's backend.
        """

    def cache_dir(self) -> Path | None:
        """Where compiled artefacts are cached, or None when the backend has no persistent cache."""


@runtime_checkable
class Collectives(Protocol):
    """Process groups, launch and model wrapping on this device."""

    backend: str
    init_method: str
    launcher: str
    """The registered launcher (``anydevice.cli.launch.LAUNCHERS``) :meth:`launch` runs: ``torchrun``, ``spawn``..."""
    mesh_device_type: str
    lacking_reduce_ops: frozenset[str]
    """``torch.distributed.ReduceOp`` names the process group rejects (``{"AVG"}`` on torch_xla).
    ``anydevice.distributed`` emulates ``AVG`` (sum, then divide) and refuses the others clearly."""

    def launch(self, spec: LaunchSpec) -> int:
        """Start every local rank of ``spec`` the device's way, wait for them, and return the exit status.

        ``anydevice run`` calls it in the parent. The shared shims run the launcher :attr:`launcher` names;
        a device that launches its own way implements it directly.
        """

    def launch_env(self, local_rank: int, local_world_size: int) -> dict[str, str]:
        """Extra environment a launcher sets for one local rank (e.g. visible cores)."""

    def wrap(self, model: Any, strategy: str, **options: Any) -> Any:
        """Wrap ``model`` for data parallelism: ``ddp`` or ``fsdp``."""


@dataclass
class TraceSession:
    """An active or finished profiler trace: where it writes, what it wrote, how to view it."""

    directory: Path
    viewer: str
    files: list[Path] = field(default_factory=list)
    tool: str = ""

    def step(self) -> None:
        """Advance the profiler schedule by one step (``ad.step()`` calls it)."""


@runtime_checkable
class Profiling(Protocol):
    """The vendor's profiler and the chip's peak."""

    def trace(self, directory: Path, **options: Any) -> AbstractContextManager[TraceSession]:
        """Record a trace into ``directory``; the session's ``files`` lists what was written."""

    def peak_flops(self, dtype: torch.dtype) -> float | None:
        """Dense peak FLOP/s of one chip for ``dtype``, or None when unknown (never guessed)."""

    def chip(self) -> str | None:
        """The chip's marketing name (``H100``, ``TPU v5e``), or None."""

    def record(self, name: str) -> AbstractContextManager[None]:
        """Annotate the enclosed region by ``name`` in this vendor's trace (``ad.record``).

        Eager devices use ``torch.profiler.record_function`` (``shims.torch_profiler.record``);
        lazy XLA devices use ``torch_xla.debug.profiler.Trace``. Cheap when no trace runs.
        """


@dataclass
class Shims:
    """The four shims of a selected device, plus the versions that matter for it."""

    placement: Placement
    compilation: Compilation
    collectives: Collectives
    profiling: Profiling
    versions: dict[str, str] = field(default_factory=dict)
    framework_env: dict[str, str] = field(default_factory=dict)
    """Variables that libraries which pick a device on their own (Hugging Face Accelerate, Transformers)
    read at import, with the values that make them pick this device. ``anydevice run`` and
    ``anydevice.integrations.transformers`` set them before those libraries are imported."""
