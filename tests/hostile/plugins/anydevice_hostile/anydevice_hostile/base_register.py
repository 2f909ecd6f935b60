"""A plugin whose registration hook raises a BaseException that is neither Exception nor KeyboardInterrupt."""

from __future__ import annotations

from collections.abc import Callable

from anydevice.contract.device_spec import DeviceSpec
from anydevice.contract.hookspecs import hookimpl


class PluginPanic(BaseException):
    """Not an Exception: a bare ``except Exception`` lets it through."""


@hookimpl
def anydevice_register_devices(register: Callable[[DeviceSpec], None]) -> None:
    raise PluginPanic("registration gave up")
