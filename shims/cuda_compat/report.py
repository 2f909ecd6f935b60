"""The migration report: every distinct CUDA call cuda-compat redirected, answered neutrally or refused.

Each call is recorded once (a dict lookup per call). At exit the main process writes one block on
stderr (rank 0 only) and, with ``ANYDEVICE_CUDA_COMPAT_REPORT=path``, the same as JSON (other ranks
and ``mp.spawn`` children write ``path`` with ``.rank<N>`` or ``.pid<N>`` before the suffix).
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Any

REDIRECTED = "redirected"
NEUTRAL = "answered neutrally"
REFUSED = "refused"
KINDS = (REDIRECTED, NEUTRAL, REFUSED)


class MigrationReport:
    """What one process's CUDA calls became on ``device``."""

    def __init__(self, device: str) -> None:
        self.device = device
        self.calls: dict[str, tuple[str, str]] = {}

    def add(self, call: str, kind: str, outcome: str) -> None:
        """Record ``call`` (first time only): ``kind`` is one of :data:`KINDS`, ``outcome`` what it became."""
        if call not in self.calls:
            self.calls[call] = (kind, outcome)

    def as_json(self) -> dict[str, Any]:
        """``{"device": ..., "calls": [{"call", "kind", "outcome"}, ...]}`` in first-call order."""
        rows = [{"call": c, "kind": k, "outcome": o} for c, (k, o) in self.calls.items()]
        return {"device": self.device, "calls": rows}

    def render(self) -> str:
        """One compact block: a header line, then one line per kind that occurred."""
        lines = [f"anydevice: cuda-compat report ({self.device}): {len(self.calls)} distinct CUDA call(s)"]
        for kind in KINDS:
            items = [f"{c} -> {o}" for c, (k, o) in self.calls.items() if k == kind]
            if items:
                lines.append(f"  {kind} ({len(items)}): " + "; ".join(items))
        return "\n".join(lines)


def _is_main_process(rank: str | None) -> bool:
    import multiprocessing

    return (rank in (None, "", "0")) and multiprocessing.parent_process() is None


def json_path(base: str, rank: str | None) -> Path:
    """Where this process writes its JSON: ``base`` for the main process, else a rank- or pid-suffixed sibling."""
    path = Path(base)
    if _is_main_process(rank):
        return path
    tag = f"rank{rank}" if rank not in (None, "", "0") else f"pid{os.getpid()}"
    return path.with_name(f"{path.stem}.{tag}{path.suffix}")


def write_at_exit(report: MigrationReport, json_base: str | None, rank: str | None, quiet: bool) -> None:
    """The ``atexit`` action: the stderr block (main process, unless quiet) and the JSON file (every process)."""
    if json_base:
        target = json_path(json_base, rank)
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(json.dumps(report.as_json(), indent=1) + "\n")
    if not quiet and _is_main_process(rank):
        sys.stderr.write(report.render() + "\n")
