"""SGLang's platform selection with anydevice's plugin installed, in fresh processes (SGLang 0.5.23's real code).

SGLang itself cannot serve here (it pins torch 2.14.1 and CUDA kernels; the lane installs it without
its dependencies), so these tests stop where SGLang has chosen its platform.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.serve.helpers import engine_env, launch_environment, resolve_platform

pytestmark = pytest.mark.serve


def _platform(env: dict[str, str]) -> dict[str, object]:
    done, found = resolve_platform(env, engine="sglang")
    assert found is not None, f"SGLang's platform resolution failed ({done.returncode}):\n{done.stderr[-4000:]}"
    return found


def test_unset_anydevice_leaves_sglang_alone() -> None:
    found = _platform(engine_env())
    assert found["plugin_answer"] is None
    assert (found["module"], found["platform"]) == ("sglang.srt.platforms.interface", "SRTPlatform")  # SGLang's own default


def test_launch_environment_selects_sglang_cpu_platform(vendor_site: Path) -> None:
    env = launch_environment("cpu", vendor_site)  # SGLANG_PLATFORM=anydevice: SGLang loads only our plugin
    found = _platform(engine_env(env, site=vendor_site))
    assert (found["module"], found["platform"]) == ("sglang.srt.platforms.cpu", "CpuSRTPlatform")


def test_plain_process_turns_on_the_cpu_engine_and_ignores_other_vendors(vendor_site: Path) -> None:
    alone = _platform(engine_env(site=vendor_site))
    assert alone["platform"] == "ToySRTPlatform"  # the vendor plugin claims the machine when nobody names a device
    done, found = resolve_platform(engine_env({"ANYDEVICE": "cpu"}, site=vendor_site), engine="sglang")
    assert found is not None, done.stderr[-4000:]
    assert found["platform"] == "CpuSRTPlatform"
    assert "other platform plugins not consulted: toy" in done.stderr


def test_vendor_plugin_is_called_for_its_device(vendor_site: Path) -> None:
    found = _platform(engine_env({"ANYDEVICE": "toy", "SGLANG_PLATFORM": "anydevice"}, site=vendor_site))
    assert (found["module"], found["platform"]) == ("toyvendor", "ToySRTPlatform")


@pytest.mark.parametrize("mode", [{"SGLANG_PLATFORM": "anydevice"}, {}], ids=["sglang_platform", "auto_discovery"])
def test_unusable_device_stops_sglang_with_anydevices_reason(mode: dict[str, str]) -> None:
    done, found = resolve_platform(engine_env({"ANYDEVICE": "tpu", **mode}), engine="sglang")
    assert done.returncode != 0 and found is None
    assert "anydevice.errors.DeviceUnavailableError: Device 'tpu' is not available" in done.stderr, done.stderr[-3000:]
    assert "Available here: cpu." in done.stderr
