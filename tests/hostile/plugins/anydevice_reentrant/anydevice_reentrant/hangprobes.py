"""A plugin with an available device whose ``anydevice_register_probes`` hook never returns."""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

from anydevice.contract.device_spec import Detection, DeviceSpec
from anydevice.contract.hookspecs import hookimpl


@hookimpl
def anydevice_register_devices(register: Callable[[DeviceSpec], None]) -> None:
    register(DeviceSpec(name="hangprobesdev", detect=lambda: Detection.ok("here", count=1), load=lambda: None, priority=-100))


@hookimpl
def anydevice_register_probes(register: Callable[[Any], None]) -> None:
    threading.Event().wait()
