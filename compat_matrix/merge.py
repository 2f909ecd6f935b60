"""Merge result files from many machines and versions into one matrix, losing nothing, and what the page counts.

Columns are device + chip + versions; runs with the same column key share a column, and a cell
whose runs disagree says so. Diffs compare consecutive runs of the same device. :func:`tally`
counts a column's cells (per probe group: how many work, the worst status, where failures come
from); :func:`plugin_versions` is the versions table: the torch / vendor-package pairs each plugin
supports, read from what the plugins declare (each built-in device's ``vendor_package`` and the
pairing rule anydevice's version preflight applies: lockstep ``x.y`` with torch ``x.y``, or the
package's own ``Requires-Dist`` on torch), and the pairs the result files ran.
"""

from __future__ import annotations

import itertools
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Final

from anydevice.compat_matrix.claims import Source, mismatch, origin, short
from anydevice.compat_matrix.page_bounds import MAX_PAGE_WEIGHT, MAX_RESULTS_ON_PAGE, bound_run, page_weight
from anydevice.compat_matrix.probe import COMPILE_GROUP, EXPORT_GROUP, GROUPS, TARGET_GROUPS
from anydevice.compat_matrix.schema import BROKEN, SIMULATED, WORKING, ProbeResult, ResultFileError, Run, Status, load_run
from anydevice.contract.evidence import UNKNOWN, Evidence, Level
from anydevice.contract.versions import TORCH_MINORS

if TYPE_CHECKING:
    from anydevice.compat_matrix.versions_table import LaneRecord, VersionCell

# The probe groups in page order; groups a plugin adds follow, by name.
PAGE_ORDER: tuple[str, ...] = (
    "sanity",
    "placement",
    "compilation",
    "collectives",
    "profiling",
    "workloads",
    "parallel",
    "dtypes",
    "ops",
    EXPORT_GROUP,
    COMPILE_GROUP,
)


@dataclass(frozen=True)
class LoadedRun:
    """A validated run and the file it came from (by name only, so pages do not depend on paths)."""

    source: str
    run: Run

    @property
    def key(self) -> str:
        """A unique, stable id for the run on the page."""
        return f"{self.source}#{self.run.run_id}"

    @property
    def date(self) -> str:
        """When the run started, to the second, in UTC."""
        return str(self.run.started_at.strftime("%Y-%m-%d %H:%M:%SZ"))

    @property
    def device(self) -> str:
        """The device identity diffs compare within: plugin, chip, simulated or not."""
        hw = self.run.hardware
        if self.run.export is not None:
            return f"{self.run.export.label} / host {hw.chip or hw.device_type}"
        return f"{self.run.plugin.name} / {hw.chip or hw.device_type}" + (f" ({SIMULATED})" if hw.simulated else "")

    @property
    def healthy(self) -> bool:
        """Sanity passed and the device was there."""
        return bool(self.run.health.sanity_passed and self.run.health.device_available)

    @property
    def health(self) -> str:
        """``healthy``, ``device not available`` or ``UNHEALTHY`` (the sanity probe failed)."""
        if self.healthy:
            return "healthy"
        return "device not available" if not self.run.health.device_available else "UNHEALTHY"


@dataclass
class Column:
    """One device + chip + versions; one or more runs."""

    id: str
    label: str
    versions: str
    runs: list[LoadedRun]


@dataclass(frozen=True)
class Row:
    """One probe."""

    probe: str
    shim: str
    description: str


@dataclass
class Cell:
    """Every result for one probe in one column; ``status`` is None when the runs disagree."""

    entries: list[tuple[LoadedRun, ProbeResult]]

    @property
    def statuses(self) -> list[Status]:
        """The distinct statuses, in a stable order."""
        return sorted({r.status for _, r in self.entries}, key=list(Status).index)

    @property
    def status(self) -> Status | None:
        """The agreed status (untested when nobody probed), None on disagreement.

        A skip beside runs that did run the probe is no disagreement: the skipping run could not try it (a library
        its lane lacks, e.g. vLLM outside the serve lane), the others did; the cell is what they saw, the skip counted.
        """
        found = self.statuses
        if not found:
            return Status.UNTESTED
        ran = [s for s in found if s is not Status.SKIP] or found
        return ran[0] if len(ran) == 1 else None

    @property
    def skipped_beside(self) -> str:
        """``, N run(s) skipped`` when runs skipped the probe beside runs that ran it (empty otherwise)."""
        skips = sum(r.status is Status.SKIP for _, r in self.entries)
        return f", {skips} run(s) skipped" if 0 < skips < len(self.entries) else ""

    def counts(self) -> list[tuple[Status, int]]:
        """How many runs saw each status."""
        return [(s, sum(r.status is s for _, r in self.entries)) for s in self.statuses]

    @property
    def stages(self) -> str:
        """The stages its failures happened at (``place/execute``); empty when nothing failed."""
        return "/".join(sorted({r.failure_stage.value for _, r in self.entries if r.failure_stage is not None}))

    @property
    def contradicts(self) -> bool:
        """Whether a result contradicts what its plugin claims."""
        return any(mismatch(r) for _, r in self.entries)

    @property
    def claim(self) -> str | None:
        """The claim in a few words: the contradicted one (``claimed supported``), ``declared unsupported``, or None."""
        contradicted = [r for _, r in self.entries if mismatch(r)]
        notes = sorted({n for _, r in self.entries if (n := short(r))})
        return short(contradicted[0]) if contradicted else (notes[0] if notes else None)

    @property
    def origins(self) -> list[str]:
        """Where its failures come from, a few words each (``from the plugin``)."""
        return sorted({found.short for loaded, r in self.entries if (found := origin(loaded.run, r)) is not None})


@dataclass(frozen=True)
class Change:
    """One probe whose status changed between two runs."""

    probe: str
    old: Status
    new: Status


@dataclass
class Diff:
    """Consecutive runs of one device: what broke, what started working, what else changed."""

    device: str
    old: LoadedRun
    new: LoadedRun
    broken: list[Change] = field(default_factory=list)
    fixed: list[Change] = field(default_factory=list)
    changed: list[Change] = field(default_factory=list)


@dataclass
class Matrix:
    """Everything a page shows."""

    runs: list[LoadedRun]
    columns: list[Column]
    rows: list[Row]
    cells: dict[tuple[str, str], Cell]
    diffs: list[Diff]
    problems: list[str]
    lanes: Sequence[LaneRecord] | None = None
    """The test lanes' records the page shows (``None``: the committed ones, ``compat_matrix/lanes/``)."""
    cuts: list[str] = field(default_factory=list)
    """The files cut to fit the page, each with what was cut (``FILE: 3000 probe results (the first 500 kept)``)."""

    def cell(self, probe: str, column: Column) -> Cell:
        """The cell for ``probe`` in ``column`` (empty: untested)."""
        return self.cells.get((probe, column.id), Cell([]))

    @property
    def shims(self) -> list[str]:
        """The shims present, in page order."""
        return _ordered_shims({row.shim for row in self.rows})


def load_runs(paths: Iterable[Path]) -> tuple[list[LoadedRun], list[str]]:
    """Load every file; malformed ones become problems (named by file) and the rest still load; the files cut to fit
    the page (:func:`load_bounded_runs`) are named among the problems."""
    runs, problems, cuts = load_bounded_runs(paths)
    return runs, problems + cuts


def load_bounded_runs(paths: Iterable[Path]) -> tuple[list[LoadedRun], list[str], list[str]]:
    """Every file loaded, the problems (named by file), and the cuts.

    Each run is cut to what one file may put on the page (:func:`anydevice.compat_matrix.page_bounds.bound_run`);
    files past the page's totals (:data:`~anydevice.compat_matrix.page_bounds.MAX_RESULTS_ON_PAGE` results, about
    :data:`~anydevice.compat_matrix.page_bounds.MAX_PAGE_WEIGHT` characters) are skipped, a problem each.
    """
    runs: list[LoadedRun] = []
    problems: list[str] = []
    cut_files: list[str] = []
    held = size = 0
    for path in sorted(paths, key=lambda p: (p.name, str(p))):
        try:
            run = load_run(path)
        except ResultFileError as exc:
            problems.append(f"{path.name}: {exc.detail}")
            continue
        duplicate = next((r for r in runs if r.run == run), None)
        if duplicate is not None:
            problems.append(f"{path.name}: same run as {duplicate.source} ({run.run_id}); counted once")
            continue
        run, cuts = bound_run(run)
        weight = page_weight(run)
        if held + len(run.results) > MAX_RESULTS_ON_PAGE or size + weight > MAX_PAGE_WEIGHT:
            problems.append(
                f"{path.name}: the page holds at most {MAX_RESULTS_ON_PAGE} probe results and about "
                f"{MAX_PAGE_WEIGHT >> 20} MB, and the files before it fill {held} results and {size / 2**20:.1f} MB with it "
                f"({len(run.results)} results and {weight / 2**20:.1f} MB in this one); render fewer files at once"
            )
            continue
        if cuts:
            cut_files.append(f"{path.name}: {'; '.join(cuts)}")
        held, size = held + len(run.results), size + weight
        runs.append(LoadedRun(path.name, run))
    return runs, problems, cut_files


def merge(
    runs: Sequence[LoadedRun],
    problems: Sequence[str] = (),
    lanes: Sequence[LaneRecord] | None = None,
    cuts: Sequence[str] = (),
) -> Matrix:
    """Build the matrix from loaded runs (and the lane records it shows; ``None``: the committed ones)."""
    ordered = sorted(runs, key=lambda r: (r.device, r.run.started_at, r.key))
    columns = _columns(ordered)
    rows = _rows(ordered)
    cells: dict[tuple[str, str], Cell] = {}
    for column in columns:
        for loaded in column.runs:
            for result in loaded.run.results:
                cells.setdefault((result.probe, column.id), Cell([])).entries.append((loaded, result))
    return Matrix(ordered, columns, rows, cells, _diffs(ordered), list(problems), lanes, list(cuts))


def build_matrix(paths: Iterable[Path], lanes: Sequence[LaneRecord] | None = None) -> Matrix:
    """Load and merge result files (``lanes``: the lane records to show; ``None``: the committed ones)."""
    runs, problems, cuts = load_bounded_runs(paths)
    return merge(runs, problems, lanes, cuts)


def column_key(loaded: LoadedRun) -> tuple[str, ...]:
    """What makes two runs share a column: device, chip and every version."""
    run = loaded.run
    runtimes = ",".join(f"{k}={v}" for k, v in sorted(run.env.runtimes.items()))
    return (
        run.export.label if run.export else "",
        run.plugin.name,
        run.hardware.chip or run.hardware.device_type,
        "simulated" if run.hardware.simulated else "real",
        run.anydevice.version,
        run.env.torch or "",
        run.plugin.vendor_package or "",
        run.plugin.vendor_version or "",
        runtimes,
    )


def _columns(runs: list[LoadedRun]) -> list[Column]:
    groups: dict[tuple[str, ...], list[LoadedRun]] = {}
    for loaded in runs:
        groups.setdefault(column_key(loaded), []).append(loaded)
    columns = []
    for n, key in enumerate(sorted(groups), start=1):
        first = groups[key][0].run
        label = f"{first.plugin.name} · {first.hardware.chip or first.hardware.device_type}"
        if first.export is not None:  # not a device: the runtime's interpreter or the vendor's compiler on the host
            label = f"{first.export.label} · on host CPU ({first.hardware.chip or first.hardware.device_type})"
        if first.hardware.simulated:
            label += f" ({SIMULATED})"
        versions = [f"anydevice {first.anydevice.version}", f"torch {first.env.torch or '?'}"]
        if first.plugin.vendor_package:
            versions.append(f"{first.plugin.vendor_package} {first.plugin.vendor_version or '?'}")
        versions += [f"{k} {v}" for k, v in sorted(first.env.runtimes.items()) if k != first.plugin.vendor_package]
        columns.append(Column(f"c{n}", label, " · ".join(versions), groups[key]))
    return columns


def _ordered_shims(shims: set[str]) -> list[str]:
    known = PAGE_ORDER + tuple(g for g in GROUPS if g not in PAGE_ORDER)
    return [s for s in known if s in shims] + sorted(shims - set(known))


def _rows(runs: list[LoadedRun]) -> list[Row]:
    first_seen: dict[str, Row] = {}
    for loaded in runs:
        for result in loaded.run.results:
            first_seen.setdefault(result.probe, Row(result.probe, result.shim, result.description))
    order = _ordered_shims({r.shim for r in first_seen.values()})
    position = {name: i for i, name in enumerate(first_seen)}
    return sorted(first_seen.values(), key=lambda r: (order.index(r.shim), position[r.probe]))


def diff_runs(old: LoadedRun, new: LoadedRun) -> Diff:
    """Changes from ``old`` to ``new`` (probes missing from one side count as untested)."""
    diff = Diff(new.device, old, new)
    before = {r.probe: r.status for r in old.run.results}
    after = {r.probe: r.status for r in new.run.results}
    for probe in sorted(set(before) | set(after)):
        a, b = before.get(probe, Status.UNTESTED), after.get(probe, Status.UNTESTED)
        if a is b:
            continue
        change = Change(probe, a, b)
        if a in WORKING and b in BROKEN:
            diff.broken.append(change)
        elif a in BROKEN and b in WORKING:
            diff.fixed.append(change)
        else:
            diff.changed.append(change)
    return diff


def selection(loaded: LoadedRun) -> str:
    """The probes a run was asked for (its ``--only``), empty for every probe."""
    argv = loaded.run.invocation.argv
    for i, arg in enumerate(argv):
        if arg.startswith("--only="):
            return arg.partition("=")[2]
        if arg == "--only" and i + 1 < len(argv):
            return argv[i + 1]
    return ""


def _diffs(runs: list[LoadedRun]) -> list[Diff]:
    """Consecutive runs of one device and one probe selection: a lane's ``--only`` run (the serve lane's ``serve_vllm``)
    is no step in the history of the device's full runs, nor they in its."""
    by_device: dict[str, list[LoadedRun]] = {}
    for loaded in runs:
        only = selection(loaded)
        by_device.setdefault(loaded.device + (f" (--only {only})" if only else ""), []).append(loaded)
    diffs = []
    for device in sorted(by_device):
        history = by_device[device]
        diffs += [replace(diff_runs(a, b), device=device) for a, b in itertools.pairwise(history)]
    return diffs


# -- the page's counts -------------------------------------------------------------------

DISAGREE = "disagree"
# Worst first: what a reader must see before anything else. A skip (the feature does not apply
# here) or an untested probe ranks below pass: a group that passes everything that applies reads
# as pass, with its skips counted beside it; a group where nothing ran reads as skip or untested.
SEVERITY: tuple[str, ...] = (
    Status.FAIL.value,
    Status.HARNESS_ERROR.value,
    Status.PARTIAL.value,
    DISAGREE,
    Status.FALLBACK.value,
    Status.FAKE.value,
    Status.PASS.value,
    Status.UNTESTED.value,
    Status.SKIP.value,
)


def cell_key(cell: Cell) -> str:
    """The cell's status value, or ``disagree`` when its runs saw different statuses."""
    status = cell.status
    return DISAGREE if status is None else status.value


@dataclass
class Tally:
    """Counts over a set of cells: by status key, how many work, and the failures' sources."""

    total: int = 0
    working: int = 0
    counts: Counter[str] = field(default_factory=Counter)
    sources: Counter[Source] = field(default_factory=Counter)

    def add(self, cell: Cell) -> None:
        """Count one cell."""
        key = cell_key(cell)
        self.total += 1
        self.counts[key] += 1
        self.working += cell.status in WORKING
        for loaded, result in cell.entries:
            found = origin(loaded.run, result)
            if found is not None:
                self.sources[found.source] += 1

    @property
    def worst(self) -> str:
        """The most severe status key present (``untested`` when empty)."""
        return next((key for key in SEVERITY if self.counts[key]), Status.UNTESTED.value)

    def ordered(self) -> list[tuple[str, int]]:
        """``(status key, count)`` worst first, only those present."""
        return [(key, self.counts[key]) for key in SEVERITY if self.counts[key]]


NOT_APPLICABLE = "not this column's probes"
"""A summary cell of a group that does not apply to the column (an export column's device groups, and back)."""
EXPORT_NOTE = (
    "an export column (`anydevice matrix probe --target litert`) is not a device: the model is converted for that "
    "runtime and run in its interpreter on the host CPU, so it runs the sanity gate and the export probes only; "
    "a compile column (`--target` a slice, named in its header) is the compile probes' training steps compiled for "
    "that slice by its vendor's compiler on the host CPU, never run (pass: compiled and fits); device columns run neither"
)
"""What the legend says about export and compile columns and the cells that do not apply."""


def applies(row: Row, column: Column) -> bool:
    """Whether ``row`` is a probe ``column`` runs: an export (compile) column the sanity gate and the export
    (compile) probes, a device column every other probe. The rest are shown untested and left out of the counts."""
    target = column.runs[0].run.export
    if row.shim == "sanity":
        return True
    if target is None:
        return row.shim not in TARGET_GROUPS
    return row.shim == target.kind  # a target's kind is its probes' group


def shows(matrix: Matrix, row: Row, column: Column) -> bool:
    """Whether ``column``'s cell for ``row`` is shown as a result: it applies, or some run of the column has one."""
    return applies(row, column) or bool(matrix.cell(row.probe, column).entries)


def tally(matrix: Matrix, column: Column, group: str | None = None) -> Tally:
    """Counts over ``column``'s cells that apply to it (:func:`applies`), all of them or one group's."""
    result = Tally()
    for row in matrix.rows:
        if (group is None or row.shim == group) and applies(row, column):
            result.add(matrix.cell(row.probe, column))
    return result


# -- the versions table ----------------------------------------------------------------

TORCH_RANGE = (TORCH_MINORS[0], TORCH_MINORS[-1])  # declared once, by anydevice.contract.versions
"""The torch releases anydevice supports (README: "torch 2.9 to 2.15")."""


@dataclass
class PluginVersions:
    """One plugin's row: its devices, vendor package, the pairs it supports and the columns that ran it."""

    plugin: str
    devices: list[str] = field(default_factory=list)
    vendor_package: str | None = None
    supported: str = ""
    columns: list[Column] = field(default_factory=list)
    packages: tuple[str, ...] = ()
    """Every vendor package the plugin pairs with torch (``DeviceSpec.paired_packages``), main one first."""
    cells: list[VersionCell] = field(default_factory=list)
    """Per torch minor version 2.9 to 2.15: tested here, declared, or none (:mod:`.versions_table`)."""


def supported_text(vendor_package: str | None, rule: object = None) -> str:
    """The torch / vendor pairs a device with ``vendor_package`` supports, in words.

    ``rule`` is what the plugin declares for the package in ``DeviceSpec.paired_packages``:
    ``"lockstep"``, ``"requires_dist"``, a function of the installed version, or None.
    """
    low, high = TORCH_RANGE
    if vendor_package is None:
        return f"torch {low} to {high}: the device is built into torch"
    if vendor_package == "torch":
        return f"torch {low} to {high} (its CUDA or ROCm build)"
    if rule == "lockstep":
        return f"{vendor_package} x.y with torch x.y (lockstep), for torch {low} to {high}"
    if rule == "requires_dist":
        return f"the torch range {vendor_package}'s own metadata declares (Requires-Dist), within torch {low} to {high}"
    if callable(rule):
        return (
            f"{vendor_package} with torch {low} to {high}; the pairing rule depends on the installed "
            f"{vendor_package} release (lockstep or its own Requires-Dist), checked before import"
        )
    return f"{vendor_package} with torch {low} to {high}; the plugin declares no pairing rule"


def _builtin_devices() -> list[tuple[str, str, str | None, object, tuple[str, ...]]]:
    """``(plugin, device, vendor_package, pairing rule, paired packages)`` for every plugin anydevice itself ships."""
    from anydevice.runtime.registry import builtin_registry

    registry = builtin_registry()  # the built-in plugins only, whatever ANYDEVICE_PLUGINS says
    entries = sorted((registry.get(name) for name in registry.names()), key=lambda e: (e.plugin, e.spec.name))
    return [
        (
            e.plugin,
            e.spec.name,
            e.spec.vendor_package,
            dict(e.spec.paired_packages).get(e.spec.vendor_package or ""),
            tuple(dict(e.spec.paired_packages)),
        )
        for e in entries
    ]


NOT_RUN: Final = frozenset({Status.SKIP, Status.UNTESTED, Status.HARNESS_ERROR})
"""Statuses of a probe that did not run on the device: nothing stands behind such a cell."""


def column_evidence(column: Column) -> Evidence:
    """What stands behind a column's results, in anydevice's one vocabulary (:mod:`anydevice.contract.evidence`).

    A column whose device was never available has nothing behind it (unknown); a run on a stand-in (a simulated
    vendor module, or a plugin whose own evidence is a stand-in, as torch_xla on PJRT CPU) is a stand-in; an export
    target ran in its runtime's stand-in on the host; any other healthy run ran on the chip, and its result file
    is where the evidence is.
    """
    runs = [r for r in column.runs if r.run.health.device_available]
    if not runs:
        return UNKNOWN
    first = runs[0]
    run = first.run
    if run.export is not None and run.export.kind == "compile":
        packages = ", ".join(f"{k} {v}" for k, v in run.export.versions.items())
        return Evidence("compiled", f"{run.export.target}: {packages}; {first.source}", first.date[:10])
    if run.export is not None:
        return Evidence.stand_in(f"{run.export.target} export checked in {run.export.runs_on}; {first.source}")
    recorded = (run.hardware.evidence or {}).get("level")
    if recorded in ("compiled", "registered"):  # a run that compiled or read the vendor's package, without a chip
        evidence = run.hardware.evidence or {}
        level: Level = "compiled" if recorded == "compiled" else "registered"
        return Evidence(level, evidence.get("source", ""), evidence.get("date", ""))
    declared = _declared_evidence().get(run.plugin.name, UNKNOWN)
    if run.hardware.simulated or "stand-in" in (recorded, declared.level):
        what = declared.source if declared.level == "stand-in" else f"a simulated {run.plugin.name} vendor module"
        return Evidence.stand_in(f"{what}; {first.source}", first.date[:10])
    return Evidence.ran(", ".join(r.source for r in runs), first.date[:10])


def cell_evidence(cell: Cell, column: Column) -> Evidence:
    """What stands behind one cell: its column's evidence where the probe ran, unknown where it did not."""
    status = cell.status
    return UNKNOWN if (status is None and not cell.entries) or status in NOT_RUN else column_evidence(column)


def _declared_evidence() -> dict[str, Evidence]:
    """Plugin name -> the evidence it declares (``DeviceSpec.evidence``), for the built-in plugins."""
    from anydevice.runtime.registry import builtin_registry

    registry = builtin_registry()
    return {registry.get(name).plugin: registry.get(name).spec.evidence for name in registry.names()}


def ran_pair(column: Column) -> str:
    """The torch / vendor pair a column ran, in words."""
    run = column.runs[0].run
    pair = f"torch {run.env.torch or '?'}"
    if run.plugin.vendor_package and run.plugin.vendor_package != "torch":
        pair += f" + {run.plugin.vendor_package} {run.plugin.vendor_version or '?'}"
    return pair
