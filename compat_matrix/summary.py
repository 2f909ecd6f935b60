"""The page's summary: per column and per probe group, pass counts, the worst status and where failures come from."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field

from anydevice.compat_matrix.merge import Cell, Column, Matrix
from anydevice.compat_matrix.origin import Source, origin
from anydevice.compat_matrix.schema import Status
from anydevice.compat_matrix.symbols import WORKING

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


def tally(matrix: Matrix, column: Column, group: str | None = None) -> Tally:
    """Counts over ``column``'s cells, all of them or one group's."""
    result = Tally()
    for row in matrix.rows:
        if group is None or row.shim == group:
            result.add(matrix.cell(row.probe, column))
    return result
