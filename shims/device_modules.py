"""The ``torch.cuda``-shaped module (``ad.device_module()``) of eager and lazy XLA devices.

Eager devices: ``torch.<device>`` itself where it has the whole :data:`~anydevice.device_module.SURFACE`
(cuda, xpu); otherwise a :class:`~anydevice.device_module.DeviceModule` on the placement, taking what
``torch.<device>`` does have (``torch.cpu``'s streams, ``torch.mps``'s seed and cache). Lazy XLA devices:
a ``DeviceModule`` whose seed is ``torch_xla.manual_seed``, whose ``synchronize`` launches the pending
graph then waits (``torch_xla.sync()`` + ``xm.wait_device_ops()``) and whose memory comes from the PJRT runtime.
"""

from __future__ import annotations

import os
from types import ModuleType
from typing import TYPE_CHECKING, Any

import torch

from anydevice.device_module import SURFACE, DeviceModule

if TYPE_CHECKING:
    from anydevice.shims.eager import EagerPlacement
    from anydevice.shims.lazy_xla import XlaPlacement

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
