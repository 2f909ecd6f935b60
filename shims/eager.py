"""One implementation of the four shims for eager devices, driven by ``torch.accelerator``.

A plugin describes its device with an :class:`EagerVendor` table; :func:`eager_shims` turns
it into :class:`~anydevice.shims.contracts.Shims`. Where ``torch.accelerator`` does not cover
the device (the host CPU, or an accelerator that is not torch's current one) the per-device
module (``torch.cpu``, ``torch.cuda``, ``torch.xpu``, ...) is used instead. The cpu plugin is a
table like the others (``host=True``).
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
from anydevice.shims import common, compile_options
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
class EagerVendor:
    """What differs between eager devices: a table of the vendor's names and calls."""

    device_type: str
    compile_backend: str = "inductor"
    dist_backend: str = ""
    """The process-group backend; empty: torch's default for the device type."""
    autocast_dtype: Callable[[], torch.dtype] = lambda: torch.bfloat16
    profiler_activities: tuple[str, ...] = ()
    profiler_config: Callable[[Path], Any] | None = None
    chip: Callable[[], str | None] = lambda: None
    peak_tflops: Mapping[str, float] = field(default_factory=dict)
    """Dense bf16/fp16 TFLOP/s per chip name; a chip not in the table has no peak."""
    launcher: str = "torchrun"
    fsdp: bool = True
    compile_cache_env: str | None = "TORCHINDUCTOR_CACHE_DIR"
    """The variable the compiler reads for its cache directory (set under ``ANYDEVICE_CACHE_DIR``); None: no cache."""
    compile_defaults: Mapping[str, Any] = field(default_factory=dict)
    compile_options: frozenset[str] = compile_options.INDUCTOR
    """``torch.compile`` keywords the backend understands; others raise naming the option and the device."""
    memory_stats: Callable[[int], Mapping[str, int]] | None = None
    no_memory_stats_reason: str = "this device's runtime reports no allocator statistics"
    versions: Callable[[], dict[str, str]] = lambda: {}
    launch_env: Callable[[int, int], Mapping[str, str]] | None = None
    """Extra variables a launcher sets for ``(local_rank, local_world_size)`` (e.g. Neuron's visible cores)."""
    profiler_viewer: str | None = None
    """How to open the vendor's trace files, when not Perfetto (e.g. TensorBoard / XProf)."""
    device_module_first: bool = False
    """Use ``torch.<device_type>`` (count, set_device, synchronize) even where ``torch.accelerator`` matches."""
    host: bool = False
    """The device is the host itself: ``device()`` has no index, copies to it are synchronous."""
    pinned_memory: bool = True
    """Page-locked host memory exists for copies to the device (never on the host itself)."""


class EagerPlacement(Placement, Diagnostics, CudaShaped):
    """Placement for an eager device: the contract's defaults, with the vendor's table where it says more."""

    def __init__(self, vendor: EagerVendor) -> None:
        super().__init__(vendor.device_type)
        self.vendor = vendor
        self.host = vendor.host
        self.pinned_memory = vendor.pinned_memory and not vendor.host
        self._device_module: Any = None

    def _native(self, name: str) -> Any:
        if self.vendor.device_module_first:
            from anydevice.shims.contracts import torch_device_module

            return getattr(torch_device_module(self.device_type), name, None)
        return super()._native(name)

    def set_device(self, index: int) -> None:
        if self.vendor.device_module_first:
            call = self._native("set_device")
            if call is not None:
                call(index)
            return
        super().set_device(index)

    def device(self, index: int | None = None) -> torch.device:
        if self.vendor.host:
            return torch.device(self.device_type)
        return super().device(index)

    def autocast_dtype(self) -> torch.dtype:
        return self.vendor.autocast_dtype()

    def memory_stats(self) -> MemoryStats:
        if self.vendor.memory_stats is not None:
            return MemoryStats(self.vendor.memory_stats(self.device().index or 0))
        if accelerator_matches(self.device_type) and not self.vendor.device_module_first:
            return super().memory_stats()
        return MemoryStats(reason=f"{self.device_type}: {self.vendor.no_memory_stats_reason}")

    def data_loader(self, loader: Iterable[T]) -> Iterable[T]:
        return Prefetcher(loader, self.device(), non_blocking=not self.vendor.host)

    def fallback_ops(self) -> dict[str, int]:
        """Eager runtimes keep no fallback counters (a CPU fallback shows as a warning the matrix reads)."""
        return {}

    def device_module(self) -> Any:
        """``ad.device_module()``: ``torch.<device>`` or a DeviceModule (``shims.device_modules``)."""
        if self._device_module is None:
            from anydevice.shims.device_modules import eager_device_module

            self._device_module = eager_device_module(self)
        return self._device_module


class EagerCompilation(Compilation):
    """``torch.compile`` with the vendor's backend; its cache (inductor's) under ``ANYDEVICE_CACHE_DIR``."""

    def __init__(self, vendor: EagerVendor) -> None:
        super().__init__(vendor.device_type)
        self.vendor = vendor
        self.backend = vendor.compile_backend
        self.understood = vendor.compile_options

    def cache_dir(self) -> Path | None:
        env = self.vendor.compile_cache_env
        if env is None:
            return None
        if os.environ.get(env):
            return Path(os.environ[env])
        return settings.writable_cache_dir(self.backend)

    def compile(self, model: T, **options: Any) -> T:
        env = self.vendor.compile_cache_env
        if env is not None and not os.environ.get(env):
            os.environ[env] = str(self.cache_dir())  # the backend reads it at first compile
        return super().compile(model, **{**self.vendor.compile_defaults, **options})


class EagerCollectives(Collectives):
    """Process groups through torch.distributed with the vendor's backend; DDP and FSDP2."""

    def __init__(self, vendor: EagerVendor, placement: EagerPlacement) -> None:
        self.backend = vendor.dist_backend
        super().__init__(placement)
        self.vendor = vendor
        self.launcher = vendor.launcher
        self.fsdp = vendor.fsdp

    def launch_env(self, local_rank: int, local_world_size: int) -> dict[str, str]:
        return dict(self.vendor.launch_env(local_rank, local_world_size)) if self.vendor.launch_env else {}


class EagerProfiling(Profiling):
    """torch.profiler with the device's activity; peak FLOP/s from the vendor's table."""

    def __init__(self, vendor: EagerVendor) -> None:
        super().__init__(vendor.device_type)
        self.vendor = vendor
        self.activities = vendor.profiler_activities

    def trace(self, directory: Path, **options: Any) -> AbstractContextManager[TraceSession]:
        config = self.vendor.profiler_config(Path(directory)) if self.vendor.profiler_config else None
        if self.vendor.profiler_viewer:
            options.setdefault("viewer", self.vendor.profiler_viewer)
        return torch_profiler_trace(Path(directory), self.activities, experimental_config=config, **options)

    def chip(self) -> str | None:
        return self.vendor.chip()

    def peak_flops(self, dtype: torch.dtype) -> float | None:
        return common.peak_flops(self.vendor.peak_tflops, self.chip(), dtype)


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
