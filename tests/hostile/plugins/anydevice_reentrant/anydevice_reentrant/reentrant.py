"""A plugin whose registration hook asks the registry it is being registered by for its devices (re-entrant)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from anydevice.contract.device_spec import Detection, DeviceSpec
from anydevice.contract.hookspecs import hookimpl


@hookimpl
def anydevice_register_devices(register: Callable[[DeviceSpec], None], registry: Any) -> None:
    others = registry.names()  # the registry is still loading: this is the call that used to deadlock
    register(
        DeviceSpec(name="reentrantdev", detect=lambda: Detection.ok(f"after {len(others)}"), load=lambda: None, priority=-100)
    )
