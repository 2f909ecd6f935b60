"""A plugin whose detection hangs (a driver query that never returns)."""

from __future__ import annotations

import time
from collections.abc import Callable

from anydevice.contract.device_spec import Detection, DeviceSpec
from anydevice.contract.hookspecs import hookimpl
from anydevice_hostile import never_loaded


def detect() -> Detection:
    time.sleep(600)
    return Detection.ok("woke up")


@hookimpl
def anydevice_register_devices(register: Callable[[DeviceSpec], None]) -> None:
    register(DeviceSpec(name="hang", detect=detect, load=never_loaded, priority=500))  # auto asks it first
