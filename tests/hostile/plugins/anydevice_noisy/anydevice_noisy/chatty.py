"""A plugin that prints to stdout at import, registration, detection and in its doctor hook (Python and C level)."""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import NoReturn

from anydevice.contract.device_spec import Detection, DeviceSpec
from anydevice.contract.diagnosis import Check, DoctorContext
from anydevice.contract.hookspecs import hookimpl
from anydevice.settings import Setting

print("chatty: hello from import")
os.write(1, b"chatty: raw bytes on fd 1 at import\n")


def never_loaded() -> NoReturn:
    raise AssertionError("never selected")


def detect() -> Detection:
    print("chatty: detecting")
    os.write(1, b"chatty: raw bytes on fd 1 in detection\n")
    log = os.environ.get("CHATTY_DETECTIONS")
    if log:  # tests count how often detection really ran (the cache must spare it)
        with open(log, "a") as runs:
            runs.write(f"{os.getpid()}\n")
    return Detection.missing("chatty has no chip", "nothing to do", "no_hardware")


@hookimpl
def anydevice_register_devices(register: Callable[[DeviceSpec], None]) -> None:
    print("chatty: registering")
    mode = Setting("CHATTY_MODE", "How chatty detects (tests: a declared variable, so a change detects again).", owner="chatty")
    register(DeviceSpec(name="chatty", detect=detect, load=never_loaded, priority=5, settings=(mode,)))


@hookimpl
def anydevice_doctor_checks(context: DoctorContext) -> list[Check]:
    print("chatty: doctor checks")
    return [Check("chatty setting", "info", "chatty judged\nits settings \x1b[2J")]
