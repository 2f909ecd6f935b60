"""What the vLLM and SGLang bridges decide (``anydevice.integrations._serving`` and ``.sglang``), without either engine.

The selection, the serving declarations, the entry-point tables and the plugin-hiding all run here
on this machine's registry (cpu available, the accelerators registered but unavailable); an
engine's own platform detection is the ``builtin`` callable the bridges take, given here as plain
functions. A vendor plugin is an entry point of a made-up group, installed as metadata in a temporary
directory. The serve lane (tests/serve) runs the bridges inside real vLLM and SGLang processes.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable, Iterator
from importlib import metadata
from pathlib import Path

import pytest

from anydevice.errors import AnyDeviceError, DeviceUnavailableError, UnknownDeviceError
from anydevice.integrations import _serving, sglang
from anydevice.integrations._serving import SGLANG, VLLM, Decision, Engine
from tests.utils import metadata_only_distribution

GROUP = "anydevice.tests.platforms"
"""The made-up entry-point group the test vendor plugins are installed in."""
QUIET_GROUP = "anydevice.tests.quiet_platforms"
"""Another, whose ``cpu`` plugin finds no device."""
PROBE = Engine("probe", ("no-such-distribution",), GROUP)
"""An engine no device declares serving for: each device then means a vendor plugin named like it."""


def vendor_cpu_platform() -> str:
    """A vendor platform plugin that finds its device."""
    return "example_vendor.platform.CpuPlatform"


def vendor_finds_nothing() -> None:
    """A vendor platform plugin that finds no device."""
    return None


def vendor_breaks() -> str:
    """A vendor platform plugin that raises while detecting."""
    raise RuntimeError("no driver loaded")


@pytest.fixture
def vendor_site(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """``example-vendor 1.0`` installed (metadata only): entry point ``cpu`` in :data:`GROUP` and :data:`QUIET_GROUP`."""
    entry_points = f"[{GROUP}]\ncpu = {__name__}:vendor_cpu_platform\n[{QUIET_GROUP}]\ncpu = {__name__}:vendor_finds_nothing\n"
    metadata_only_distribution(tmp_path, "example-vendor", "1.0", entry_points)
    monkeypatch.syspath_prepend(str(tmp_path))
    return tmp_path


@pytest.fixture
def fresh_sglang_decisions() -> Iterator[None]:
    """SGLang's bridge decides once per process and selection: each test starts and ends with none decided."""
    sglang._decisions.clear()
    yield
    sglang._decisions.clear()


def entry_point(function: Callable[[], object], name: str = "vendor") -> metadata.EntryPoint:
    return metadata.EntryPoint(name, f"{__name__}:{function.__name__}", GROUP)


def cpu_builtin(name: str) -> _serving.Found | None:
    """An engine whose own detection has a CPU platform and finds it, and no other platform."""
    return ("engine.platforms.cpu.CpuPlatform", f"the engine's built-in '{name}' platform") if name == "cpu" else None


# -- the selection ---------------------------------------------------------------------------------


def test_the_selection_is_anydevice_stripped_and_blank_means_unset(monkeypatch: pytest.MonkeyPatch) -> None:
    assert _serving.requested() is None
    monkeypatch.setenv("ANYDEVICE", "   ")
    assert _serving.requested() is None
    monkeypatch.setenv("ANYDEVICE", " cpu ")
    assert _serving.requested() == "cpu"


def test_an_available_device_resolves_with_anydevices_reason() -> None:
    device, why = _serving.resolve_device("cpu", VLLM)
    assert device == "cpu" and why
    assert _serving.resolve_device("cuda,cpu")[0] == "cpu"  # a list falls through to what is here


def test_an_unavailable_device_without_a_serving_only_route_raises_anydevices_error() -> None:
    with pytest.raises(DeviceUnavailableError, match="Device 'cuda' is not available"):
        _serving.resolve_device("cuda", VLLM)
    with pytest.raises(DeviceUnavailableError, match="Device 'tpu' is not available"):
        _serving.resolve_device("tpu", VLLM)  # vLLM could drive a TPU with libtpu alone, which is not installed here
    with pytest.raises(UnknownDeviceError):
        _serving.resolve_device("no-such-device", VLLM)


def test_only_a_device_named_alone_counts_as_named() -> None:
    assert _serving._named_device("tpu:0") == "tpu"
    assert _serving._named_device("metal") == "mps"  # an alias names its device
    assert _serving._named_device("cpu,cuda") is None
    assert _serving._named_device("auto") is None
    assert _serving._named_device("no-such-device") is None


def test_the_available_devices_are_the_ones_anydevice_finds_here() -> None:
    assert "cpu" in _serving.available_devices()


# -- visible devices -------------------------------------------------------------------------------


def test_an_index_becomes_the_visible_device_and_anydevice_its_first(monkeypatch: pytest.MonkeyPatch) -> None:
    assert _serving.visible_env(VLLM, "cuda:1", "cuda") == {"CUDA_VISIBLE_DEVICES": "1", "ANYDEVICE": "cuda:0"}
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "2, 3")
    assert _serving.visible_env(VLLM, "cuda:1", "cuda") == {"CUDA_VISIBLE_DEVICES": "3", "ANYDEVICE": "cuda:0"}
    assert _serving.visible_env(VLLM, "tpu:2", "tpu") == {"TPU_VISIBLE_CHIPS": "2", "ANYDEVICE": "tpu:0"}


def test_no_index_a_list_or_no_declared_variable_sets_nothing() -> None:
    assert _serving.visible_env(VLLM, "cuda", "cuda") == {}
    assert _serving.visible_env(VLLM, "cuda:0,cpu", "cuda") == {}
    assert _serving.visible_env(VLLM, "cpu:0", "cpu") == {}
    assert _serving.visible_env(SGLANG, "cuda:1", "cuda") == {}  # SGLang's cuda declares no visible-device variable


def test_an_index_past_the_visible_devices_is_anydevices_error_with_the_fix(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0,1")
    with pytest.raises(DeviceUnavailableError) as caught:
        _serving.visible_env(VLLM, "cuda:2", "cuda")
    assert caught.value.reason == "ANYDEVICE=cuda:2 asks for device 2, but CUDA_VISIBLE_DEVICES=0,1 shows 2"
    assert caught.value.fix == "pick an index below 2, or widen CUDA_VISIBLE_DEVICES"
    assert "cpu" in caught.value.available


# -- installed engines and plugins -----------------------------------------------------------------


def test_the_first_installed_distribution_of_an_engine_counts() -> None:
    engine = Engine("numeric", ("no-such-distribution", "numpy"), GROUP)
    assert _serving.installed_distribution(engine) == ("numpy", metadata.version("numpy"))
    assert _serving.installed_distribution(PROBE) is None


def test_anydevices_own_platform_plugins_are_installed_for_both_engines() -> None:
    for engine in _serving.ENGINES:
        plugins = _serving.platform_entry_points(engine)
        assert engine.plugin_name in plugins
        assert _serving.distribution_of(plugins[engine.plugin_name]).startswith("anydevice ")


def test_a_device_declares_what_serves_it_and_an_undeclared_engine_looks_for_a_plugin_named_like_it() -> None:
    assert _serving.declared_serving(VLLM, "cpu").platforms == ("cpu",)
    assert _serving.declared_serving(VLLM, "mps").plugins == ("metal",)
    assert _serving.declared_serving(PROBE, "cuda").plugins == ("cuda",)
    assert _serving.declared_serving(PROBE, "cuda").platforms == ()


def test_calling_a_vendor_plugin_gives_its_platform_or_says_what_happened() -> None:
    found = _serving.call_plugin(VLLM, entry_point(vendor_cpu_platform))
    assert found == ("example_vendor.platform.CpuPlatform", f"vllm's 'vendor' platform plugin ({__name__}:vendor_cpu_platform)")
    nothing = _serving.call_plugin(SGLANG, entry_point(vendor_finds_nothing, "quiet"))
    assert nothing == (None, f"sglang's 'quiet' platform plugin ({__name__}:vendor_finds_nothing) found no device")
    broken = _serving.call_plugin(VLLM, entry_point(vendor_breaks))
    assert broken == (
        None,
        f"vllm's 'vendor' platform plugin ({__name__}:vendor_breaks) failed: RuntimeError: no driver loaded",
    )


def test_anydevices_own_plugin_finds_no_device_while_anydevice_is_unset() -> None:
    ours = _serving.platform_entry_points(VLLM)["anydevice"]
    platform, note = _serving.call_plugin(VLLM, ours)
    assert platform is None
    assert note.startswith("vllm's 'anydevice' platform plugin (anydevice ") and note.endswith(" found no device")


# -- decide ----------------------------------------------------------------------------------------


def test_a_selection_that_does_not_resolve_is_the_decisions_error() -> None:
    decision = _serving.decide(VLLM, "cuda", cpu_builtin)
    assert (decision.device, decision.platform) == (None, None)
    assert isinstance(decision.error, DeviceUnavailableError)
    assert decision.why == str(decision.error)


def test_the_engines_built_in_platform_serves_a_device_that_declares_it() -> None:
    decision = _serving.decide(VLLM, "cpu", cpu_builtin)
    assert (decision.device, decision.platform, decision.error) == ("cpu", "engine.platforms.cpu.CpuPlatform", None)
    assert decision.why.endswith("; the engine's built-in 'cpu' platform")


def test_a_build_without_the_platform_is_refused_with_the_plugins_hint() -> None:
    decision = _serving.decide(SGLANG, "cpu", lambda name: None)
    assert (decision.device, decision.platform) == ("cpu", None)
    assert decision.why == "sglang cannot drive cpu here (sglang has no built-in 'cpu' platform)"
    assert isinstance(decision.error, DeviceUnavailableError)
    assert decision.error.fix == "install SGLang's CPU build (SGLang's installation guide, CPU)"


def test_a_built_in_platform_that_finds_no_device_says_so_in_the_refusal() -> None:
    decision = _serving.decide(VLLM, "cpu", lambda name: (None, f"vLLM's '{name}' platform finds no device"))
    assert decision.why == "vllm cannot drive cpu here (vLLM's 'cpu' platform finds no device)"


def test_an_engine_setting_that_cannot_be_taken_any_more_is_the_decisions_error() -> None:
    def too_late(name: str) -> _serving.Found | None:
        raise AnyDeviceError("ANYDEVICE selects cpu but the engine was imported without its CPU switch.", "restart")

    decision = _serving.decide(SGLANG, "cpu", too_late)
    assert (decision.device, decision.platform) == ("cpu", None)
    assert decision.why == "ANYDEVICE selects cpu but the engine was imported without its CPU switch."
    assert decision.error is not None and decision.error.hint == "restart"


def test_a_missing_vendor_plugin_is_refused_with_how_to_install_one() -> None:
    decision = _serving.decide(PROBE, "cpu", cpu_builtin)
    assert decision.why == "probe cannot drive cpu here (no 'cpu' platform plugin installed)"
    assert isinstance(decision.error, DeviceUnavailableError)
    assert decision.error.fix == f"install the cpu vendor's {GROUP} plugin, or choose another device with ANYDEVICE"


def test_an_installed_vendor_plugin_that_finds_the_device_serves_it(vendor_site: Path) -> None:
    assert _serving.distribution_of(_serving.platform_entry_points(PROBE)["cpu"]) == "example-vendor 1.0"
    decision = _serving.decide(PROBE, "cpu", cpu_builtin)
    assert (decision.device, decision.platform) == ("cpu", "example_vendor.platform.CpuPlatform")
    assert decision.why.endswith("; probe's 'cpu' platform plugin (example-vendor 1.0)")


def test_an_installed_vendor_plugin_that_finds_no_device_is_named_in_the_refusal(vendor_site: Path) -> None:
    decision = _serving.decide(Engine("quiet", ("no-such-distribution",), QUIET_GROUP), "cpu", cpu_builtin)
    assert (decision.device, decision.platform) == ("cpu", None)
    assert decision.why == "quiet cannot drive cpu here (quiet's 'cpu' platform plugin (example-vendor 1.0) found no device)"


# -- announce --------------------------------------------------------------------------------------


def test_the_decision_is_one_stderr_line_in_the_process_the_user_started(capsys: pytest.CaptureFixture[str]) -> None:
    decision = Decision("cpu", "engine.CpuPlatform", "ANYDEVICE=cpu")
    _serving.announce(VLLM, "cpu", decision, ["neuron", "metal"], logging.getLogger("vllm.anydevice"))
    assert capsys.readouterr().err == (
        "anydevice: vllm uses engine.CpuPlatform for ANYDEVICE=cpu (ANYDEVICE=cpu); "
        "other platform plugins not consulted: neuron, metal\n"
    )


def test_anydevice_quiet_silences_the_line(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv("ANYDEVICE_QUIET", "1")
    _serving.announce(SGLANG, "cpu", Decision("cpu", "p.P", "why"), [], logging.getLogger("sglang.anydevice"))
    assert capsys.readouterr().err == ""


def test_a_refusal_is_logged_as_an_error(caplog: pytest.LogCaptureFixture, capsys: pytest.CaptureFixture[str]) -> None:
    error = AnyDeviceError("no such platform here", "install it")
    with caplog.at_level(logging.ERROR, logger="sglang.anydevice"):
        _serving.announce(SGLANG, "cuda", Decision(None, None, "x", error), [], logging.getLogger("sglang.anydevice"))
    assert caplog.messages == ["anydevice: ANYDEVICE=cuda cannot be served by sglang here: no such platform here\ninstall it"]
    assert capsys.readouterr().err == ""


# -- hiding the other platform plugins -------------------------------------------------------------


def resolve_current_platform_cls_qualname(platform_plugins: dict[str, Callable[[], str | None]]) -> list[str]:
    """The shape of vLLM's resolution (vllm/platforms/__init__.py, the serve lane's vLLM): plugins called in order,
    the detected names collected in the list ``activated_plugins``."""
    activated_plugins: list[str] = []
    for name, func in platform_plugins.items():
        if func() is not None:
            activated_plugins.append(name)
    return activated_plugins


def _resolve_platform(all_plugins: dict[str, tuple[Callable[[], str | None], str]]) -> dict[str, str]:
    """The shape of SGLang's (sglang/srt/platforms/__init__.py ``_resolve_platform``): values ``(function, dist)``,
    the detected ones in the dict ``activated``."""
    activated: dict[str, str] = {}
    for name, (plugin_fn, _dist) in all_plugins.items():
        result = plugin_fn()
        if result is not None:
            activated[name] = result
    return activated


def test_our_plugin_makes_the_other_detected_plugins_inactive_for_vllms_resolution() -> None:
    hidden: list[list[str]] = []

    def ours() -> str:
        hidden.append(
            _serving.hide_other_platform_plugins(
                __name__, "resolve_current_platform_cls_qualname", "platform_plugins", "activated_plugins", "anydevice"
            )
        )
        return "engine.CpuPlatform"

    plugins: dict[str, Callable[[], str | None]] = {
        "before": vendor_cpu_platform,
        "anydevice": ours,
        "after": vendor_cpu_platform,
    }
    assert resolve_current_platform_cls_qualname(plugins) == ["anydevice"]
    assert hidden == [["before", "after"]]
    assert plugins["after"]() is None and plugins["anydevice"] is ours


def test_our_plugin_makes_the_others_inactive_for_sglangs_resolution_keeping_their_tuples() -> None:
    def ours() -> str:
        _serving.hide_other_platform_plugins(__name__, "_resolve_platform", "all_plugins", "activated", "anydevice")
        return "engine.CpuPlatform"

    plugins: dict[str, tuple[Callable[[], str | None], str]] = {
        "before": (vendor_cpu_platform, "vendor-a"),
        "anydevice": (ours, "anydevice"),
        "after": (vendor_cpu_platform, "b"),
    }
    assert _resolve_platform(plugins) == {"anydevice": "engine.CpuPlatform"}
    assert plugins["after"][1] == "b" and plugins["after"][0]() is None


def test_nothing_changes_outside_a_resolution_or_where_its_locals_look_different() -> None:
    assert _serving.hide_other_platform_plugins(__name__, "no_such_resolver", "plugins", "activated", "anydevice") == []

    def resolver(plugins: object) -> list[str]:
        activated = "not a list"  # noqa: F841 - another engine version's locals: left alone
        return _serving.hide_other_platform_plugins(__name__, "resolver", "plugins", "activated", "anydevice")

    assert resolver({"other": vendor_cpu_platform}) == []
    assert resolver(["not", "a", "dict"]) == []


# -- SGLang's bridge -------------------------------------------------------------------------------


def test_sglang_is_left_alone_while_anydevice_is_unset() -> None:
    assert sglang.platform_plugin() is None


@pytest.mark.usefixtures("fresh_sglang_decisions")
def test_an_unservable_selection_gives_sglang_the_refusing_platform_once(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setenv("ANYDEVICE", "cuda")
    with caplog.at_level(logging.ERROR, logger="sglang.anydevice"):
        assert sglang.platform_plugin() == "anydevice.integrations.sglang.SelectionRefused"
        assert sglang.platform_plugin() == "anydevice.integrations.sglang.SelectionRefused"
    assert len(caplog.messages) == 1  # decided, and said, once per process and selection
    assert caplog.messages[0].startswith("anydevice: ANYDEVICE=cuda cannot be served by sglang here: Device 'cuda'")
    assert sglang.platform_for("cuda") is sglang.platform_for("cuda")
    assert isinstance(sglang.platform_for("cuda").error, DeviceUnavailableError)


def test_the_cpu_engine_switch_is_set_while_sglang_has_not_read_it(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SGLANG_USE_CPU_ENGINE", "")  # recorded, so that what _cpu_engine sets is undone after the test
    monkeypatch.delenv("SGLANG_USE_CPU_ENGINE")
    sglang._cpu_engine()
    assert os.environ["SGLANG_USE_CPU_ENGINE"] == "1"
    sglang._cpu_engine()  # already on: nothing to do


def test_a_cpu_engine_switch_set_off_is_refused_with_the_fix(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SGLANG_USE_CPU_ENGINE", "0")
    with pytest.raises(AnyDeviceError, match="ANYDEVICE selects cpu but SGLANG_USE_CPU_ENGINE=0") as caught:
        sglang._cpu_engine()
    assert caught.value.hint is not None and "anydevice run" in caught.value.hint


def test_the_module_has_no_other_lazy_attribute() -> None:
    with pytest.raises(AttributeError, match="has no attribute 'no_such_name'"):
        _ = sglang.no_such_name
