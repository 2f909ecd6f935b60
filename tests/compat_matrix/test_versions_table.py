"""The versions table per torch minor version: tested (a lane or a result file ran it), declared, or none.

Lane records are written by a real pytest run and the real record command; the committed records
must come from lanes scripts/test defines, and back the claims at both ends of the range.
"""

from __future__ import annotations

import json
import re
import sys
from importlib import metadata
from pathlib import Path

import pytest

from anydevice.compat_matrix.merge import build_matrix
from anydevice.compat_matrix.versions_table import (
    LANES_DIR,
    LaneRecord,
    load_lanes,
    parse_devices,
    plugin_versions,
    support_at,
)
from anydevice.contract.versions import TORCH_MINORS
from tests.utils import REPO, run

RESULTS = sorted((REPO / "compat_matrix" / "results").glob("*.json"))


def _lane(name: str, torch: str, devices: dict[str, str], outcome: str = "passed") -> LaneRecord:
    return LaneRecord(lane=name, torch=torch, outcome=outcome, devices=devices)  # type: ignore[arg-type]


def _record(tmp_path: Path, body: str, lane: str = "probe-lane") -> dict[str, object]:
    """Run a real pytest on a test file with ``body``, then the record command, as scripts/test does."""
    (tmp_path / "test_x.py").write_text(body)
    junit = tmp_path / "junit.xml"
    tests = run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", f"--junitxml={junit}", "test_x.py"], cwd=tmp_path
    )
    out = tmp_path / "lanes" / f"{lane}.json"
    command = [sys.executable, "-m", "anydevice.compat_matrix.versions_table", "record", "--lane", lane]
    command += ["--devices", "cpu,tpu(no-chip)", "--exit-code", str(tests.returncode), "--junit", str(junit), "--out", str(out)]
    recorded = run(command)
    assert recorded.returncode == 0, recorded.stderr
    data: dict[str, object] = json.loads(out.read_text())
    return data


def test_a_lane_record_says_what_ran_from_a_real_pytest_run(tmp_path: Path) -> None:
    data = _record(tmp_path, "import pytest\ndef test_a(): pass\ndef test_b(): pass\n@pytest.mark.skip\ndef test_c(): pass\n")
    assert data["lane"] == "probe-lane" and data["outcome"] == "passed"
    assert data["torch"] == metadata.version("torch")  # the interpreter's own torch, read from its metadata
    assert data["counts"] == {"passed": 2, "failed": 0, "errors": 0, "skipped": 1}
    assert data["devices"] == {"cpu": "ran", "tpu": "no chip"}
    record = load_lanes(tmp_path / "lanes")[0]
    assert record.minor == ".".join(metadata.version("torch").split(".")[:2])


def test_a_failed_lane_and_a_lane_without_tests_are_recorded_as_such(tmp_path: Path) -> None:
    failed = _record(tmp_path, "def test_a(): assert False\n", lane="red")
    assert failed["outcome"] == "failed" and failed["counts"] == {"passed": 0, "failed": 1, "errors": 0, "skipped": 0}
    empty = _record(tmp_path, "X = 1\n", lane="empty")  # pytest exits 5: no tests collected
    assert empty["outcome"] == "no tests"


def test_parse_devices() -> None:
    assert parse_devices("cpu,neuron(fake),xla(pjrt-cpu)") == {"cpu": "ran", "neuron": "fake", "xla": "pjrt cpu"}


def test_cells_mark_tested_only_what_a_passing_lane_or_a_result_file_ran() -> None:
    lanes = [
        _lane("core-torch2.15", "2.15.0+cu130", {"cpu": "ran", "neuron": "fake"}),
        _lane("tpu", "2.15.0", {"tpu": "no chip"}),
        _lane("broken", "2.11.0", {"cpu": "ran"}, outcome="failed"),
    ]
    rows = {r.plugin: r for r in plugin_versions(build_matrix(RESULTS), lanes=lanes)}
    cells = {plugin: {c.torch: c for c in row.cells} for plugin, row in rows.items()}
    assert all([c.torch for c in row.cells] == list(TORCH_MINORS) for row in rows.values())
    assert cells["cpu"]["2.15"].status == "tested" and "lane core-torch2.15" in cells["cpu"]["2.15"].note
    assert cells["cpu"]["2.11"].status == "declared"  # a failed lane tests nothing
    assert cells["tpu"]["2.15"].status == "tested" and "no chip" in cells["tpu"]["2.15"].note
    assert cells["tpu"]["2.12"].status == "declared" and "torch_tpu 0.2.0" in cells["tpu"]["2.12"].note
    # torch 2.10: torch_tpu starts at 2.11 and torch_xla ended at 2.9
    assert cells["tpu"]["2.10"].status == "none"
    assert cells["xla"]["2.9"].status == "tested" and "xla-pjrt-cpu.json" in cells["xla"]["2.9"].note
    assert {cells["xla"][m].status for m in TORCH_MINORS[1:]} == {"none"}
    assert cells["neuron"]["2.14"].status == "declared" and "native TorchNeuron" in cells["neuron"]["2.14"].note
    assert cells["cuda"]["2.15"].status == "declared"  # no GPU here: never claimed as tested
    # a fake of torch-neuronx on a torch no torch-neuronx release pairs with proves no real pair
    assert cells["neuron"]["2.15"].status == "none" and "only a simulation ran here" in cells["neuron"]["2.15"].note


def test_the_committed_lane_records_come_from_scripts_test_lanes_and_back_both_ends_of_the_range() -> None:
    table = (REPO / "scripts" / "test").read_text().split("LANE_TABLE=")[1].split("EOF\n)")[0]
    lanes = {line.split()[0] for line in table.splitlines()[2:] if line.strip()}
    records = load_lanes()
    assert records, f"no lane records in {LANES_DIR}: run scripts/test and commit compat_matrix/lanes/"
    assert {r.lane for r in records} <= lanes
    by_lane = {r.lane: r for r in records}
    for lane, minor in (("core-torch2.9", TORCH_MINORS[0]), ("core-torch2.15", TORCH_MINORS[-1])):
        assert by_lane[lane].minor == minor and by_lane[lane].outcome == "passed"
        assert by_lane[lane].counts["passed"] > 100
    rows = {r.plugin: r for r in plugin_versions(build_matrix(RESULTS))}
    ends = {c.torch: c.status for c in rows["cpu"].cells}
    assert ends[TORCH_MINORS[0]] == ends[TORCH_MINORS[-1]] == "tested"


def test_doctor_reads_the_same_cells_for_the_installed_torch() -> None:
    installed = metadata.version("torch")
    cells = support_at(installed)
    assert set(cells) >= {"cpu", "cuda", "tpu", "neuron", "xla", "mps", "xpu"}
    assert {c.torch for c in cells.values()} == {".".join(installed.split(".")[:2])}
    assert support_at("2.8.1") == {} and support_at("2.16.0") == {}


@pytest.mark.parametrize("torch", ["2.9.0", "2.13.0+cpu"])
def test_every_tested_cell_names_what_ran(torch: str) -> None:
    for cell in support_at(torch).values():
        if cell.status == "tested":
            assert cell.sources and all(re.match(r"^(lane \S+|\S+\.json)$", s) for s in cell.sources)
