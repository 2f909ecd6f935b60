"""A plugin declaring ``priority="high"``."""

from __future__ import annotations

from collections.abc import Callable

from anydevice.contract.device_spec import Detection, DeviceSpec
from anydevice.contract.hookspecs import hookimpl
from anydevice_hostile import never_loaded


def detect() -> Detection:
    return Detection.ok("always here")


@hookimpl
def anydevice_register_devices(register: Callable[[DeviceSpec], None]) -> None:
    register(DeviceSpec(name="badprio", detect=detect, load=never_loaded, priority="high"))  # type: ignore[arg-type]
