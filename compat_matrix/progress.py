"""Progress while probing: a one-line bar on a terminal, plain lines otherwise, and the summary."""

from __future__ import annotations

import shutil
import sys
from collections import Counter
from typing import TextIO

from anydevice.compat_matrix.schema import ProbeResult, Run, Status
from anydevice.compat_matrix.symbols import SYMBOL


class Progress:
    """Reports each finished probe; ``tty=None`` decides from the stream."""

    def __init__(self, total: int, stream: TextIO | None = None, tty: bool | None = None) -> None:
        self.total = total
        self.done = 0
        self.stream = stream or sys.stderr
        self.tty = self.stream.isatty() if tty is None else tty

    def result(self, result: ProbeResult) -> None:
        """One probe finished."""
        self.done += 1
        label = f"{SYMBOL[result.status]} {result.status.value}"
        if self.tty:
            width = max(20, min(shutil.get_terminal_size().columns, 120) - 50)
            filled = int(width * self.done / max(self.total, 1))
            bar = "#" * filled + "-" * (width - filled)
            self.stream.write(f"\r[{bar}] {self.done}/{self.total} {result.probe[:28]:<28}")
            if result.status not in (Status.PASS, Status.SKIP, Status.FAKE):
                self.stream.write(f"\r\x1b[K  {label:<22} {result.probe}: {result.reason or ''}"[:160] + "\n")
        else:
            extra = f" - {result.reason}" if result.reason else ""
            self.stream.write(f"[{self.done}/{self.total}] {label:<22} {result.probe} ({result.duration_s:.2f}s){extra}\n"[:400])
        self.stream.flush()

    def note(self, text: str) -> None:
        """A line that is not a probe result (a respawned worker, a plugin problem)."""
        self.stream.write(("\r\x1b[K" if self.tty else "") + text + "\n")
        self.stream.flush()

    def summary(self, run: Run, seconds: float, out: str | None) -> None:
        """Counts per status, health and where the file went."""
        if self.tty:
            self.stream.write("\r\x1b[K")
        counts = Counter(r.status for r in run.results)
        parts = ", ".join(f"{counts[s]} {s.value}" for s in Status if counts[s])
        health = "sanity passed" if run.health.sanity_passed else f"UNHEALTHY: {run.health.note or 'sanity failed'}"
        where = f" -> {out}" if out else ""
        self.stream.write(
            f"{len(run.results)} probes on {run.plugin.name} ({run.hardware.chip or run.hardware.device_type}) "
            f"in {seconds:.1f}s: {parts}; {health}{where}\n"
        )
        self.stream.flush()
