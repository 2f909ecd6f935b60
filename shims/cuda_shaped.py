"""The ``torch.cuda``-shaped module (``ad.device_module()``): its surface, the :class:`DeviceModule`
built on a placement, and the factories the eager and lazy XLA placements call.

Frameworks written against ``torch.cuda`` (torchtitan's ``device_module``, tutorial code) call a
handful of functions: :data:`SURFACE`, plus ``Stream``/``Event`` where the device has them. What a
device lacks raises :class:`~anydevice.errors.UnsupportedDeviceFunctionError` naming the function and
the device, never a made-up number.

Eager devices: ``torch.<device>`` itself where it has the whole :data:`SURFACE` (cuda, xpu); otherwise a
:class:`DeviceModule` on the placement, taking what ``torch.<device>`` does have (``torch.cpu``'s streams,
``torch.mps``'s seed and cache). Lazy XLA devices: a ``DeviceModule`` whose seed is ``torch_xla.manual_seed``,
whose ``synchronize`` launches the pending graph then waits (``torch_xla.sync()`` + ``xm.wait_device_ops()``)
and whose memory comes from the PJRT runtime.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from types import ModuleType
from typing import TYPE_CHECKING, Any

import torch

from anydevice.errors import UnsupportedDeviceFunctionError

if TYPE_CHECKING:
    from anydevice.shims.contracts import MemoryStats, Placement
    from anydevice.shims.eager import EagerPlacement
    from anydevice.shims.lazy_xla import XlaPlacement

SURFACE = (
    "is_available",
    "device_count",
    "current_device",
    "set_device",
    "synchronize",
    "manual_seed",
    "manual_seed_all",
    "get_device_name",
    "get_device_properties",
    "memory_stats",
    "memory_allocated",
    "max_memory_allocated",
    "memory_reserved",
    "max_memory_reserved",
    "reset_peak_memory_stats",
    "empty_cache",
)
"""The ``torch.cuda`` functions every device module answers (or refuses by name)."""

NATIVE = (
    "manual_seed",
    "manual_seed_all",
    "get_device_name",
    "get_device_properties",
    "memory_stats",
    "memory_allocated",
    "max_memory_allocated",
    "memory_reserved",
    "max_memory_reserved",
    "reset_peak_memory_stats",
    "empty_cache",
    "is_bf16_supported",
    "Stream",
    "Event",
    "current_stream",
    "stream",
)
"""Names a :class:`DeviceModule` takes from ``torch.<device>`` when that module has them."""

# MemoryStats key (anydevice's) -> torch.cuda.memory_stats() key and the function that reads it.
_MEMORY = {
    "allocated_bytes": ("allocated_bytes.all.current", "memory_allocated"),
    "peak_allocated_bytes": ("allocated_bytes.all.peak", "max_memory_allocated"),
    "reserved_bytes": ("reserved_bytes.all.current", "memory_reserved"),
    "peak_reserved_bytes": ("reserved_bytes.all.peak", "max_memory_reserved"),
}


class DeviceProperties:
    """What ``get_device_properties`` returns: ``name`` and, where the device reports it, ``total_memory``."""

    def __init__(self, device: str, name: str, total_memory: int | None, why_unknown: str) -> None:
        self.device = device
        self.name = name
        self._total_memory = total_memory
        self._why_unknown = why_unknown

    @property
    def total_memory(self) -> int:
        """Device memory in bytes; raises where the runtime does not report it."""
        if self._total_memory is None:
            raise UnsupportedDeviceFunctionError("get_device_properties().total_memory", self.device, self._why_unknown)
        return self._total_memory

    def __getattr__(self, name: str) -> Any:
        """CUDA-only properties (``major``, ``multi_processor_count``, ...) raise, naming the property."""
        if name.startswith("_"):
            raise AttributeError(name)
        raise UnsupportedDeviceFunctionError(f"get_device_properties().{name}", self.device, "CUDA reports it, this one does not")

    def __repr__(self) -> str:
        memory = "unknown" if self._total_memory is None else f"{self._total_memory / 2**20:.0f}MB"
        return f"DeviceProperties(name={self.name!r}, total_memory={memory})"


class DeviceModule:
    """A ``torch.cuda``-shaped view of one selected device, answered by its placement shim.

    :param name: the device's anydevice name, for messages (``cpu``, ``xla``).
    :param placement: the selected Placement shim (count, set_device, synchronize, memory stats).
    :param seed: seeds the device's generator (``torch.cuda.manual_seed``'s job).
    :param chip: the chip's name for ``get_device_name``, or None when unknown.
    :param native: ``torch.<device>``: the :data:`NATIVE` names it has are used as they are.
    :param total_memory: device memory in bytes, or None when the runtime does not report it.
    :param cache_note: why ``empty_cache`` has nothing to do here (the device keeps no cache of freed
        blocks that a caller could release); None makes ``empty_cache`` raise.
    :param synchronize: waits for the device's work; default the placement's ``synchronize`` (a lazy
        device passes one that also launches the pending graph, as ``torch.cuda.synchronize`` implies).
    """

    def __init__(
        self,
        name: str,
        placement: Placement,
        seed: Callable[[int], None],
        chip: Callable[[], str | None] = lambda: None,
        native: Any = None,
        total_memory: Callable[[], int | None] = lambda: None,
        cache_note: str | None = None,
        synchronize: Callable[[], None] | None = None,
    ) -> None:
        self.name = name
        self._placement = placement
        self._seed = seed
        self._chip = chip
        self._native = native
        self._total_memory = total_memory
        self._cache_note = cache_note
        self._synchronize = synchronize or placement.synchronize
        self._current: int | None = None

    def __repr__(self) -> str:
        return f"<anydevice device module for {self.name}>"

    def _has_native(self, name: str) -> bool:
        return self._native is not None and hasattr(self._native, name)

    def _missing(self, function: str, reason: str) -> UnsupportedDeviceFunctionError:
        return UnsupportedDeviceFunctionError(
            function, self.name, reason, "Guard the call, or run where the device provides it (`anydevice info`)."
        )

    def _index(self, function: str, device: Any) -> int:
        """The device index ``device`` names (None: the current one); another index than this process's is refused."""
        if device is None:
            return self.current_device()
        if isinstance(device, int):
            index: int | None = device
        else:
            import torch

            index = torch.device(device).index if isinstance(device, str) else getattr(device, "index", None)
        return self.current_device() if index is None else int(index)

    def _stats(self, function: str, device: Any) -> MemoryStats:
        index = self._index(function, device)
        if index != self.current_device():
            raise self._missing(function, f"only this process's device ({self.current_device()}) reports memory, not {index}")
        stats = self._placement.memory_stats()
        if not stats:
            reason = stats.reason or "the runtime reports no memory statistics"
            raise self._missing(function, reason.removeprefix(f"{self.name}: "))
        return stats

    def _counter(self, function: str, key: str, device: Any) -> int:
        if self._has_native(function):
            return int(getattr(self._native, function)(device))
        stats = self._stats(function, device)
        if key not in stats:
            raise self._missing(function, f"the runtime reports {', '.join(sorted(stats))} but not {key}")
        return int(stats[key])

    def is_available(self) -> bool:
        """True: the device was selected and loaded."""
        return True

    def is_initialized(self) -> bool:
        """True: the device was loaded when this module was built."""
        return True

    def init(self) -> None:
        """Nothing to do: the device was initialised when it was selected."""

    def device_count(self) -> int:
        """How many devices of this type the process sees."""
        return int(self._placement.device_count())

    def current_device(self) -> int:
        """The index of the current device (the local rank's unless :meth:`set_device` changed it)."""
        if self._current is None:
            self._current = self._placement.device().index or 0
        return self._current

    def set_device(self, device: Any) -> None:
        """Make ``device`` (an index, ``"name:i"`` or ``torch.device``) the current device."""
        index = self._index("set_device", device)
        self._placement.set_device(index)
        self._current = index

    @contextmanager
    def device(self, device: Any) -> Iterator[None]:
        """Context manager: ``device`` is current inside the block (``torch.cuda.device``)."""
        before = self.current_device()
        self.set_device(device)
        try:
            yield
        finally:
            self.set_device(before)

    def synchronize(self, device: Any = None) -> None:
        """Wait until the work issued to the device has finished."""
        self._synchronize()

    def manual_seed(self, seed: int) -> None:
        """Seed the device's random generator."""
        if self._has_native("manual_seed"):
            self._native.manual_seed(seed)
        else:
            self._seed(int(seed))

    def manual_seed_all(self, seed: int) -> None:
        """Seed the generators of every device of this type the process drives."""
        if self._has_native("manual_seed_all"):
            self._native.manual_seed_all(seed)
        else:
            self._seed(int(seed))

    def get_device_name(self, device: Any = None) -> str:
        """The chip's name."""
        if self._has_native("get_device_name"):
            return str(self._native.get_device_name(device))
        chip = self._chip()
        if not chip:
            raise self._missing("get_device_name", "the plugin does not know the chip's name")
        return chip

    def get_device_properties(self, device: Any = None) -> Any:
        """``name`` and ``total_memory`` (bytes; raises where the runtime does not report it)."""
        if self._has_native("get_device_properties"):
            return self._native.get_device_properties(device)
        total = self._total_memory()
        why = "the runtime does not report the device's memory size"
        return DeviceProperties(self.name, self.get_device_name(device), total, why)

    def memory_stats(self, device: Any = None) -> dict[str, int]:
        """Allocator counters under ``torch.cuda.memory_stats`` keys (only those the device reports)."""
        if self._has_native("memory_stats"):
            return dict(self._native.memory_stats(device))
        stats = self._stats("memory_stats", device)
        return {cuda_key: int(stats[key]) for key, (cuda_key, _) in _MEMORY.items() if key in stats}

    def memory_allocated(self, device: Any = None) -> int:
        """Bytes held by tensors now."""
        return self._counter("memory_allocated", "allocated_bytes", device)

    def max_memory_allocated(self, device: Any = None) -> int:
        """The most bytes held by tensors since start (or the last reset)."""
        return self._counter("max_memory_allocated", "peak_allocated_bytes", device)

    def memory_reserved(self, device: Any = None) -> int:
        """Bytes the allocator holds from the device now."""
        return self._counter("memory_reserved", "reserved_bytes", device)

    def max_memory_reserved(self, device: Any = None) -> int:
        """The most bytes the allocator held since start (or the last reset)."""
        return self._counter("max_memory_reserved", "peak_reserved_bytes", device)

    def reset_peak_memory_stats(self, device: Any = None) -> None:
        """Restart the peak counters."""
        if self._has_native("reset_peak_memory_stats"):
            self._native.reset_peak_memory_stats(device)
            return
        raise self._missing("reset_peak_memory_stats", "the runtime's peak counters cannot be reset")

    def empty_cache(self) -> None:
        """Release cached, unused device memory; returns at once where the device keeps no such cache."""
        if self._has_native("empty_cache"):
            self._native.empty_cache()
        elif self._cache_note is None:
            raise self._missing("empty_cache", "the runtime has no call that releases cached memory")

    def is_bf16_supported(self) -> bool:
        """Whether the device computes in bfloat16."""
        if self._has_native("is_bf16_supported"):
            return bool(self._native.is_bf16_supported())
        import torch

        return self._placement.autocast_dtype() == torch.bfloat16

    def _native_attr(self, name: str) -> Any:
        if not self._has_native(name):
            raise self._missing(name, "the device has no streams or events in torch")
        return getattr(self._native, name)

    @property
    def Stream(self) -> Any:
        """The device's stream class (where it has one)."""
        return self._native_attr("Stream")

    @property
    def Event(self) -> Any:
        """The device's event class (where it has one)."""
        return self._native_attr("Event")

    @property
    def current_stream(self) -> Any:
        """The device's ``current_stream`` function (where it has streams)."""
        return self._native_attr("current_stream")

    @property
    def stream(self) -> Any:
        """The device's ``stream`` context manager (where it has streams)."""
        return self._native_attr("stream")


NO_CACHE = "the device keeps no cache of freed memory to release"


def _torch_module(device_type: str) -> ModuleType | None:
    try:
        module = torch.get_device_module(device_type)
    except (RuntimeError, AttributeError):
        return None
    return module if isinstance(module, ModuleType) else None


def _host_memory() -> int | None:
    try:
        return int(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES"))
    except (ValueError, OSError, AttributeError):
        return None


def _cpu_seed(seed: int) -> None:
    torch.default_generator.manual_seed(seed)  # the CPU generator only (torch.manual_seed also seeds others)


def eager_device_module(placement: EagerPlacement) -> Any:
    """``torch.<device>`` where it is a complete ``torch.cuda``-shaped module, else a DeviceModule."""
    device_type = placement.device_type
    native = _torch_module(device_type)
    if native is not None and all(callable(getattr(native, name, None)) for name in SURFACE):
        return native
    cpu = placement.host  # declared by the plugin (PlacementTable.host), never inferred from the device type
    return DeviceModule(
        device_type,
        placement,
        seed=_cpu_seed if cpu or native is None or not hasattr(native, "manual_seed") else native.manual_seed,
        chip=placement.vendor.profiling.chip,
        native=native,
        total_memory=_host_memory if cpu else lambda: placement.memory_stats().get("total_bytes"),
        cache_note=NO_CACHE if cpu else None,
    )


def xla_device_module(placement: XlaPlacement) -> DeviceModule:
    """A DeviceModule for a torch_xla device: ``torch_xla.manual_seed``, PJRT memory info, no streams."""
    import torch_xla
    import torch_xla.core.xla_model as xm

    vendor = placement.vendor

    def seed(value: int) -> None:
        torch_xla.manual_seed(value)

    def synchronize() -> None:
        torch_xla.sync()  # the traced ops run only once their graph is cut: CUDA code expects them done
        xm.wait_device_ops()

    return DeviceModule(
        vendor.name,
        placement,
        seed=seed,
        chip=lambda: vendor.chip() or f"PJRT {vendor.pjrt_device}",
        total_memory=lambda: placement.memory_stats().get("total_bytes"),
        cache_note="PJRT frees a buffer when its last tensor goes; there is no cache to empty",
        synchronize=synchronize,
    )
