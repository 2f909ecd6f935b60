"""`auto` never decides by the alphabet: the priority rule of docs/plugins.md ("Priority"), with real registries."""

from __future__ import annotations

from collections.abc import Callable
from types import SimpleNamespace

import pytest

from anydevice.errors import SelectionError
from anydevice.plugin import DEFAULT_PRIORITY, Detection, DeviceSpec, hookimpl
from anydevice.plugins import cpu as cpu_plugin
from anydevice.runtime.registry import Registry
from anydevice.runtime.selection import resolve


def third_party(name: str, **fields: int) -> tuple[str, object, str]:
    """A third-party plugin (its own distribution) registering one available device that runs on the CPU shims."""
    spec = DeviceSpec(name=name, detect=lambda: Detection.ok(f"{name} is here", count=1), load=cpu_plugin.load, **fields)

    @hookimpl
    def anydevice_register_devices(register: Callable[[DeviceSpec], None]) -> None:
        register(spec)

    return name, SimpleNamespace(anydevice_register_devices=anydevice_register_devices), f"anydevice-{name}"


def auto(*plugins: tuple[str, object, str]) -> str:
    registry = Registry([("cpu", cpu_plugin, "anydevice"), *plugins], timeout=30).load()
    return resolve("auto", registry).name


@pytest.mark.parametrize("name", ["aiu", "npu"])  # one sorts before "cpu", one after: the outcome is the same
def test_a_third_party_device_at_cpus_priority_never_wins_auto_by_its_name(name: str) -> None:
    assert auto(third_party(name, priority=0)) == "cpu"


@pytest.mark.parametrize("name", ["aiu", "npu"])
def test_a_third_party_device_at_the_default_priority_is_above_cpu(name: str) -> None:
    assert DEFAULT_PRIORITY == DeviceSpec(name="x", detect=cpu_plugin.detect, load=cpu_plugin.load).priority == 10
    assert auto(third_party(name)) == name


def test_two_third_party_devices_tied_at_the_top_are_refused_naming_both() -> None:
    with pytest.raises(SelectionError) as info:
        auto(third_party("npu"), third_party("aiu"))
    message = str(info.value)
    assert "auto cannot choose between" in message and "aiu" in message and "npu" in message
    assert "ANYDEVICE=" in message  # the fix


def test_a_tie_below_the_top_does_not_matter() -> None:
    assert auto(third_party("aiu", priority=-1), third_party("npu", priority=-1), third_party("top", priority=20)) == "top"


def test_an_explicit_selection_is_unaffected_by_ties() -> None:
    registry = Registry([("cpu", cpu_plugin, "anydevice"), third_party("npu"), third_party("aiu")], timeout=30).load()
    assert resolve("aiu", registry).name == "aiu"
