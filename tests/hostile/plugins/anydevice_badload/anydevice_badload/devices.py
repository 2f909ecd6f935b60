"""Devices that detect as available (priority below cpu, so ``auto`` never picks them) and break when loaded.

- ``exitload``: ``load()`` calls ``sys.exit(9)``;
- ``hangload``: ``load()`` never returns;
- ``noneload``: ``load()`` returns None instead of the shims;
- ``exitprep``: ``prepare_environment()`` calls ``sys.exit(7)``.

Its doctor hook exits too, its probe hook raises SystemExit, and ``exitload``'s pairing rule for
``pip`` (a function of the installed version) exits.
"""

from __future__ import annotations

import sys
import threading
from collections.abc import Callable
from typing import Any, NoReturn

from anydevice.contract.device_spec import Detection, DeviceSpec
from anydevice.contract.diagnosis import Check, DoctorContext
from anydevice.contract.hookspecs import hookimpl


def here() -> Detection:
    return Detection.ok("always here", count=1)


def exits() -> NoReturn:
    sys.exit(9)


def hangs() -> NoReturn:
    threading.Event().wait()
    raise AssertionError("unreachable")


def returns_none() -> Any:
    return None


def prepare_exits() -> None:
    sys.exit(7)


def pairing_rule_exits(installed: str) -> Any:
    sys.exit(8)


@hookimpl
def anydevice_register_devices(register: Callable[[DeviceSpec], None]) -> None:
    register(DeviceSpec(name="exitload", detect=here, load=exits, priority=-100, paired_packages={"pip": pairing_rule_exits}))
    register(DeviceSpec(name="hangload", detect=here, load=hangs, priority=-100))
    register(DeviceSpec(name="noneload", detect=here, load=returns_none, priority=-100))
    register(DeviceSpec(name="exitprep", detect=here, load=exits, prepare_environment=prepare_exits, priority=-100))


@hookimpl
def anydevice_doctor_checks(context: DoctorContext) -> list[Check]:
    sys.exit(5)


@hookimpl
def anydevice_register_probes(register: Callable[[Any], None]) -> None:
    raise SystemExit(6)
