"""The contract's trace record, :class:`TraceSession`: a leaf both the contract and the shared profilers import.

``anydevice.shims.contracts`` re-exports it (``Profiling.trace`` returns one); ``torch_profiler`` and
``xla_profiler`` subclass it without importing the contract, so the contract's default profiler and
the contract do not import each other.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path


@dataclass
class TraceSession:
    """An active or finished profiler trace: where it writes, what it wrote, how to view it."""

    directory: Path
    viewer: str
    files: list[Path] = field(default_factory=list)
    tool: str = ""

    def step(self) -> None:
        """Advance the profiler schedule by one step (``ad.step()`` calls it)."""
