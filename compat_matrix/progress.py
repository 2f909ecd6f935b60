"""Progress while probing, on top of :class:`anydevice.cli.progress.Progress`: one line per probe result
that needs attention, a bar on a terminal, and the run's summary."""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from typing import TextIO

from anydevice.cli.progress import Progress as _Progress
from anydevice.compat_matrix.claims import mismatch
from anydevice.compat_matrix.schema import SYMBOL, ProbeResult, Run, Status

_QUIET = (Status.PASS, Status.SKIP, Status.FAKE)

GROUP_COST_S = {"compilation": 4.0, "collectives": 4.0, "profiling": 3.0, "workloads": 20.0, "parallel": 30.0}
"""Rough seconds a probe of each group takes on a CPU, for the ETA when no earlier run says (others: 1 s)."""


class ProbeProgress(_Progress):
    """Reports each finished probe; ``tty=None`` decides from the stream."""

    def __init__(self, total: int, stream: TextIO | None = None, tty: bool | None = None) -> None:
        super().__init__(total, "probing", stream, tty)
        self._expected: dict[str, float] = {}
        self._finished: set[str] = set()
        self._took = 0.0  # seconds the finished probes took, by their own clocks

    def expect(self, probes: Sequence[tuple[str, str]], earlier: Mapping[str, float] | None = None) -> None:
        """Weigh the ETA by each probe's cost: ``(name, group)`` pairs in run order, and the seconds
        each probe took in an ``earlier`` run (else a per-group guess). Probes differ 100-fold in cost,
        so a plain per-probe pace says "6 s left" just before the slow groups start."""
        earlier = earlier or {}
        self._expected = {name: max(earlier.get(name, GROUP_COST_S.get(group, 1.0)), 0.01) for name, group in probes}

    def eta_s(self) -> float | None:
        """Seconds left: the remaining probes' expected cost, scaled by how the finished ones compared
        (their own durations, so a worker's start-up does not count as a probe's pace)."""
        if not self._expected:
            return super().eta_s()
        done = sum(self._expected.get(name, 0.0) for name in self._finished)
        if done <= 0:
            return None
        left = sum(cost for name, cost in self._expected.items() if name not in self._finished)
        return self._took / done * left

    def result(self, result: ProbeResult) -> None:
        """One probe finished: advance, and print a line for every result that is not plainly fine."""
        self._finished.add(result.probe)
        self._took += result.duration_s
        label = f"{SYMBOL[result.status]} {result.status.value}"
        reason = f": {result.reason}" if result.reason else ""
        if self.tty and result.status not in _QUIET:
            self.note(f"  {label:<22} {result.probe}{reason}"[:160])
        self.advance(f"{result.probe} {label} ({result.duration_s:.2f}s){reason}"[:300] if not self.tty else result.probe[:28])

    def summary(self, run: Run, seconds: float, out: str | None) -> None:
        """Counts per status, health, contradicted claims and where the file went."""
        counts = Counter(r.status for r in run.results)
        parts = ", ".join(f"{counts[s]} {s.value}" for s in Status if counts[s])
        health = "sanity passed" if run.health.sanity_passed else f"UNHEALTHY: {run.health.note or 'sanity failed'}"
        where = f" -> {out}" if out else ""
        contradicted = [r.probe for r in run.results if mismatch(r)]
        claimed = f"; {len(contradicted)} contradict the plugin's claims ({', '.join(contradicted)})" if contradicted else ""
        self.close(
            f"{len(run.results)} probes on {run.plugin.name} ({run.hardware.chip or run.hardware.device_type}) "
            f"in {seconds:.1f}s: {parts}; {health}{claimed}{where}"
        )
