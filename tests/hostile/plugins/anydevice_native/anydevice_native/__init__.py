"""Plugins whose detection no thread can guard: each does for real what a broken native binding does."""

from __future__ import annotations

from collections.abc import Callable
from typing import NoReturn

from anydevice.contract.device_spec import Detection, DeviceSpec


def never_loaded() -> NoReturn:
    raise AssertionError("a native-hostile plugin's device must never be loaded")


def registrar(name: str, detect: Callable[[], Detection]) -> Callable[[Callable[[DeviceSpec], None]], None]:
    """The registration hook body for one device with ``detect`` (priority 600: auto asks it first)."""

    def register_devices(register: Callable[[DeviceSpec], None]) -> None:
        register(DeviceSpec(name=name, detect=detect, load=never_loaded, priority=600))

    return register_devices
