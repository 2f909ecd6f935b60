"""Issue 11, "Plugins": built-in devices win name and alias clashes whatever the path order, and the clash is shown.

anydevice-impostor (tests/hostile/plugins) has an entry point named ``cpu`` registering a ``cpu``
device with its own chip, and an entry point ``impostor`` declaring a device ``cpu`` aliased
``gpu`` plus a device ``imp`` that also claims ``gpu``.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from tests.utils import anydevice_cli, python

QUICK = {"ANYDEVICE_DETECT_TIMEOUT": "1"}
ENTRY_POINT_CLASH = (
    "entry point 'cpu' = 'anydevice_impostor.entry_point_cpu' from anydevice-impostor is ignored: the name is already "
    "taken by 'anydevice.plugins.cpu' from anydevice (built into anydevice); rename the plugin's entry point"
)
DEVICE_CLASH = "device name 'cpu' is already provided by plugin 'cpu' (built into anydevice); this device is ignored"
ALIAS_CLASH = (
    "alias 'gpu' of device 'imp' is already provided by plugin 'cuda' (built into anydevice); the alias is ignored, "
    "select the device as 'imp'"
)

# Runs the CLI with the impostor site first on sys.path or last, behind the venv's own packages.
BY_ORDER = """
import sys
site, order = sys.argv[1], sys.argv[2]
sys.path.insert(0, site) if order == "first" else sys.path.append(site)
sys.argv = ["anydevice", *sys.argv[3:]]
from anydevice.cli import main
raise SystemExit(main())
"""


def cli(site: Path, order: str, *args: str, env: dict[str, str] | None = None) -> dict[str, Any]:
    proc = python("-c", BY_ORDER, str(site), order, *args, env={**QUICK, **(env or {})})
    assert proc.returncode == 0, proc.stderr
    data: dict[str, Any] = json.loads(proc.stdout)
    return data


@pytest.mark.parametrize("order", ["first", "last"])
def test_the_built_in_cpu_wins_whatever_the_path_order(hostile_site: Path, order: str) -> None:
    backend = cli(hostile_site, order, "info", "--json", env={"ANYDEVICE": "cpu"})["backend"]
    assert (backend["plugin"], backend["distribution"]) == ("cpu", "anydevice")
    assert backend["chip"] != "ImpostorChip"
    listed = cli(hostile_site, order, "list", "--json")
    devices = {d["name"]: d for d in listed["devices"]}
    assert (devices["cpu"]["plugin"], devices["cpu"]["chip"]) == ("cpu", backend["chip"])
    assert devices["cuda"]["aliases"] == ["gpu", "rocm"]  # the impostor's 'gpu' did not knock out cuda
    assert (devices["imp"]["plugin"], devices["imp"]["aliases"]) == ("impostor", ["impish"])  # kept, without 'gpu'
    clashes = [(b["plugin"], b["error"]) for b in listed["broken_plugins"] if b["stage"] == "clash"]
    assert clashes == [("cpu", ENTRY_POINT_CLASH), ("impostor", DEVICE_CLASH), ("impostor", ALIAS_CLASH)]


def test_gpu_still_means_cuda(hostile_site: Path) -> None:
    proc = anydevice_cli("info", env={"ANYDEVICE": "gpu", **QUICK}, pythonpath=hostile_site)
    assert proc.returncode == 2
    assert proc.stderr.startswith("anydevice: error: Device 'cuda' is not available: ")


def test_list_shows_each_clash(hostile_site: Path) -> None:
    proc = anydevice_cli("list", env=QUICK, pythonpath=hostile_site)
    assert proc.returncode == 0, proc.stderr
    shown = [line.split("! name clash", 1) for line in proc.stdout.splitlines() if "! name clash" in line]
    assert [(who.strip(), what.strip()) for who, what in shown] == [
        ("cpu", ENTRY_POINT_CLASH),
        ("impostor", DEVICE_CLASH),
        ("impostor", ALIAS_CLASH),
    ]


def test_doctor_shows_each_clash(hostile_site: Path) -> None:
    proc = anydevice_cli("doctor", "--json", env={"ANYDEVICE": "cpu", **QUICK}, pythonpath=hostile_site, timeout=600)
    checks = json.loads(proc.stdout)["checks"]
    clashes = [(c["name"], c["status"], c["message"]) for c in checks if "clash" in c["message"]]
    assert clashes == [
        ("plugin cpu", "fail", f"failed at clash: {ENTRY_POINT_CLASH}"),
        ("plugin impostor", "fail", f"failed at clash: {DEVICE_CLASH}"),
        ("plugin impostor", "fail", f"failed at clash: {ALIAS_CLASH}"),
    ]
    assert proc.returncode == 1
