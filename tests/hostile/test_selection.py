"""Issue 11, "Selection and environment": odd ANYDEVICE values, ANYDEVICE_PLUGINS and ``use()``."""

from __future__ import annotations

from collections.abc import Callable
from types import SimpleNamespace

import pytest
import torch

import anydevice as ad
from anydevice.contract.device_spec import Detection, DeviceSpec
from anydevice.contract.hookspecs import hookimpl
from anydevice.errors import AnyDeviceError, SelectionError, SelectionTypeError
from anydevice.plugins import cpu as cpu_plugin
from anydevice.runtime.registry import Registry, reset_registry
from anydevice.runtime.selection import parse
from tests.utils import anydevice_cli

BUILT_IN = "cpu, cuda, mps, neuron, tpu, xla, xpu"


# -- only ASCII digits are indices ----------------------------------------------------------------
@pytest.mark.parametrize("index", ["²", "١", "٣", "߁", "0x1", "1.0", "-1"])
def test_only_ascii_digits_are_indices(index: str) -> None:
    proc = anydevice_cli("info", env={"ANYDEVICE": f"cpu:{index}"})
    assert proc.returncode == 2
    shown = index
    assert proc.stderr == (
        f"anydevice: error: Bad device index {shown!r} in 'cpu:{shown}': the index must be a non-negative integer written "
        "with the ASCII digits 0-9.\nWrite it as cpu:0, cpu:1, ...\n"
    )


def test_ascii_index_still_parses() -> None:
    assert parse("cpu:0").items[0].index == 0 and parse("cuda:12").items[0].index == 12
    with pytest.raises(SelectionError, match="Did you mean 'cuda:12'"):  # spaces and capitals: refused with the fix
        parse(" CUDA : 12 ")


# -- ANYDEVICE_PLUGINS ----------------------------------------------------------------------------
def test_plugins_naming_nothing_installed_is_an_error_listing_the_installed_ones() -> None:
    proc = anydevice_cli("list", env={"ANYDEVICE_PLUGINS": "nonexistent"})
    assert (proc.returncode, proc.stdout) == (2, "")
    assert proc.stderr == (
        "anydevice: error: ANYDEVICE_PLUGINS='nonexistent' names plugins that are not installed: nonexistent.\n"
        f"Installed plugins: {BUILT_IN}. Fix the names, or unset ANYDEVICE_PLUGINS to load every installed plugin.\n"
    )


def test_plugins_with_one_typo_is_an_error_too() -> None:
    proc = anydevice_cli("info", env={"ANYDEVICE_PLUGINS": "cpu,cdua"})
    assert proc.returncode == 2
    assert proc.stderr.startswith("anydevice: error: ANYDEVICE_PLUGINS='cpu,cdua' names plugins that are not installed: cdua.\n")


def test_plugins_naming_nothing_at_all_is_an_error() -> None:
    proc = anydevice_cli("list", env={"ANYDEVICE_PLUGINS": " , "})
    assert proc.returncode == 2
    assert proc.stderr.startswith("anydevice: error: ANYDEVICE_PLUGINS=',' has an empty entry.\n")


def test_plugins_error_reaches_library_users(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ANYDEVICE_PLUGINS", "nonexistent")
    with pytest.raises(SelectionError, match="names plugins that are not installed: nonexistent"):
        ad.device()


# -- use() ------------------------------------------------------------------------------------
@pytest.mark.parametrize(("value", "shown"), [(123, "int (123)"), (None, "NoneType (None)"), (b"cpu", "bytes (b'cpu')")])
def test_use_rejects_a_non_string_with_a_type_error(value: object, shown: str) -> None:
    with pytest.raises(SelectionTypeError) as info:
        ad.use(value)  # type: ignore[arg-type]
    assert isinstance(info.value, TypeError) and isinstance(info.value, AnyDeviceError)
    assert str(info.value) == (
        f"A device selection must be a string such as 'cpu', 'cuda:1' or 'auto', not {shown}.\n"
        "Pass the device name as a string, e.g. ad.use('cpu')."
    )


@pytest.mark.parametrize("blank", ["", "  ", "\t\n"])
def test_use_of_a_blank_string_is_auto(blank: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ANYDEVICE_QUIET", "1")
    backend = ad.use(blank)
    assert (backend.request, backend.name) == ("auto", "cpu")


def _plugin(spec: DeviceSpec) -> object:
    @hookimpl
    def anydevice_register_devices(register: Callable[[DeviceSpec], None]) -> None:
        register(spec)

    return SimpleNamespace(anydevice_register_devices=anydevice_register_devices)


@pytest.fixture
def two_devices() -> None:
    """cpu plus `other`: a second real device (it runs on the host CPU through the cpu plugin's shims)."""
    other = DeviceSpec(name="other", detect=lambda: Detection.ok("a second device", count=1), load=cpu_plugin.load)
    reset_registry(Registry([("cpu", cpu_plugin, "anydevice"), ("other", _plugin(other), "test-dist")]).load())


@pytest.mark.parametrize("first_use", ["ad.to()", "ad.compile()", "ad.device()"])
def test_use_refuses_to_switch_once_something_was_placed(first_use: str, two_devices: None) -> None:
    ad.use("cpu")
    if first_use == "ad.to()":
        ad.to(torch.ones(2))
    elif first_use == "ad.compile()":
        ad.compile(torch.nn.Linear(2, 2))
    else:
        ad.device()
    with pytest.raises(SelectionError) as info:
        ad.use("other")
    assert str(info.value) == (
        f"use('other') would switch from cpu to other after {first_use} was used on cpu.\n"
        "Tensors and compiled models stay on the first device, so anydevice does not switch under them: call "
        "anydevice.reset() first to switch on purpose, or select the device once, before placing anything."
    )
    assert ad.backend().name == "cpu"  # nothing changed
    assert ad.use("cpu").name == "cpu"  # the same device again is fine
    ad.reset()
    assert ad.use("other").name == "other"  # a deliberate switch


def test_use_may_switch_before_anything_was_placed(two_devices: None) -> None:
    ad.use("cpu")
    assert ad.use("other").name == "other"
    assert ad.device() == torch.device("cpu")
