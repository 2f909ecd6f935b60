"""A plugin declaring a device named ``"Bad Name"`` and one with the alias ``"Bad Alias"``."""

from __future__ import annotations

from collections.abc import Callable

from anydevice.contract.device_spec import Detection, DeviceSpec
from anydevice.contract.hookspecs import hookimpl
from anydevice_hostile import never_loaded


def detect() -> Detection:
    return Detection.ok("always here")


@hookimpl
def anydevice_register_devices(register: Callable[[DeviceSpec], None]) -> None:
    register(DeviceSpec(name="Bad Name", detect=detect, load=never_loaded))
    register(DeviceSpec(name="goodname", aliases=("Bad Alias",), detect=detect, load=never_loaded, priority=-50))
