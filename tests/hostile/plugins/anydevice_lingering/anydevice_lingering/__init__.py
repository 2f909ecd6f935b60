"""Hostile plugins (tests/hostile): each leaves, at import, something that would keep a process from ending."""

from __future__ import annotations

from collections.abc import Callable

from anydevice.contract.device_spec import Detection, DeviceSpec
from anydevice.contract.hookspecs import hookimpl


def registration(name: str) -> Callable[..., None]:
    """An available device ``NAMEdev`` for plugin ``name``: the plugin works; only what it leaves behind is hostile."""

    def detect() -> Detection:
        return Detection.ok(f"{name} is here", count=1)

    @hookimpl
    def anydevice_register_devices(register: Callable[[DeviceSpec], None]) -> None:
        register(DeviceSpec(name=f"{name}dev", detect=detect, load=lambda: None, priority=-100))

    return anydevice_register_devices
