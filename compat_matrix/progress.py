"""Progress while probing, on top of :class:`anydevice.progress.Progress`: one line per probe result
that needs attention, a bar on a terminal, and the run's summary."""

from __future__ import annotations

from collections import Counter
from typing import TextIO

from anydevice.compat_matrix.claims import mismatch
from anydevice.compat_matrix.schema import ProbeResult, Run, Status
from anydevice.compat_matrix.symbols import SYMBOL
from anydevice.progress import Progress as _Progress

_QUIET = (Status.PASS, Status.SKIP, Status.FAKE)


class ProbeProgress(_Progress):
    """Reports each finished probe; ``tty=None`` decides from the stream."""

    def __init__(self, total: int, stream: TextIO | None = None, tty: bool | None = None) -> None:
        super().__init__(total, "probing", stream, tty)

    def result(self, result: ProbeResult) -> None:
        """One probe finished: advance, and print a line for every result that is not plainly fine."""
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
