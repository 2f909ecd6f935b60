"""What every slow plugin does: log its import's start and end (ANYDEVICE_TEST_SLOW_LOG) around a 1 s sleep."""

from __future__ import annotations

import os
import time
from collections.abc import Callable

from anydevice.contract.device_spec import Detection, DeviceSpec
from anydevice.contract.hookspecs import hookimpl


def arrive(module: str) -> None:
    name = module.rsplit(".", 1)[1]
    log = os.environ.get("ANYDEVICE_TEST_SLOW_LOG")
    if log:
        with open(log, "a") as handle:
            handle.write(f"start {name} {time.time():.6f} {os.getpid()}\n")
    time.sleep(1.0)  # a vendor SDK's slow import, far under the deadline
    if log:
        with open(log, "a") as handle:
            handle.write(f"end {name} {time.time():.6f} {os.getpid()}\n")


def registration(module: str) -> Callable[..., None]:
    name = module.rsplit(".", 1)[1]

    def detect() -> Detection:
        return Detection.ok(f"{name} is here", count=1)

    @hookimpl
    def anydevice_register_devices(register: Callable[[DeviceSpec], None]) -> None:
        register(DeviceSpec(name=f"{name}dev", detect=detect, load=lambda: None, priority=-100))

    return anydevice_register_devices
