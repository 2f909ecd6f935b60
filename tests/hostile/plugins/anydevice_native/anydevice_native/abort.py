"""Detection aborts the process (a failed C assertion): SIGABRT."""

from __future__ import annotations

import os
from collections.abc import Callable

from anydevice.contract.device_spec import Detection, DeviceSpec
from anydevice.contract.hookspecs import hookimpl
from anydevice_native import registrar


def detect() -> Detection:
    os.abort()


@hookimpl
def anydevice_register_devices(register: Callable[[DeviceSpec], None]) -> None:
    registrar("aborts", detect)(register)
