"""A plugin whose detection reports ``count="many"``."""

from __future__ import annotations

from collections.abc import Callable

from anydevice.contract.device_spec import Detection, DeviceSpec
from anydevice.contract.hookspecs import hookimpl
from anydevice_hostile import never_loaded


def detect() -> Detection:
    return Detection.ok("found some", count="many")  # type: ignore[arg-type]


@hookimpl
def anydevice_register_devices(register: Callable[[DeviceSpec], None]) -> None:
    register(DeviceSpec(name="badcount", detect=detect, load=never_loaded, priority=300))
