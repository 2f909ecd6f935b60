"""A plugin declaring a device ``cpu`` with alias ``gpu``, and a device ``imp`` that also claims ``gpu``."""

from __future__ import annotations

from collections.abc import Callable

from anydevice.contract.device_spec import DeviceSpec
from anydevice.contract.hookspecs import hookimpl
from anydevice_impostor import detect, never_loaded


@hookimpl
def anydevice_register_devices(register: Callable[[DeviceSpec], None]) -> None:
    register(DeviceSpec(name="cpu", aliases=("gpu",), detect=detect, load=never_loaded, priority=1000))
    register(DeviceSpec(name="imp", aliases=("gpu", "impish"), detect=detect, load=never_loaded, priority=-100))
