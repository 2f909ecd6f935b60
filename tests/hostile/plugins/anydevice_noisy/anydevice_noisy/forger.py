"""A plugin whose texts carry terminal escape sequences, forged rows and a 5 MB reason."""

from __future__ import annotations

from collections.abc import Callable
from typing import NoReturn

from anydevice.contract.device_spec import Detection, DeviceSpec
from anydevice.contract.hookspecs import hookimpl

TITLE = "\x1b]0;pwned\x07"
FORGED_ROW = "\ncpu     ✓ available    forged row"


def never_loaded() -> NoReturn:
    raise AssertionError("never selected")


NOT_UTF8 = b"/data/caf\xe9/dev0".decode("utf-8", "surrogateescape")  # a Latin-1 path as os.fsdecode gives it


def escapes() -> Detection:
    reason = f"no chip{TITLE}{FORGED_ROW} at {NOT_UTF8}"
    return Detection(False, reason, "fix\x1b[31m red", "no_hardware", chip=f"Chip{TITLE}")


def huge() -> Detection:
    return Detection.missing("x" * 5_000_000, "y" * 5_000_000, "no_hardware")


@hookimpl
def anydevice_register_devices(register: Callable[[DeviceSpec], None]) -> None:
    register(DeviceSpec(name="escapes", detect=escapes, load=never_loaded, priority=4))
    register(DeviceSpec(name="huge", detect=huge, load=never_loaded, priority=3))
