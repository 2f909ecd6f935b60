"""``anydevice list`` in the main lane: cpu available, every vendor device unavailable with its own reason."""

from __future__ import annotations

import json

from anydevice.contract import detect as d
from tests.utils import anydevice_cli


def test_list_gives_each_device_its_own_reason() -> None:
    proc = anydevice_cli("list", "--json")
    assert proc.returncode == 0, proc.stderr
    rows = {row["name"]: row for row in json.loads(proc.stdout)["devices"]}
    assert rows["cpu"]["available"] is True
    vendors = ["tpu", "neuron", "mps", "xpu"] + ([] if d.torch_build().get("cuda") else ["cuda"])
    for name in vendors:
        assert rows[name]["available"] is False, rows[name]
        assert rows[name]["problem"] and rows[name]["fix"], rows[name]
    reasons = [rows[name]["reason"] for name in vendors]
    assert len(set(reasons)) == len(reasons), reasons
    assert rows["xla"]["available"] is d.installed("torch_xla")


def test_only_a_plugin_that_ran_on_its_chip_is_verified() -> None:
    """cpu ran here; neuron and xla ran on stand-ins; cuda, tpu, mps and xpu never ran on a chip in this project."""
    proc = anydevice_cli("list")
    assert proc.returncode == 0, proc.stderr
    neuron_line = next(line for line in proc.stdout.splitlines() if line.startswith("neuron"))
    assert "[not verified on hardware: ran on a stand-in, not the chip]" in neuron_line
    rows = {row["name"]: row for row in json.loads(anydevice_cli("list", "--json").stdout)["devices"]}
    levels = {name: row["evidence"]["level"] for name, row in rows.items()}
    assert levels == {
        "cpu": "ran",
        "neuron": "stand-in",
        "xla": "stand-in",
        **dict.fromkeys(("cuda", "tpu", "mps", "xpu"), "declared"),
    }
    assert [name for name, row in rows.items() if row["verified_on_hardware"]] == ["cpu"]
    assert rows["cpu"]["evidence"]["source"] == "compat_matrix/results/cpu.json"
