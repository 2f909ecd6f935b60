"""One implementation of the four shims for eager devices, driven by ``torch.accelerator``.

A plugin describes its device with an :class:`EagerVendor` table; :func:`eager_shims` turns
it into :class:`~anydevice.shims.contracts.Shims`. Where ``torch.accelerator`` does not cover
the device (the host CPU, or an accelerator that is not torch's current one) the per-device
module (``torch.cpu``, ``torch.cuda``, ``torch.xpu``, ...) is used instead. The cpu plugin is a
table like the others (``PlacementTable(host=True)``).
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable, Mapping
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

import torch

from anydevice import settings
from anydevice.errors import UnsupportedFeatureError
from anydevice.shims import common
from anydevice.shims.common import Prefetcher
from anydevice.shims.contracts import (
    Collectives,
    Compilation,
    CudaShaped,
    Diagnostics,
    MemoryStats,
    Placement,
    Profiling,
    Shims,
    TraceSession,
    accelerator_matches,
)
from anydevice.shims.torch_profiler import torch_profiler_trace

T = TypeVar("T")


@dataclass(frozen=True)
class PlacementTable:
    """Placement facts of an eager device (one section of :class:`EagerVendor`)."""

    host: bool = False
    """The device is the host CPU itself: ``device()`` has no index, copies to it are synchronous."""
    pinned_memory: bool = True
    """Page-locked host memory exists for copies to the device (never on the host itself)."""
    autocast_dtype: Callable[[], torch.dtype] = lambda: torch.bfloat16
    memory_stats: Callable[[int], Mapping[str, int]] | None = None
    """Allocator counters for a device index; None: ``torch.accelerator``'s where it drives the device."""
    device_module_first: bool = False
    """Use ``torch.<device_type>`` (count, set_device, synchronize) even where ``torch.accelerator`` matches."""


@dataclass(frozen=True)
class CompileTable:
    """How ``torch.compile`` runs on an eager device (one section of :class:`EagerVendor`).

    Inductor is a declaration, never assumed: only with ``inductor=True`` does the device get inductor's
    backend, cache variable and options as defaults. A device without inductor names its own ``backend``;
    with neither, ``ad.compile`` raises naming the device and this table.
    """

    inductor: bool = False
    """torch's inductor generates code for this device type (cpu, cuda, xpu, mps, or a backend that registered it)."""
    backend: str | None = None
    """The ``torch.compile`` backend; None: ``inductor`` when :attr:`inductor`, else none (compiling is refused)."""
    cache_env: str | None = None
    """The variable the compiler reads for its cache directory (set under ``ANYDEVICE_CACHE_DIR``);
    None: ``TORCHINDUCTOR_CACHE_DIR`` with inductor, else no persistent cache."""
    defaults: Mapping[str, Any] = field(default_factory=dict)
    """``torch.compile`` keywords applied unless the caller passes them (``{"dynamic": False}``)."""
    options: frozenset[str] | None = None
    """``torch.compile`` keywords the backend understands (others raise naming the option and the device);
    None: all of them."""

    def resolved_backend(self) -> str | None:
        """The backend in effect: the declared one, else ``inductor`` where the device has it."""
        return self.backend if self.backend is not None else ("inductor" if self.inductor else None)

    def resolved_cache_env(self) -> str | None:
        """The cache variable in effect: the declared one, else inductor's where the device has inductor."""
        return self.cache_env if self.cache_env is not None else (INDUCTOR_CACHE_ENV if self.inductor else None)


@dataclass(frozen=True)
class CollectivesTable:
    """Process groups and wrapping on an eager device (one section of :class:`EagerVendor`)."""

    backend: str = ""
    """The process-group backend; empty: torch's default for the device type."""
    fsdp: bool = True


@dataclass(frozen=True)
class ProfilingTable:
    """Traces, the chip and its peak on an eager device (one section of :class:`EagerVendor`)."""

    activities: tuple[str, ...] = ()
    """``torch.profiler`` activities besides CPU (``("PrivateUse1",)``, ``("CUDA",)``)."""
    config: Callable[[Path], Any] | None = None
    viewer: str | None = None
    """How to open the vendor's trace files, when not Perfetto (e.g. TensorBoard / XProf)."""
    chip: Callable[[], str | None] = lambda: None
    peak_tflops: Mapping[str, float] = field(default_factory=dict)
    """Dense bf16/fp16 TFLOP/s per chip name; a chip not in the table has no peak."""


INDUCTOR_CACHE_ENV = "TORCHINDUCTOR_CACHE_DIR"
REMOVED_FLAT_KEYWORDS: dict[str, tuple[str, str]] = {
    # 0.3's flat keyword -> (section, field): removed in 0.5 (deprecated in 0.4); passing one is a TypeError naming both
    "compile_backend": ("compile", "backend"),
    "dist_backend": ("collectives", "backend"),
    "autocast_dtype": ("placement", "autocast_dtype"),
    "profiler_activities": ("profiling", "activities"),
    "profiler_config": ("profiling", "config"),
    "chip": ("profiling", "chip"),
    "peak_tflops": ("profiling", "peak_tflops"),
    "fsdp": ("collectives", "fsdp"),
    "compile_cache_env": ("compile", "cache_env"),
    "compile_defaults": ("compile", "defaults"),
    "compile_options": ("compile", "options"),
    "memory_stats": ("placement", "memory_stats"),
    "profiler_viewer": ("profiling", "viewer"),
    "device_module_first": ("placement", "device_module_first"),
    "host": ("placement", "host"),
    "pinned_memory": ("placement", "pinned_memory"),
}
_SECTIONS = {"placement": PlacementTable, "compile": CompileTable, "collectives": CollectivesTable, "profiling": ProfilingTable}


def _no_versions() -> dict[str, str]:
    return {}


@dataclass(frozen=True)
class EagerVendor:
    """What differs between eager devices: the device type and one table per shim.

    ``EagerVendor("mychip", compile=CompileTable(backend="mychip"), profiling=ProfilingTable(activities=("PrivateUse1",)))``.
    """

    device_type: str
    placement: PlacementTable = field(default_factory=PlacementTable)
    compile: CompileTable = field(default_factory=CompileTable)
    collectives: CollectivesTable = field(default_factory=CollectivesTable)
    profiling: ProfilingTable = field(default_factory=ProfilingTable)
    versions: Callable[[], dict[str, str]] = _no_versions
    """More versions to report beside torch's (the vendor package's)."""


def _refuse_removed_keywords(init: Callable[..., None]) -> Callable[..., None]:
    def checked_init(self: EagerVendor, *args: Any, **kwargs: Any) -> None:
        if len(args) > 1 and not all(
            isinstance(a, (PlacementTable, CompileTable, CollectivesTable, ProfilingTable)) for a in args[1:5]
        ):
            raise TypeError("EagerVendor takes the device type, then its sections by keyword: " + ", ".join(_SECTIONS))
        for key in kwargs:
            if key in REMOVED_FLAT_KEYWORDS:
                section, name = REMOVED_FLAT_KEYWORDS[key]
                raise TypeError(
                    f"EagerVendor({key}=...) was removed in anydevice 0.5: write "
                    f"{section}={_SECTIONS[section].__name__}({name}=...) (see CHANGELOG.md)"
                )
            if key in ("launcher", "launch_env"):
                raise TypeError(f"EagerVendor({key}=...) moved to DeviceSpec(launch=Launch(launcher=..., env=...))")
        init(self, *args, **kwargs)

    return checked_init


setattr(EagerVendor, "__init__", _refuse_removed_keywords(EagerVendor.__init__))  # noqa: B010  mypy keeps the dataclass's signature


class EagerPlacement(Placement, Diagnostics, CudaShaped):
    """Placement for an eager device: the contract's defaults, with the vendor's table where it says more."""

    def __init__(self, vendor: EagerVendor) -> None:
        super().__init__(vendor.device_type)
        self.vendor = vendor
        self.table = vendor.placement
        self.host = vendor.placement.host
        self.pinned_memory = vendor.placement.pinned_memory and not vendor.placement.host
        self._device_module: Any = None

    def _native(self, name: str) -> Any:
        if self.table.device_module_first:
            from anydevice.shims.contracts import torch_device_module

            return getattr(torch_device_module(self.device_type), name, None)
        return super()._native(name)

    def set_device(self, index: int) -> None:
        if self.table.device_module_first:
            call = self._native("set_device")
            if call is not None:
                call(index)
            return
        super().set_device(index)

    def device(self, index: int | None = None) -> torch.device:
        if self.host:
            return torch.device(self.device_type)
        return super().device(index)

    def autocast_dtype(self) -> torch.dtype:
        return self.table.autocast_dtype()

    def memory_stats(self) -> MemoryStats:
        if self.table.memory_stats is not None:
            return MemoryStats(self.table.memory_stats(self.device().index or 0))
        if accelerator_matches(self.device_type) and not self.table.device_module_first:
            return super().memory_stats()
        why = "torch's CPU allocator keeps no statistics" if self.host else "this device's runtime reports no allocator stats"
        return MemoryStats(reason=f"{self.device_type}: {why}")

    def data_loader(self, loader: Iterable[T]) -> Iterable[T]:
        return Prefetcher(loader, self.device(), non_blocking=not self.host)

    def fallback_ops(self) -> dict[str, int]:
        """Eager runtimes keep no fallback counters (a CPU fallback shows as a warning the matrix reads)."""
        return {}

    def device_module(self) -> Any:
        """``ad.device_module()``: ``torch.<device>`` or a DeviceModule (``shims.cuda_shaped``)."""
        if self._device_module is None:
            from anydevice.shims.cuda_shaped import eager_device_module

            self._device_module = eager_device_module(self)
        return self._device_module


class EagerCompilation(Compilation):
    """``torch.compile`` with the vendor's backend; its cache (inductor's) under ``ANYDEVICE_CACHE_DIR``."""

    def __init__(self, vendor: EagerVendor) -> None:
        super().__init__(vendor.device_type)
        self.table = vendor.compile
        self.inductor = vendor.compile.inductor
        self.backend = vendor.compile.resolved_backend() or ""
        if vendor.compile.options is not None:
            self.understood = vendor.compile.options

    def cache_dir(self) -> Path | None:
        env = self.table.resolved_cache_env()
        if env is None:
            return None
        if os.environ.get(env):
            return Path(os.environ[env])
        return settings.writable_cache_dir(self.backend)

    def compile(self, model: T, **options: Any) -> T:
        if not self.backend and "backend" not in options:
            raise UnsupportedFeatureError(
                f"{self.device_type} has no torch.compile backend: its plugin declares no inductor and no backend.",
                "Pass ad.compile(model, backend=...), or the plugin declares CompileTable(backend=...) or "
                "CompileTable(inductor=True) where torch's inductor generates code for the device.",
            )
        env = self.table.resolved_cache_env()
        if env is not None and not os.environ.get(env):
            os.environ[env] = str(self.cache_dir())  # the backend reads it at first compile
        return super().compile(model, **{**self.table.defaults, **options})


class EagerCollectives(Collectives):
    """Process groups through torch.distributed with the vendor's backend; DDP and FSDP2."""

    def __init__(self, vendor: EagerVendor, placement: EagerPlacement) -> None:
        self.backend = vendor.collectives.backend
        super().__init__(placement)
        self.table = vendor.collectives
        self.fsdp = vendor.collectives.fsdp


class EagerProfiling(Profiling):
    """torch.profiler with the device's activity; peak FLOP/s from the vendor's table."""

    def __init__(self, vendor: EagerVendor) -> None:
        super().__init__(vendor.device_type)
        self.table = vendor.profiling
        self.activities = vendor.profiling.activities

    def trace(self, directory: Path, **options: Any) -> AbstractContextManager[TraceSession]:
        config = self.table.config(Path(directory)) if self.table.config else None
        if self.table.viewer:
            options.setdefault("viewer", self.table.viewer)
        return torch_profiler_trace(Path(directory), self.activities, experimental_config=config, **options)

    def chip(self) -> str | None:
        return self.table.chip()

    def peak_flops(self, dtype: torch.dtype) -> float | None:
        return common.peak_flops(self.table.peak_tflops, self.chip(), dtype)


def eager_shims(vendor: EagerVendor) -> Shims:
    """The four shims for an eager device described by ``vendor``."""
    placement = EagerPlacement(vendor)
    return Shims(
        placement=placement,
        compilation=EagerCompilation(vendor),
        collectives=EagerCollectives(vendor, placement),
        profiling=EagerProfiling(vendor),
        versions={"torch": torch.__version__, **vendor.versions()},
    )
