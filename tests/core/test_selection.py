"""The selection grammar and every resolution path, against a registry of real in-test plugins."""

from __future__ import annotations

from collections.abc import Callable
from types import SimpleNamespace

import pytest

from anydevice.contract.device_spec import Detection, DeviceSpec
from anydevice.contract.hookspecs import hookimpl
from anydevice.errors import (
    AnyDeviceError,
    DeviceUnavailableError,
    NoDeviceAvailableError,
    SelectionError,
    UnknownDeviceError,
    VersionMismatchError,
)
from anydevice.runtime.registry import Registry
from anydevice.runtime.selection import Item, parse, resolve


def _no_load() -> object:
    raise AssertionError("selection must not load shims")


def plugin(*specs: DeviceSpec) -> object:
    """A plugin object that registers ``specs``."""

    @hookimpl
    def anydevice_register_devices(register: Callable[[DeviceSpec], None]) -> None:
        for spec in specs:
            register(spec)

    return SimpleNamespace(anydevice_register_devices=anydevice_register_devices)


def device(name: str, available: bool, priority: int = 0, count: int | None = None, aliases: tuple[str, ...] = ()) -> DeviceSpec:
    det = (
        Detection.ok(f"{name} is here", count=count)
        if available
        else Detection.missing(f"{name} package is not installed", f"pip install {name}-sdk", "package_missing")
    )
    return DeviceSpec(name=name, detect=lambda: det, load=_no_load, priority=priority, aliases=aliases)  # type: ignore[arg-type]


@pytest.fixture
def registry() -> Registry:
    return Registry(
        plugins=[
            ("cpu", plugin(device("cpu", True, 0, count=1)), None),
            ("cuda", plugin(device("cuda", True, 80, count=2, aliases=("gpu",))), None),
            ("tpu", plugin(device("tpu", False, 90)), None),
            ("neuron", plugin(device("neuron", False, 85, aliases=("trainium",))), None),
        ]
    )


# -- grammar ----------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("text", "items"),
    [
        ("cpu", (Item("cpu"),)),
        ("cuda:1", (Item("cuda", 1),)),
        ("tpu,cuda,cpu", (Item("tpu"), Item("cuda"), Item("cpu"))),
        ("tpu,cuda:0,cpu", (Item("tpu"), Item("cuda", 0), Item("cpu"))),
        ("auto", ()),
    ],
)
def test_parse_accepts(text: str, items: tuple[Item, ...]) -> None:
    assert parse(text).items == items


@pytest.mark.parametrize(
    ("text", "fragment"),
    [
        ("", "empty"),
        ("   ", "empty"),
        ("tpu,,cpu", "empty entry"),
        ("tpu,", "empty entry"),
        ("cuda:x", "non-negative integer"),
        ("cuda:-1", "non-negative integer"),
        ("cuda:", "non-negative integer"),
        ("auto,cpu", "cannot be combined"),
        ("1cuda", "Malformed device name"),
        ("cu da", "Did you mean 'cuda'"),
        ("  CUDA:1 ", "Did you mean 'cuda:1'"),  # issue 46: case and spaces are refused with the fix, not folded silently
        (" CPU\t", "Did you mean 'cpu'"),
        ("Cpu:0", "Did you mean 'cpu:0'"),
        ("tpu, cuda:0 ,cpu", "Did you mean 'tpu,cuda:0,cpu'"),
        ("cuda:\u0661", "ASCII digits"),
    ],
)
def test_parse_rejects_malformed(text: str, fragment: str) -> None:
    with pytest.raises(SelectionError) as info:
        parse(text)
    assert fragment in str(info.value)
    assert info.value.hint  # every error says how to fix it


# -- resolution -------------------------------------------------------------------------------
def test_named_available_device(registry: Registry) -> None:
    choice = resolve("cuda", registry)
    assert (choice.name, choice.index, choice.fell_back) == ("cuda", None, False)
    assert "selected by name" in choice.why


def test_alias_resolves_to_device(registry: Registry) -> None:
    assert resolve("gpu:1", registry).name == "cuda"
    assert resolve("gpu:1", registry).index == 1


def test_typo_suggests_closest_name(registry: Registry) -> None:
    with pytest.raises(UnknownDeviceError) as info:
        resolve("tpuu", registry)
    assert info.value.suggestion == "tpu"
    assert "Did you mean 'tpu'?" in str(info.value)
    assert "Known devices" in str(info.value)


def test_typo_of_alias_suggests_device(registry: Registry) -> None:
    with pytest.raises(UnknownDeviceError) as info:
        resolve("traineum", registry)
    assert info.value.suggestion == "neuron"


def test_unknown_name_without_close_match(registry: Registry) -> None:
    with pytest.raises(UnknownDeviceError) as info:
        resolve("quantum", registry)
    assert info.value.suggestion is None
    assert "Did you mean" not in str(info.value)


def test_named_unavailable_device_is_an_error_not_a_fallback(registry: Registry) -> None:
    with pytest.raises(DeviceUnavailableError) as info:
        resolve("tpu", registry)
    err = info.value
    assert err.reason == "tpu package is not installed"
    assert err.fix == "pip install tpu-sdk"
    assert err.problem == "package_missing"
    assert set(err.available) == {"cuda", "cpu"}
    assert "Available here: cuda, cpu." in str(err)


def test_list_falls_back_and_says_why(registry: Registry) -> None:
    choice = resolve("tpu,neuron,cpu", registry)
    assert choice.name == "cpu" and choice.fell_back
    assert choice.rejected == (("tpu", "tpu package is not installed"), ("neuron", "neuron package is not installed"))
    assert "tpu: tpu package is not installed" in choice.why


def test_list_first_entry_available_is_not_a_fallback(registry: Registry) -> None:
    choice = resolve("cuda,cpu", registry)
    assert choice.name == "cuda" and not choice.fell_back


def test_typo_in_a_list_is_an_error_even_if_a_later_entry_works(registry: Registry) -> None:
    with pytest.raises(UnknownDeviceError) as info:
        resolve("tpuu,cpu", registry)
    assert info.value.suggestion == "tpu"


def test_list_with_nothing_available(registry: Registry) -> None:
    with pytest.raises(NoDeviceAvailableError) as info:
        resolve("tpu,neuron", registry)
    assert [name for name, _ in info.value.rejections] == ["tpu", "neuron"]
    assert "no device in 'tpu,neuron' is usable" in str(info.value)


def test_auto_picks_highest_priority_available(registry: Registry) -> None:
    choice = resolve("auto", registry)
    assert choice.name == "cuda"
    assert choice.why.startswith("auto: cuda")
    assert ("tpu", "tpu package is not installed") in choice.rejected


def test_index_in_range(registry: Registry) -> None:
    assert resolve("cuda:1", registry).index == 1


def test_index_out_of_range(registry: Registry) -> None:
    with pytest.raises(DeviceUnavailableError) as info:
        resolve("cuda:2", registry)
    assert "index 2 is out of range: 2 cuda device(s) found" in str(info.value)
    assert "cuda:0" in (info.value.fix or "")


def test_all_errors_share_the_base_class() -> None:
    for cls in (SelectionError, UnknownDeviceError, DeviceUnavailableError, NoDeviceAvailableError):
        assert issubclass(cls, AnyDeviceError)


# -- plugin isolation -------------------------------------------------------------------------
def _raising_detect() -> Detection:
    raise OSError("driver query failed")


def test_detection_that_raises_becomes_a_reason() -> None:
    flaky = DeviceSpec(name="flaky", detect=_raising_detect, load=_no_load, priority=100)  # type: ignore[arg-type]
    reg = Registry(plugins=[("cpu", plugin(device("cpu", True)), None), ("flaky", plugin(flaky), None)])
    det = reg.detect("flaky")
    assert not det.available and det.problem == "plugin_error"
    assert "OSError: driver query failed" in det.reason
    assert resolve("auto", reg).name == "cpu"  # the others keep working
    with pytest.raises(DeviceUnavailableError, match="raised during detection"):
        resolve("flaky", reg)


def test_registration_that_raises_is_reported_and_isolated() -> None:
    @hookimpl
    def anydevice_register_devices(register: Callable[[DeviceSpec], None]) -> None:
        raise ValueError("bad config")

    bad = SimpleNamespace(anydevice_register_devices=anydevice_register_devices)
    reg = Registry(plugins=[("bad", bad, None), ("cpu", plugin(device("cpu", True)), None)])
    assert reg.names() == ["cpu"]
    assert [(f.plugin, f.stage) for f in reg.failures] == [("bad", "register")]
    assert "ValueError: bad config" in reg.failures[0].error


def test_plugin_with_an_unknown_hook_fails_validation() -> None:
    @hookimpl
    def anydevice_register_device(register: Callable[[DeviceSpec], None]) -> None:  # misspelt hook
        pass

    reg = Registry(plugins=[("typo", SimpleNamespace(anydevice_register_device=anydevice_register_device), None)])
    reg.load()
    assert [(f.plugin, f.stage) for f in reg.failures] == [("typo", "validate")]


def test_duplicate_device_name_keeps_the_first_and_reports_the_second() -> None:
    reg = Registry(plugins=[("a", plugin(device("cpu", True)), None), ("b", plugin(device("cpu", False)), None)])
    assert reg.get("cpu").plugin == "a"
    assert reg.failures[0].plugin == "b" and "already provided by plugin 'a'" in reg.failures[0].error


def test_registering_something_else_than_a_devicespec() -> None:
    @hookimpl
    def anydevice_register_devices(register: Callable[[object], None]) -> None:
        register({"name": "dict"})

    reg = Registry(plugins=[("odd", SimpleNamespace(anydevice_register_devices=anydevice_register_devices), None)])
    assert reg.names() == [] and "not a DeviceSpec" in reg.failures[0].error


def test_loading_is_idempotent(registry: Registry) -> None:
    registry.load()
    registry.load()
    assert registry.names() == ["tpu", "neuron", "cuda", "cpu"]


def test_version_mismatch_raises_its_own_type() -> None:
    det = Detection.missing("torch_xla 2.9.0 needs torch 2.9.x", "pip install torch==2.9.*", "version_mismatch")
    spec = DeviceSpec(name="xla", detect=lambda: det, load=_no_load)  # type: ignore[arg-type]
    reg = Registry(plugins=[("xla", plugin(spec), None), ("cpu", plugin(device("cpu", True)), None)])
    with pytest.raises(VersionMismatchError) as info:
        resolve("xla", reg)
    assert info.value.problem == "version_mismatch" and "pip install torch==2.9.*" in str(info.value)
