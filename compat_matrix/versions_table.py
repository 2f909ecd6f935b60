"""The page's versions table: the torch / vendor-package pairs each plugin supports, and which pairs ran here.

"Supports" is read from what the plugins declare: each built-in device's ``vendor_package`` and the
pairing rule anydevice's version preflight applies to that package (lockstep ``x.y`` with torch
``x.y``, or the package's own ``Requires-Dist`` on torch). "Ran here" is read from the result files.

Per torch minor version (2.9 to 2.15) each plugin gets one cell: **tested** when a test lane's record
(``compat_matrix/lanes/LANE.json``, written by ``scripts/test``) or a result file ran that plugin on
that torch; **declared** when only anydevice's claim or the vendor package's published releases
cover it (:data:`VENDOR_RELEASES`); **none** when no release of the plugin's
vendor package pairs with that torch. ``python -m anydevice.compat_matrix.versions_table record``
writes a lane's record.
"""

from __future__ import annotations

import argparse
import json
import platform
import sys
import xml.etree.ElementTree as ElementTree
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Literal

from anydevice.compat_matrix.lane_time import TABLE_HEAD, junit_times, minutes, over_budget, over_ceiling, slowest, table_row
from anydevice.compat_matrix.merge import (
    TORCH_RANGE,
    Column,
    Matrix,
    PluginVersions,
    _builtin_devices,
    ran_pair,
    supported_text,
)
from anydevice.compat_matrix.schema import MAX_RESULT_FILE
from anydevice.contract.detect import version_of
from anydevice.contract.versions import TORCH_MINORS
from anydevice.errors import FileAccessError
from anydevice.files.safe_files import read_bytes, write_json

__all__ = [
    "TORCH_RANGE",
    "LaneRecord",
    "VersionCell",
    "lane_times",
    "load_lanes",
    "plugin_versions",
    "ran_pair",
    "support_at",
    "supported_text",
]

LANES_DIR = Path(__file__).resolve().parent / "lanes"
"""The committed lane records: one ``LANE.json`` per test lane that ran."""
RESULTS_DIR = Path(__file__).resolve().parent / "results"
"""The committed result files of ``anydevice matrix probe``."""

VENDOR_DISTRIBUTIONS = ("torch_xla", "torch_tpu", "libtpu", "torch-neuronx")
"""Vendor packages a lane record lists when its venv has them."""

CellStatus = Literal["tested", "declared", "none"]

VENDOR_RELEASES: dict[str, dict[str, str]] = {
    # torch_xla x.y pairs with torch x.y only; 2.9.0 (November 2025) is its last release.
    "torch_xla": {"2.9": "torch_xla 2.9.0 (lockstep, its last release)"},
    # torch_tpu 0.2.0's Requires-Dist: torch>=2.11.0,<=2.15.0 (read in the wheel's metadata).
    "torch_tpu": {minor: "torch_tpu 0.2.0 (declares torch>=2.11,<=2.15)" for minor in TORCH_MINORS[2:]},
    # AWS Neuron release notes: torch-neuronx 2.9.0.2.x is the last XLA-based release; Neuron 2.33
    # ships native TorchNeuron as torch-neuronx 2.13.3.0 (torch 2.13.0) and 2.14.3.0 (torch 2.14.0).
    "torch-neuronx": {
        "2.9": "torch-neuronx 2.9.0.2.x (XLA-based, the last)",
        "2.13": "torch-neuronx 2.13.3 (native TorchNeuron)",
        "2.14": "torch-neuronx 2.14.3 (native TorchNeuron)",
    },
}
"""Per vendor package: the torch minor versions its published releases declare, and which release."""

LANE_KEYS = ("lane", "torch", "outcome", "devices")
"""What a JSON object has when it is a lane record: one ``record`` may replace."""


@dataclass(frozen=True)
class LaneRecord:
    """What one test lane ran: its torch, its vendor packages, the devices it exercised and the outcome."""

    lane: str
    torch: str
    outcome: Literal["passed", "failed", "no tests"]
    devices: dict[str, str]
    """Device -> how the lane exercised it ("ran", "no chip", "fake torch-neuronx", ...)."""
    packages: dict[str, str] = field(default_factory=dict)
    counts: dict[str, int] = field(default_factory=dict)
    python: str = ""
    date: str = ""
    seconds: float = 0.0
    """The lane's wall time (pytest's run, as ``scripts/test`` timed it); 0 when not timed."""
    budget: float | None = None
    """The lane's budget in seconds, from ``scripts/test``'s lane table."""
    slowest: list[dict[str, object]] = field(default_factory=list)
    """The lane's 15 slowest tests, slowest first: ``{"test", "seconds"[, "long": reason]}``."""
    over: list[str] = field(default_factory=list)
    """Why the lane failed its time rules: over its budget, or tests over the per-test ceiling not marked long."""

    @property
    def minor(self) -> str:
        return _minor(self.torch)


@dataclass(frozen=True)
class VersionCell:
    """One plugin on one torch minor version: tested here, declared only, or no pairing release."""

    torch: str
    status: CellStatus
    note: str
    """What ran (lanes, result files), or who declares it, or why nothing pairs."""
    sources: tuple[str, ...] = ()
    """For a tested cell, the short names of what ran it (``lane main``, ``cpu.json``)."""


# -- per torch minor version: tested, declared, or none ------------------------------------------
def _minor(version: str) -> str:
    major, minor, *_ = [*version.split("+", 1)[0].split("."), "0"]
    return f"{major}.{minor}"


@dataclass(frozen=True)
class RanFile:
    """A result file's run, reduced to what the versions table needs."""

    source: str
    plugin: str
    torch: str
    how: str


def _how(simulated: bool, device_count: int | None, chip: str | None, device_type: str) -> str:
    if simulated:
        return "simulated vendor package"
    return "no chip" if not device_count else chip or device_type


def _ran_column(column: Column) -> RanFile:
    run = column.runs[0].run
    hw = run.hardware
    return RanFile(
        column.runs[0].source, run.plugin.name, run.env.torch or "", _how(hw.simulated, hw.device_count, hw.chip, hw.device_type)
    )


def result_files(directory: Path | None = None) -> list[RanFile]:
    """The result files (default: the committed ones) read as plain JSON (no validation: cheap enough for doctor)."""
    found = []
    for path in sorted((directory or RESULTS_DIR).glob("*.json")):
        try:
            data = json.loads(read_bytes(path, limit=MAX_RESULT_FILE))
            hw = data["hardware"]
            how = _how(bool(hw.get("simulated")), hw.get("device_count"), hw.get("chip"), str(hw.get("device_type")))
            found.append(RanFile(path.name, str(data["plugin"]["name"]), str(data["env"].get("torch") or ""), how))
        except (OSError, ValueError, KeyError, TypeError, AttributeError, FileAccessError):
            continue
    return found


def tested_notes(
    plugin: str, devices: Iterable[str], minor: str, files: Iterable[RanFile], lanes: Iterable[LaneRecord]
) -> list[tuple[str, str]]:
    """What ran ``plugin`` (any of its ``devices``) on torch ``minor``: ``(short name, note with how)`` per passing
    lane and result file."""
    names = {plugin, *devices}
    notes = [
        (f"lane {lane.lane}", f"lane {lane.lane} ({lane.devices[device]}, torch {lane.torch}{_took(lane)})")
        for lane in lanes
        if lane.outcome == "passed" and lane.minor == minor
        for device in sorted(names & set(lane.devices))
    ]
    notes += [
        (ran.source, f"result file {ran.source} ({ran.how}, torch {ran.torch})")
        for ran in files
        if ran.plugin == plugin and ran.torch and _minor(ran.torch) == minor
    ]
    return notes


def _took(lane: LaneRecord) -> str:
    return f", {lane.counts.get('passed', 0)} tests passed in {minutes(lane.seconds)}" if lane.seconds else ""


def lane_times(lanes: Sequence[LaneRecord] | None = None) -> list[str]:
    """One line per lane record (default: the committed ones): outcome, tests passed, wall time and budget."""
    lines = []
    for lane in load_lanes() if lanes is None else lanes:
        took = f"in {minutes(lane.seconds)}" if lane.seconds else "(time not recorded)"
        budget = f" (budget {minutes(lane.budget)})" if lane.budget else ""
        passed = lane.counts.get("passed", 0)
        lines.append(f"{lane.lane}: {lane.outcome}, {passed} tests passed {took}{budget}, torch {lane.torch}")
    return lines


def declared_note(vendor_package: str | None, packages: Sequence[str], minor: str) -> tuple[bool, str]:
    """Whether anydevice's claim and the plugin's vendor packages cover torch ``minor``, and by what."""
    if vendor_package in (None, "torch"):
        return (
            True,
            "anydevice claims it: the device is built into torch" if vendor_package is None else "torch's CUDA/ROCm build",
        )
    known = [pkg for pkg in packages or (vendor_package,) if pkg in VENDOR_RELEASES]
    releases = [VENDOR_RELEASES[pkg][minor] for pkg in known if minor in VENDOR_RELEASES[pkg]]
    if releases:
        return True, "; ".join(releases)
    if not known:
        return True, f"anydevice claims it; no release list for {vendor_package}"
    return False, f"no release of {' or '.join(known)} declares torch {minor}"


def _simulated(note: str) -> bool:
    return "(fake" in note or "(simulated" in note


def version_cells(row: PluginVersions, lanes: Sequence[LaneRecord], files: Sequence[RanFile] | None = None) -> list[VersionCell]:
    """One cell per claimed torch minor version for ``row`` (``files`` default to its columns' runs)."""
    files = [_ran_column(c) for c in row.columns] if files is None else files
    cells = []
    for minor in TORCH_MINORS:
        ran = tested_notes(row.plugin, row.devices, minor, files, lanes)
        declared, why = declared_note(row.vendor_package, row.packages, minor)
        real = [note for note in ran if not _simulated(note[1])]
        if ran and (declared or real):
            cells.append(VersionCell(minor, "tested", "; ".join(n for _, n in ran), tuple(dict.fromkeys(s for s, _ in ran))))
        elif ran:  # a fake of a package that has no release for this torch proves nothing about a real pair
            cells.append(VersionCell(minor, "none", f"{why}; only a simulation ran here: " + "; ".join(n for _, n in ran)))
        else:
            cells.append(VersionCell(minor, "declared" if declared else "none", why))
    return cells


def support_at(torch_version: str) -> dict[str, VersionCell]:
    """Per built-in plugin, its cell for the installed torch's minor version (what ``anydevice doctor`` reports).

    A torch outside :data:`TORCH_RANGE` has no cells (empty result).
    """
    minor = _minor(torch_version)
    if minor not in TORCH_MINORS:
        return {}
    lanes, files = load_lanes(), result_files()
    rows: dict[str, PluginVersions] = {}
    for plugin, device, vendor, _rule, packages in _builtin_devices():
        rows.setdefault(plugin, PluginVersions(plugin, vendor_package=vendor, packages=packages)).devices.append(device)
    index = TORCH_MINORS.index(minor)
    return {name: version_cells(row, lanes, files)[index] for name, row in rows.items()}


def load_lanes(directory: Path | None = None) -> list[LaneRecord]:
    """The lane records in ``directory`` (default: the committed ones), sorted by lane; an unreadable one is skipped."""
    records = []
    for path in sorted((directory or LANES_DIR).glob("*.json")):
        try:
            records.append(LaneRecord(**json.loads(read_bytes(path, limit=MAX_RESULT_FILE))))
        except (OSError, ValueError, TypeError, FileAccessError):
            continue
    return records


def parse_devices(text: str) -> dict[str, str]:
    """``cpu,neuron(fake),tpu(no-chip)`` -> ``{"cpu": "ran", "neuron": "fake", "tpu": "no chip"}``."""
    devices = {}
    for item in filter(None, (part.strip() for part in text.split(","))):
        name, _, how = item.partition("(")
        devices[name] = how.rstrip(")").replace("-", " ") or "ran"
    return devices


def junit_counts(path: Path) -> dict[str, int]:
    """passed / failed / errors / skipped from pytest's ``--junitxml`` file (empty when it is missing)."""
    try:
        root = ElementTree.parse(path).getroot()
    except (OSError, ElementTree.ParseError):
        return {}
    suites = [root] if root.tag == "testsuite" else list(root.iter("testsuite"))
    total = {key: sum(int(s.get(key, 0)) for s in suites) for key in ("tests", "failures", "errors", "skipped")}
    passed = total["tests"] - total["failures"] - total["errors"] - total["skipped"]
    return {"passed": passed, "failed": total["failures"], "errors": total["errors"], "skipped": total["skipped"]}


def record_lane(
    lane: str,
    devices: str,
    exit_code: int,
    junit: Path | None = None,
    seconds: float = 0.0,
    budget: float | None = None,
    ceiling: float | None = None,
) -> LaneRecord:
    """The record of a lane that just ran in this interpreter's environment (pytest's exit code decides the outcome),
    with its time judged against its ``budget`` and each test's against the per-test ``ceiling`` (seconds)."""
    times = junit_times(junit) if junit else []
    top = slowest(times)
    budget_problem = over_budget(lane, seconds, budget, top)
    outcome: Literal["passed", "failed", "no tests"] = "passed" if exit_code == 0 else "no tests" if exit_code == 5 else "failed"
    packages = {pkg: version for pkg in VENDOR_DISTRIBUTIONS if (version := version_of(pkg))}
    return LaneRecord(
        lane=lane,
        torch=version_of("torch") or "not installed",
        outcome=outcome,
        devices=parse_devices(devices),
        packages=packages,
        counts=junit_counts(junit) if junit else {},
        python=platform.python_version(),
        date=datetime.now(timezone.utc).strftime("%Y-%m-%d"),
        seconds=round(seconds, 1),
        budget=budget,
        slowest=top,
        over=[*filter(None, [budget_problem]), *over_ceiling(times, ceiling)],
    )


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m anydevice.compat_matrix.versions_table record --lane L --devices D --exit-code N --out FILE``
    (exit status 3 when the lane broke its time rules), or ``table RECORD...`` (scripts/test's closing table)."""
    parser = argparse.ArgumentParser(prog="python -m anydevice.compat_matrix.versions_table")
    sub = parser.add_subparsers(dest="command", required=True)
    rec = sub.add_parser("record", help="write the record of a lane that just ran (scripts/test calls it)")
    rec.add_argument("--lane", required=True)
    rec.add_argument("--devices", required=True, help="devices the lane exercised: cpu,neuron(fake),tpu(no-chip)")
    rec.add_argument("--exit-code", type=int, required=True, help="pytest's exit status (5: no tests collected)")
    rec.add_argument("--junit", type=Path, help="pytest's --junitxml file, for the counts")
    rec.add_argument("--seconds", type=float, default=0.0, help="the lane's wall time")
    rec.add_argument("--budget", type=float, help="the lane's budget in seconds: over it, exit status 3")
    rec.add_argument("--ceiling", type=float, help="the per-test ceiling in seconds: a test over it not marked long, status 3")
    rec.add_argument("--out", type=Path, required=True)
    table = sub.add_parser("table", help="one line per lane record: outcome, tests, time, budget, slowest test")
    table.add_argument("records", type=Path, nargs="*")
    args = parser.parse_args(argv)
    if args.command == "table":
        print(TABLE_HEAD)
        for path in args.records:
            try:
                print(table_row(json.loads(read_bytes(path, limit=MAX_RESULT_FILE))))
            except (OSError, ValueError, FileAccessError):
                print(f"{path.stem:<15} no record")
        return 0
    record = record_lane(args.lane, args.devices, args.exit_code, args.junit, args.seconds, args.budget, args.ceiling)
    try:  # atomic: readers (the page, doctor) never see half a file; only an earlier lane record is replaced
        write_json(args.out, asdict(record), ours_keys=LANE_KEYS, sort_keys=True)
    except FileAccessError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    print(f"{args.out}: {record.lane} {record.outcome} on torch {record.torch}", file=sys.stderr)
    for problem in record.over:
        print(f"FAILED (time): {problem}", file=sys.stderr)
    return 3 if record.over else 0


def plugin_versions(
    matrix: Matrix,
    builtin: Iterable[tuple[str, str, str | None, object, tuple[str, ...]]] | None = None,
    lanes: Sequence[LaneRecord] | None = None,
) -> list[PluginVersions]:
    """One row per plugin: every built-in one, plus any plugin a result file names.

    Each row's ``cells`` say, per torch minor version, whether a test lane's record (``lanes``,
    default: the committed ``compat_matrix/lanes/*.json``) or a result file ran it.
    """
    rows: dict[str, PluginVersions] = {}
    rules: dict[str, object] = {}
    for plugin, device, vendor, rule, packages in _builtin_devices() if builtin is None else builtin:
        row = rows.setdefault(plugin, PluginVersions(plugin, vendor_package=vendor, packages=packages))
        row.devices.append(device)
        rules.setdefault(plugin, rule)
    for column in matrix.columns:
        run = column.runs[0].run
        row = rows.setdefault(run.plugin.name, PluginVersions(run.plugin.name, [run.hardware.device_type]))
        if row.vendor_package is None and run.plugin.vendor_package:
            row.vendor_package = run.plugin.vendor_package
        row.columns.append(column)
    records = load_lanes() if lanes is None else lanes
    for row in rows.values():
        row.supported = supported_text(row.vendor_package, rules.get(row.plugin))
        row.cells = version_cells(row, records)
    return sorted(rows.values(), key=lambda r: (not r.columns, r.plugin))


if __name__ == "__main__":
    raise SystemExit(main())
