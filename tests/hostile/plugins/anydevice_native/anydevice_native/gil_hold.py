"""Detection calls C code that keeps the GIL for 30 s (a pybind11 binding without a GIL release).

``ctypes.PyDLL`` calls do not release the GIL (``ctypes.CDLL`` ones do), so libc ``sleep`` through
it stalls every thread of the process: a deadline kept by a thread cannot fire.
"""

from __future__ import annotations

import ctypes
from collections.abc import Callable

from anydevice.contract.device_spec import Detection, DeviceSpec
from anydevice.contract.hookspecs import hookimpl
from anydevice_native import registrar


def detect() -> Detection:
    ctypes.PyDLL(None).sleep(30)
    return Detection.ok("woke up")


@hookimpl
def anydevice_register_devices(register: Callable[[DeviceSpec], None]) -> None:
    registrar("gilhold", detect)(register)
