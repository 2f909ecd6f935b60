"""One implementation of the four shims for eager devices, driven by ``torch.accelerator``.

A plugin describes its device with an :class:`EagerVendor` table; :func:`eager_shims` turns
it into :class:`~anydevice.shims.contracts.Shims`. Where ``torch.accelerator`` does not cover
the device (the host CPU, or an accelerator that is not torch's current one) the per-device
module (``torch.cpu``, ``torch.cuda``, ``torch.xpu``, ...) is used instead. The cpu plugin is a
table like the others (``host=True``).
"""

from __future__ import annotations

import os
import random
from collections.abc import Callable, Iterable, Mapping
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType
from typing import Any, TypeVar

import torch

from anydevice import settings
from anydevice.cli.launch import LaunchSpec, registered_launcher
from anydevice.errors import UnsupportedFeatureError
from anydevice.shims import common, compile_options, parallel, torch_profiler
from anydevice.shims.common import Prefetcher, local_rank
from anydevice.shims.contracts import MemoryStats, Shims, TraceSession
from anydevice.shims.torch_profiler import torch_profiler_trace

T = TypeVar("T")

EAGER_FRAMEWORK_ENV: Mapping[str, str] = {"USE_TORCH_XLA": "0", "ACCELERATE_USE_CPU": "0"}
"""Accelerate/Transformers on an eager device: native torch even where torch_xla is installed."""


@dataclass(frozen=True)
class EagerVendor:
    """What differs between eager devices: a table of the vendor's names and calls."""

    device_type: str
    compile_backend: str = "inductor"
    dist_backend: str = "gloo"
    autocast_dtype: Callable[[], torch.dtype] = lambda: torch.bfloat16
    profiler_activities: tuple[str, ...] = ()
    profiler_config: Callable[[Path], Any] | None = None
    chip: Callable[[], str | None] = lambda: None
    peak_tflops: Mapping[str, float] = field(default_factory=dict)
    """Dense bf16/fp16 TFLOP/s per chip name; a chip not in the table has no peak."""
    visible_devices_env: str | None = None
    launcher: str = "torchrun"
    fsdp: bool = True
    compile_cache_env: str | None = "TORCHINDUCTOR_CACHE_DIR"
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
    framework_env: Mapping[str, str] = field(default_factory=lambda: dict(EAGER_FRAMEWORK_ENV))
    """What Accelerate/Transformers must read at import to pick this device (see ``Shims.framework_env``)."""


def _accelerator_matches(device_type: str, vendor: EagerVendor | None = None) -> bool:
    if vendor is not None and vendor.device_module_first:
        return False
    accel = getattr(torch, "accelerator", None)
    if accel is None:
        return False
    current = accel.current_accelerator()
    return current is not None and current.type == device_type


class EagerPlacement:
    """Placement for an eager device."""

    def __init__(self, vendor: EagerVendor) -> None:
        self.vendor = vendor
        self.device_type = vendor.device_type
        self._device_module: Any = None

    def _module(self) -> ModuleType | None:
        module = getattr(torch, self.device_type, None)
        return module if isinstance(module, ModuleType) else None

    def device_count(self) -> int:
        if _accelerator_matches(self.device_type, self.vendor):
            return int(torch.accelerator.device_count())
        module = self._module()
        return int(module.device_count()) if module is not None and hasattr(module, "device_count") else 0

    def device(self, index: int | None = None) -> torch.device:
        if self.vendor.host:
            return torch.device(self.device_type)
        if index is None:
            count = self.device_count()
            index = local_rank() % count if count else 0
        return torch.device(self.device_type, index)

    def set_device(self, index: int) -> None:
        if _accelerator_matches(self.device_type, self.vendor):
            torch.accelerator.set_device_index(index)
        elif (module := self._module()) is not None and hasattr(module, "set_device"):
            module.set_device(index)

    def synchronize(self) -> None:
        if _accelerator_matches(self.device_type, self.vendor):
            torch.accelerator.synchronize()
        elif (module := self._module()) is not None and hasattr(module, "synchronize"):
            module.synchronize()

    def step(self) -> None:
        """Eager devices run each op as it is issued: nothing to flush."""

    def manual_seed(self, seed: int) -> None:
        random.seed(seed)
        torch.manual_seed(seed)  # seeds the CPU and every initialised accelerator generator

    def autocast_dtype(self) -> torch.dtype:
        return self.vendor.autocast_dtype()

    def autocast(self, dtype: torch.dtype | None = None, enabled: bool = True) -> AbstractContextManager[Any]:
        return torch.autocast(self.device_type, dtype=dtype or self.autocast_dtype(), enabled=enabled)

    def memory_stats(self) -> MemoryStats:
        index = self.device().index or 0
        if self.vendor.memory_stats is not None:
            return MemoryStats(self.vendor.memory_stats(index))
        if _accelerator_matches(self.device_type, self.vendor) and hasattr(torch.accelerator, "memory_allocated"):
            accel = torch.accelerator
            return MemoryStats(
                {
                    "allocated_bytes": int(accel.memory_allocated(index)),
                    "reserved_bytes": int(accel.memory_reserved(index)),
                    "peak_allocated_bytes": int(accel.max_memory_allocated(index)),
                    "peak_reserved_bytes": int(accel.max_memory_reserved(index)),
                }
            )
        return MemoryStats(reason=f"{self.device_type}: {self.vendor.no_memory_stats_reason}")

    def data_loader(self, loader: Iterable[T]) -> Iterable[T]:
        return Prefetcher(loader, self.device(), non_blocking=not self.vendor.host)

    def fallback_ops(self) -> dict[str, int]:
        """Eager runtimes keep no fallback counters (a CPU fallback shows as a warning the matrix reads)."""
        return {}

    def compilations(self) -> int | None:
        """None: an eager device compiles no graph per step."""
        return None

    def device_module(self) -> Any:
        """``ad.device_module()``: ``torch.<device>`` or a DeviceModule (``shims.device_modules``)."""
        if self._device_module is None:
            from anydevice.shims.device_modules import eager_device_module

            self._device_module = eager_device_module(self)
        return self._device_module

    def generator(self, seed: int) -> torch.Generator:
        """A ``torch.Generator`` on this device, seeded."""
        return torch.Generator(device=self.device()).manual_seed(int(seed))


class EagerCompilation:
    """``torch.compile`` with the vendor's backend; inductor's cache under ``ANYDEVICE_CACHE_DIR``."""

    def __init__(self, vendor: EagerVendor) -> None:
        self.vendor = vendor
        self.backend = vendor.compile_backend

    def cache_dir(self) -> Path | None:
        env = self.vendor.compile_cache_env
        if env is None:
            return None
        if os.environ.get(env):
            return Path(os.environ[env])
        return settings.writable_cache_dir(self.backend)

    def compile(self, model: T, **options: Any) -> T:
        own = options.get("backend", self.backend) == self.backend  # another backend: only torch.compile's keywords
        understood = self.vendor.compile_options if own else compile_options.TORCH_COMPILE
        compile_options.check(self.vendor.device_type, options, understood)
        env = self.vendor.compile_cache_env
        if env is not None and not os.environ.get(env):
            os.environ[env] = str(self.cache_dir())  # the backend reads it at first compile
        kwargs = {**self.vendor.compile_defaults, **options}
        kwargs.setdefault("backend", self.backend)
        compiled: T = torch.compile(model, **kwargs)  # type: ignore[call-overload]
        return compiled


class EagerCollectives:
    """Process groups through torch.distributed with the vendor's backend; DDP and FSDP2."""

    def __init__(self, vendor: EagerVendor, placement: EagerPlacement) -> None:
        self.vendor = vendor
        self.placement = placement
        self.backend = vendor.dist_backend
        self.init_method = "env://"
        self.launcher = vendor.launcher
        self.mesh_device_type = vendor.device_type
        self.lacking_reduce_ops: frozenset[str] = frozenset()

    def launch(self, spec: LaunchSpec) -> int:
        return registered_launcher(self.launcher)(spec)

    def launch_env(self, local_rank: int, local_world_size: int) -> dict[str, str]:
        env = self.vendor.visible_devices_env
        extra = self.vendor.launch_env(local_rank, local_world_size) if self.vendor.launch_env else {}
        return {**({env: str(local_rank)} if env else {}), **extra}

    def wrap(self, model: Any, strategy: str, **options: Any) -> Any:
        if strategy == "ddp":
            device = self.placement.device()
            ids = None if device.index is None else [device.index]  # DDP takes no device_ids for host modules
            return parallel.ddp(model, device_ids=ids, **options)
        if strategy == "fsdp":
            if not self.vendor.fsdp:
                raise UnsupportedFeatureError(f"FSDP is not supported on {self.vendor.device_type}.", "Use wrap(model, 'ddp').")
            return parallel.fsdp(model, self.mesh_device_type, **options)
        raise UnsupportedFeatureError(f"Unknown wrapping strategy '{strategy}'.", "Use 'ddp' or 'fsdp'.")


class EagerProfiling:
    """torch.profiler with the device's activity; peak FLOP/s from the vendor's table."""

    def __init__(self, vendor: EagerVendor) -> None:
        self.vendor = vendor

    def trace(self, directory: Path, **options: Any) -> AbstractContextManager[TraceSession]:
        config = self.vendor.profiler_config(Path(directory)) if self.vendor.profiler_config else None
        if self.vendor.profiler_viewer:
            options.setdefault("viewer", self.vendor.profiler_viewer)
        return torch_profiler_trace(Path(directory), self.vendor.profiler_activities, experimental_config=config, **options)

    def chip(self) -> str | None:
        return self.vendor.chip()

    def record(self, name: str) -> AbstractContextManager[None]:
        return torch_profiler.record(name)

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
        framework_env=dict(vendor.framework_env),
    )
