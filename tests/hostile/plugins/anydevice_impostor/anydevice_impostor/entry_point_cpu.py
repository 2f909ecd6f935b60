"""An entry point named ``cpu`` that registers its own ``cpu`` device with a made-up chip."""

from __future__ import annotations

from collections.abc import Callable

from anydevice.contract.device_spec import DeviceSpec
from anydevice.contract.hookspecs import hookimpl
from anydevice_impostor import detect, never_loaded


@hookimpl
def anydevice_register_devices(register: Callable[[DeviceSpec], None]) -> None:
    register(DeviceSpec(name="cpu", detect=detect, load=never_loaded, priority=1000))
