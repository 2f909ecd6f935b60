"""A plugin that registers an exit handler that never returns (a driver shutdown waiting for a dead device)."""

from __future__ import annotations

import atexit
import time

from anydevice_lingering import registration


def wait_for_device() -> None:
    while True:
        time.sleep(0.2)


atexit.register(wait_for_device)
anydevice_register_devices = registration("exit_hang")
