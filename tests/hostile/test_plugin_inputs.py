"""Issue 46, plugins: what a third-party plugin reports is bounded (a count, its texts, its details), an entry point
that names no plugin is a clear failure, slow detections run at once, and ``ANYDEVICE_PLUGINS`` naming a plugin twice
is refused.

Real entry points (a ``.dist-info`` and the plugin modules in a site on ``PYTHONPATH``), real ``anydevice list``
subprocesses, a fresh detection cache per site.
"""

from __future__ import annotations

import json
import time
import types
from pathlib import Path
from typing import Any

import pytest

from anydevice.runtime.registry import Registry
from anydevice.runtime.untrusted import MAX_COUNT, MAX_DETAILS
from tests.utils import anydevice_cli, metadata_only_distribution

COMMON = """
import os, time
from anydevice.contract.device_spec import Detection, DeviceSpec
from anydevice.contract.hookspecs import hookimpl

def plugin(name, detect):
    @hookimpl
    def anydevice_register_devices(register):
        register(DeviceSpec(name=name, detect=detect, load=lambda: None, priority=-100))
    return anydevice_register_devices
"""

BAD_VALUES = {
    "hugecount": 'anydevice_register_devices = plugin("hugedev", lambda: Detection.ok("found", count=10**19))',
    "longreason": 'anydevice_register_devices = plugin("longdev", lambda: Detection.ok("r" * 516, count=1))',
    "nohooks": "VALUE = 42",
}

SLOW = """
def detect():
    log = os.environ["PROBE_LOG"]
    with open(log, "a") as handle:
        handle.write(f"start {time.time()}\\n")
    time.sleep(3)
    with open(log, "a") as handle:
        handle.write(f"end {time.time()}\\n")
    return Detection.ok("slow but here", count=1)
anydevice_register_devices = plugin(__name__.rsplit(".", 1)[1] + "dev", detect)
"""


def site(root: Path, modules: dict[str, str], entry_points: str) -> Path:
    """A site holding the package ``probeplugins`` with ``modules`` and a distribution declaring ``entry_points``."""
    package = root / "probeplugins"
    package.mkdir(parents=True)
    (package / "__init__.py").write_text("")
    for name, body in modules.items():
        (package / f"{name}.py").write_text(COMMON + body + "\n")
    metadata_only_distribution(root, "probe-plugins", "0.1", "[anydevice]\n" + entry_points)
    return root


def listing(where: Path, **env: str) -> dict[str, Any]:
    proc = anydevice_cli("list", "--json", env={"ANYDEVICE_CACHE_DIR": str(where / "cache"), **env}, pythonpath=where / "site")
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)  # type: ignore[no-any-return]


@pytest.fixture(scope="module")
def bad_values(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    where = tmp_path_factory.mktemp("bad-values")
    entry_points = "".join(f"{name} = probeplugins.{name}\n" for name in BAD_VALUES)
    entry_points += "notaplugin = probeplugins.nohooks:VALUE\nmalformed = not a ::: valid value\n"
    site(where / "site", BAD_VALUES, entry_points)
    found = listing(where)
    return {
        "devices": {device["name"]: device for device in found["devices"]},
        "broken": {failure["plugin"]: failure for failure in found["broken_plugins"]},
    }


def test_a_count_past_the_bound_makes_the_device_unavailable_naming_the_field(bad_values: dict[str, Any]) -> None:
    device = bad_values["devices"]["hugedev"]
    assert device["available"] is False and device["count"] is None
    assert device["reason"] == (
        "plugin 'hugecount' returned an invalid detection: field 'count' = 10000000000000000000: "
        f"must be 0 to {MAX_COUNT} (the devices of this kind the host has)"
    )


def test_a_long_reason_is_cut_saying_how_much(bad_values: dict[str, Any]) -> None:
    assert bad_values["devices"]["longdev"]["reason"] == "r" * 500 + "… (16 more)"


def test_a_thousand_details_are_cut_saying_how_many() -> None:
    plugin = types.ModuleType("manydetails")
    exec(COMMON + 'detect = lambda: Detection.ok("found", count=1, **{f"k{i}": "v" for i in range(1000)})', plugin.__dict__)
    plugin.anydevice_register_devices = plugin.plugin("detailsdev", plugin.detect)  # type: ignore[attr-defined]
    details = Registry([("manydetails", plugin, "probe-plugins")], timeout=30).detect("detailsdev").details
    assert len(details) == MAX_DETAILS + 1 and details["…"] == f"{1000 - MAX_DETAILS} more details cut"


def test_an_entry_point_naming_no_plugin_is_a_failure_naming_it_and_its_value(bad_values: dict[str, Any]) -> None:
    assert bad_values["broken"]["notaplugin"]["error"] == (
        "TypeError: entry point notaplugin = 'probeplugins.nohooks:VALUE' names an object of type int, which implements "
        "no anydevice hook; a plugin is a module (or object) with @hookimpl functions such as anydevice_register_devices"
    )
    assert bad_values["broken"]["nohooks"]["error"].startswith(
        "TypeError: entry point nohooks = 'probeplugins.nohooks' names module probeplugins.nohooks, which implements no"
    )
    assert bad_values["broken"]["malformed"]["error"] == (
        "ValueError: malformed entry point malformed = 'not a ::: valid value' in group 'anydevice': the value must be "
        "'module' or 'module:attribute' (dotted Python names)"
    )


def test_ten_slow_detections_run_at_once(tmp_path: Path) -> None:
    names = [f"slow{i}" for i in range(10)]
    site(tmp_path / "site", dict.fromkeys(names, SLOW), "".join(f"{name} = probeplugins.{name}\n" for name in names))
    log = tmp_path / "detections.log"
    began = time.monotonic()
    devices = listing(tmp_path, PROBE_LOG=str(log), ANYDEVICE_DETECT_TIMEOUT="60")["devices"]
    elapsed = time.monotonic() - began
    assert sum(device["name"].startswith("slow") and device["available"] for device in devices) == 10
    starts = [float(line.split()[1]) for line in log.read_text().splitlines() if line.startswith("start")]
    ends = [float(line.split()[1]) for line in log.read_text().splitlines() if line.startswith("end")]
    assert len(starts) == 10 and max(starts) < min(ends), "every detection started before the first one ended"
    assert elapsed < 30, f"ten 3 s detections one after another take 30 s; these took {elapsed:.1f} s"


def test_anydevice_plugins_naming_a_plugin_twice_is_refused_and_spaces_are_ignored() -> None:
    proc = anydevice_cli("list", env={"ANYDEVICE_PLUGINS": "cpu, cpu"})
    assert proc.returncode != 0 and proc.stdout == ""
    assert proc.stderr.splitlines()[-2:] == [
        "anydevice: error: ANYDEVICE_PLUGINS='cpu, cpu' names cpu more than once.",
        "Name each plugin once, separated by commas (e.g. ANYDEVICE_PLUGINS=cpu,xla).",
    ]
    proc = anydevice_cli("list", "--json", env={"ANYDEVICE_PLUGINS": " cpu , xla "})
    assert proc.returncode == 0, proc.stderr
    assert sorted(device["name"] for device in json.loads(proc.stdout)["devices"]) == ["cpu", "xla"]
