"""Detection dereferences a null pointer: SIGSEGV."""

from __future__ import annotations

import ctypes
from collections.abc import Callable

from anydevice.contract.device_spec import Detection, DeviceSpec
from anydevice.contract.hookspecs import hookimpl
from anydevice_native import registrar


def detect() -> Detection:
    ctypes.string_at(0)
    return Detection.ok("unreachable")


@hookimpl
def anydevice_register_devices(register: Callable[[DeviceSpec], None]) -> None:
    registrar("segv", detect)(register)
