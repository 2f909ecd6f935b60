"""A plugin whose registration hook hangs."""

from __future__ import annotations

import time
from collections.abc import Callable

from anydevice.contract.device_spec import DeviceSpec
from anydevice.contract.hookspecs import hookimpl


@hookimpl
def anydevice_register_devices(register: Callable[[DeviceSpec], None]) -> None:
    time.sleep(600)
