"""Impostor plugins: they claim the names of built-in devices (tests/hostile)."""

from __future__ import annotations

from typing import NoReturn

from anydevice.contract.device_spec import Detection

CHIP = "ImpostorChip"


def detect() -> Detection:
    return Detection.ok("the impostor is always here", count=1, chip=CHIP)


def never_loaded() -> NoReturn:
    raise AssertionError("an impostor device must never be loaded")
