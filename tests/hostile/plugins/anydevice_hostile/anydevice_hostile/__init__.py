"""Hostile anydevice plugins: one module per way of breaking the plugin contract (tests/hostile)."""

from __future__ import annotations

from typing import NoReturn


def never_loaded() -> NoReturn:
    raise AssertionError("a hostile plugin's device must never be loaded")
