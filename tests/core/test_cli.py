"""The command line and the main job's error paths, as a user meets them: real subprocesses, except where a test reads
only what the CLI prints (``cli_in_process``: the same ``anydevice.cli.main``, without an interpreter and ``import torch``)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.utils import TRAIN, anydevice_cli, cli_in_process, python

BUILT_IN = ("cpu", "cuda", "tpu", "neuron", "xla", "mps", "xpu")


def _json_line(stdout: str) -> dict[str, object]:
    return json.loads(stdout.strip().splitlines()[-1])  # type: ignore[no-any-return]


def test_typo_suggests_the_right_name_without_traceback() -> None:
    proc = python(str(TRAIN), "--steps", "1", env={"ANYDEVICE": "tpuu"})
    assert proc.returncode != 0
    assert "Did you mean 'tpu'?" in proc.stderr
    assert "Traceback" not in proc.stderr + proc.stdout


def test_named_device_missing_says_why_and_how_to_fix() -> None:
    proc = python(str(TRAIN), "--steps", "1", env={"ANYDEVICE": "tpu"})
    assert proc.returncode != 0
    assert "Device 'tpu' is not available" in proc.stderr
    assert "not installed" in proc.stderr and "pip install torch_tpu" in proc.stderr
    assert "Available here: cpu" in proc.stderr
    assert "Traceback" not in proc.stderr + proc.stdout


def test_list_falls_back_to_cpu_and_says_so() -> None:
    proc = python(str(TRAIN), "--steps", "3", env={"ANYDEVICE": "tpu,cpu"})
    assert proc.returncode == 0, proc.stderr
    assert "anydevice: using cpu (first available in 'tpu,cpu' (tpu:" in proc.stderr
    assert _json_line(proc.stdout)["backend"] == "cpu"


def test_quiet_silences_the_fallback_line() -> None:
    proc = python(str(TRAIN), "--steps", "1", env={"ANYDEVICE": "tpu,cpu", "ANYDEVICE_QUIET": "1"})
    assert proc.returncode == 0 and "anydevice: using" not in proc.stderr


@pytest.mark.parametrize(
    ("value", "fragment"), [("cpu,,cuda", "empty entry"), ("cpu:7", "index 7 is out of range"), ("cpu:x", "non-negative integer")]
)
def test_cli_errors_are_sentences(value: str, fragment: str) -> None:
    proc = cli_in_process("info", env={"ANYDEVICE": value})
    assert proc.returncode == 2
    assert proc.stderr.startswith("anydevice: error: ") and fragment in proc.stderr
    assert "Traceback" not in proc.stderr


def test_debug_shows_the_traceback() -> None:
    proc = anydevice_cli("info", env={"ANYDEVICE": "tpuu", "ANYDEVICE_DEBUG": "1"})  # the interpreter prints it
    assert proc.returncode != 0 and "Traceback" in proc.stderr and "UnknownDeviceError" in proc.stderr


def test_list_shows_every_builtin_with_its_reason() -> None:
    proc = cli_in_process("list", "--json")
    assert proc.returncode == 0, proc.stderr
    devices = {d["name"]: d for d in json.loads(proc.stdout)["devices"]}
    assert set(BUILT_IN) <= set(devices)
    assert devices["cpu"]["available"]
    for name in BUILT_IN:
        if name != "cpu":
            assert not devices[name]["available"], name
            assert devices[name]["reason"] and devices[name]["fix"], name
    reasons = [devices[n]["reason"] for n in BUILT_IN if n != "cpu"]
    assert len(set(reasons)) == len(reasons)  # each its own reason
    assert devices["neuron"]["verified_on_hardware"] is False
    assert devices["neuron"]["evidence"]["level"] == "stand-in"


def test_list_text_output() -> None:
    proc = cli_in_process("list")
    assert proc.returncode == 0
    lines = {line.split()[0]: line for line in proc.stdout.splitlines() if line and not line.startswith(" ")}
    assert "✓ available" in lines["cpu"]
    assert "✗ unavailable" in lines["tpu"] and "fix:" in proc.stdout
    assert "[not verified on hardware: ran on a stand-in, not the chip]" in lines["neuron"]
    assert "[not verified on hardware: declared, not run]" in lines["tpu"] and "[ran on the chip (" in lines["cpu"]


def test_info_json_reports_selection_and_imports_no_vendor_module() -> None:
    proc = anydevice_cli("info", "--json", env={"ANYDEVICE": "cpu"})
    assert proc.returncode == 0, proc.stderr
    info = json.loads(proc.stdout)
    assert info["backend"]["name"] == "cpu" and info["backend"]["device"] == "cpu"
    assert info["backend"]["compile_backend"] == "inductor" and info["backend"]["dist_backend"] == "gloo"
    assert info["imported_vendor_modules"] == []
    assert info["backend"]["why"].startswith("selected by name")


def test_info_text_says_why() -> None:
    proc = cli_in_process("info")
    assert proc.returncode == 0
    assert "why        auto: cpu" in proc.stdout


def test_console_script_is_installed() -> None:
    import shutil
    import sys

    exe = Path(sys.executable).parent / "anydevice"
    assert exe.exists() or shutil.which("anydevice")


# -- third-party plugins, pip-installed for real ----------------------------------------------
def test_third_party_plugin_is_discovered_and_usable(plugin_site: Path) -> None:
    proc = anydevice_cli("info", "--json", env={"ANYDEVICE": "toy"}, pythonpath=plugin_site)
    assert proc.returncode == 0, proc.stderr
    backend = json.loads(proc.stdout)["backend"]
    assert (backend["name"], backend["plugin"], backend["distribution"], backend["chip"]) == (
        "toy",
        "toy",
        "anydevice-toydevice",
        "ToyChip-1",
    )


def test_broken_plugins_are_reported_and_the_others_keep_working(plugin_site: Path) -> None:
    proc = anydevice_cli("list", "--json", pythonpath=plugin_site)
    assert proc.returncode == 0, proc.stderr
    data = json.loads(proc.stdout)
    broken = {b["plugin"]: b for b in data["broken_plugins"]}
    assert broken["broken_import"]["stage"] == "import" and "anydevice_nonexistent_vendor_sdk" in broken["broken_import"]["error"]
    assert broken["broken_register"]["stage"] == "register" and "bad configuration file" in broken["broken_register"]["error"]
    devices = {d["name"]: d for d in data["devices"]}
    assert devices["flaky"]["problem"] == "plugin_error" and "driver query failed" in devices["flaky"]["reason"]
    assert devices["toy"]["available"] and devices["cpu"]["available"]
    # auto still works, and ignores the flaky plugin's priority 100
    info = anydevice_cli("info", "--json", pythonpath=plugin_site)
    assert json.loads(info.stdout)["backend"]["name"] == "cpu"


def test_selecting_a_broken_plugins_device_explains(plugin_site: Path) -> None:
    proc = anydevice_cli("info", env={"ANYDEVICE": "flaky"}, pythonpath=plugin_site)
    assert proc.returncode == 2
    assert "raised during detection: RuntimeError: driver query failed" in proc.stderr
    assert "ANYDEVICE_PLUGINS" in proc.stderr


def test_anydevice_plugins_limits_what_loads(plugin_site: Path) -> None:
    proc = anydevice_cli("list", "--json", env={"ANYDEVICE_PLUGINS": "cpu,toy"}, pythonpath=plugin_site)
    data = json.loads(proc.stdout)
    assert sorted(d["name"] for d in data["devices"]) == ["cpu", "toy"]
    assert data["broken_plugins"] == []


def test_typo_hint_mentions_plugins_that_failed(plugin_site: Path) -> None:
    proc = anydevice_cli("info", env={"ANYDEVICE": "toyy"}, pythonpath=plugin_site)
    assert "Did you mean 'toy'?" in proc.stderr
    assert "Plugins that failed to load: broken_import, broken_register" in proc.stderr
