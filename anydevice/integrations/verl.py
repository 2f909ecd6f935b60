"""verl's platform backed by anydevice: ``VERL_PLATFORM=anydevice`` runs verl on the device ``ANYDEVICE`` selects.

    pip install anydevice verl           # the `verl.plugins` entry point registers the platform when verl is imported
    VERL_PLATFORM=anydevice ANYDEVICE=cpu python -m verl.trainer.main_ppo ...

The platform (:class:`AnyDevicePlatform`, registered as ``anydevice``) answers verl's ``PlatformBase``
from the selected backend: the device type, the process-group backend, the Ray resource the plugin
declares, a ``torch.cuda``-shaped device module (``ad.device_module()``). Memory answers say unknown
instead of 0: :meth:`AnyDevicePlatform.memory_allocated` and :meth:`AnyDevicePlatform.mem_get_info`
return None where the runtime keeps no counters, and the device module raises
``UnsupportedDeviceFunctionError`` for them (verl's own TPU platform answers 0 and ``(total, total)``).
A named device that is unusable is anydevice's clear error, never verl's fallback to another platform.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from types import ModuleType
from typing import Any

from verl.plugin.platform import PlatformBase, PlatformRegistry

import anydevice.api as ad
from anydevice.errors import AnyDeviceError, UnsupportedDeviceFunctionError

NAME = "anydevice"


@PlatformRegistry.register(platform=NAME)  # type: ignore[untyped-decorator, unused-ignore]  # verl is untyped
class AnyDevicePlatform(PlatformBase):  # type: ignore[misc, unused-ignore]  # verl's base class is untyped
    """verl's ``PlatformBase`` over the device anydevice selects (``ANYDEVICE``, or ``ANYDEVICE_ROLES`` by ``role``)."""

    def __init__(self, role: str | None = None) -> None:
        self.role = role

    def _backend(self) -> Any:
        if self.role is not None:
            from anydevice.runtime.roles import backend_for

            return backend_for(self.role)
        return ad.backend()

    @property
    def device_name(self) -> str:
        return str(self._backend().device_type)

    @property
    def vendor_name(self) -> str:
        """The anydevice plugin that provides the device (verl keys engines by device and vendor)."""
        return str(self._backend().plugin)

    @property
    def device_module(self) -> ModuleType:
        module: ModuleType = ad.device_module()
        return module

    def is_available(self) -> bool:
        try:
            return int(self._backend().count) > 0
        except AnyDeviceError:
            return False

    def is_platform_available(self, use_smi_check: bool = False) -> bool:
        """Whether anydevice's selection resolves here (cheap detection; nothing is loaded)."""
        from anydevice.runtime.backend import requested
        from anydevice.runtime.registry import get_registry
        from anydevice.runtime.selection import resolve

        try:
            resolve(requested(), get_registry())
        except AnyDeviceError:
            return False
        return True

    def current_device(self) -> int:
        return ad.device(self.role).index or 0

    def device_count(self) -> int:
        return int(self._backend().count)

    def set_device(self, device_index: int) -> None:
        self.device_module.set_device(device_index)

    def synchronize(self, device_index: int | None = None) -> None:
        ad.synchronize()

    def manual_seed(self, seed: int) -> None:
        ad.manual_seed(seed)

    def manual_seed_all(self, seed: int) -> None:
        ad.manual_seed(seed)

    def set_allocator_settings(self, settings: str) -> None:
        """A tuning knob verl sets at start-up (expandable segments); passed on where the device module has one."""
        setter = getattr(getattr(self.device_module, "memory", None), "_set_allocator_settings", None)
        if callable(setter):
            setter(settings)

    def empty_cache(self) -> None:
        self.device_module.empty_cache()

    def get_device_capability(self, device_index: int = 0) -> tuple[int | None, int | None]:
        """``(major, minor)`` where the device module has it, else ``(None, None)``: unknown."""
        get = getattr(self.device_module, "get_device_capability", None)
        if not callable(get):
            return (None, None)
        try:
            major, minor = get(device_index)
        except UnsupportedDeviceFunctionError:
            return (None, None)
        return (int(major), int(minor))

    def memory_allocated(self) -> int | None:
        """Bytes allocated on the device, or None when the runtime keeps no counter (unknown, not 0)."""
        return ad.memory_stats().get("allocated_bytes")

    def mem_get_info(self) -> tuple[int, int] | None:
        """``(free, total)`` bytes, or None when either is unknown (never ``(total, total)``)."""
        stats = ad.memory_stats()
        total, used = stats.get("total_bytes"), stats.get("allocated_bytes")
        return None if total is None or used is None else (total - used, total)

    def communication_backend_name(self) -> str:
        return str(self._backend().shims.collectives.backend)

    def visible_devices_envvar(self) -> str:
        """The variable the device's serving engine reads for visible devices (declared by its plugin), or ``""``."""
        from anydevice.runtime.registry import get_registry

        serving = get_registry().get(self._backend().name).spec.serving.get("vllm")
        return (serving.visible_devices if serving is not None else None) or ""

    @contextmanager
    def nvtx_range(self, msg: str) -> Iterator[None]:
        with ad.record(msg):
            yield

    def profiler_start(self) -> None:
        """No-op: anydevice traces with ``ad.profile(dir)`` around the code instead of start/stop calls."""

    def profiler_stop(self) -> None:
        """No-op (see :meth:`profiler_start`)."""

    def ray_resource_name(self) -> str:
        """The Ray resource the device's plugin declares (``GPU``, ``TPU``), or ``CPU`` for a device needing only a CPU."""
        from anydevice.integrations.ray import worker_resource

        return worker_resource(self._backend().name) or "CPU"

    def ray_resource_options(self, num_gpus: float) -> dict[str, Any]:
        """Ray actor options for ``num_gpus`` of the device's resource (none for a device needing only a CPU)."""
        from anydevice.integrations.ray import worker_resource

        resource = worker_resource(self._backend().name)
        if resource is None:
            return {}
        return {"num_gpus": num_gpus} if resource == "GPU" else {"resources": {resource: num_gpus}}

    def ray_noset_envvars(self) -> list[str]:
        return []

    def is_ipc_supported(self) -> bool:
        """False: anydevice declares no cross-process device-memory handles, so verl moves weights through shared memory."""
        return False

    def rollout_env_vars(self) -> dict[str, str]:
        """The rollout engine's environment: ``ANYDEVICE`` (and the roles) so the engine selects the same device."""
        from anydevice.integrations.ray import worker_env

        return worker_env(self._backend().name)

    def cudart(self) -> Any:
        return None
