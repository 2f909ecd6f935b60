"""The migration report: every distinct CUDA call cuda-compat redirected, answered neutrally or refused.

Each call is recorded once (a dict lookup per call). With :func:`MigrationReport.record_lines` (``anydevice
check`` asks for it) each distinct call also keeps the user's ``file:line`` of its first occurrence: the
first frame outside torch, anydevice and the device's vendor packages, read once per distinct call.
At exit the main process writes one block on
stderr (rank 0 only) and, with ``ANYDEVICE_CUDA_COMPAT_REPORT=path``, the same as JSON (other ranks
and ``mp.spawn`` children write ``path`` with ``.rank<N>`` or ``.pid<N>`` before the suffix).
"""

from __future__ import annotations

import contextlib
import os
import sys
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from anydevice.errors import AnyDeviceError
from anydevice.files.safe_files import write_json

REDIRECTED = "redirected"
NEUTRAL = "answered neutrally"
REFUSED = "refused"
KINDS = (REDIRECTED, NEUTRAL, REFUSED)


class MigrationReport:
    """What one process's CUDA calls became on ``device``."""

    def __init__(self, device: str, internal: Iterable[str] = ("torch", "anydevice")) -> None:
        self.device = device
        self.calls: dict[str, tuple[str, str]] = {}
        self.internal = frozenset(internal)
        self.lines: dict[str, str | None] | None = None  # call -> the user's file:line, when asked for

    def record_lines(self) -> None:
        """From now on keep, for each new distinct call, the user's ``file:line`` of its first occurrence."""
        if self.lines is None:
            self.lines = {}

    def add(self, call: str, kind: str, outcome: str) -> None:
        """Record ``call`` (first time only): ``kind`` is one of :data:`KINDS`, ``outcome`` what it became."""
        if call not in self.calls:
            self.calls[call] = (kind, outcome)
            if self.lines is not None:
                self.lines[call] = caller_line(self.internal)

    def as_json(self) -> dict[str, Any]:
        """``{"device": ..., "calls": [{"call", "kind", "outcome"}, ...]}`` in first-call order (``"line"`` when recorded)."""
        rows: list[dict[str, Any]] = [{"call": c, "kind": k, "outcome": o} for c, (k, o) in self.calls.items()]
        if self.lines is not None:
            for row in rows:
                row["line"] = self.lines.get(row["call"])
        return {"device": self.device, "calls": rows}

    def render(self) -> str:
        """One compact block: a header line, then one line per kind that occurred."""
        lines = [f"anydevice: cuda-compat report ({self.device}): {len(self.calls)} distinct CUDA call(s)"]
        for kind in KINDS:
            items = [f"{c} -> {o}{self._at(c)}" for c, (k, o) in self.calls.items() if k == kind]
            if items:
                lines.append(f"  {kind} ({len(items)}): " + "; ".join(items))
        return "\n".join(lines)

    def _at(self, call: str) -> str:
        line = self.lines.get(call) if self.lines is not None else None
        return f" (at {line})" if line else ""


def caller_line(internal: frozenset[str]) -> str | None:
    """``file:line`` of the innermost frame whose module is not in ``internal`` packages (nor ``<frozen ...>``)."""
    frame = sys._getframe(1)
    while frame is not None:
        module = str(frame.f_globals.get("__name__") or "")
        if module.partition(".")[0] not in internal and not frame.f_code.co_filename.startswith("<"):
            return f"{frame.f_code.co_filename}:{frame.f_lineno}"
        frame = frame.f_back  # type: ignore[assignment]  # f_back may be None; the loop stops there
    return None


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
    """The ``atexit`` action: the stderr block (main process, unless quiet) and the JSON file (every process).

    A report path that cannot be written is one line on stderr; the program's exit status is kept.
    """
    if json_base:
        target = json_path(json_base, rank)
        try:
            write_json(target, report.as_json(), ours_keys=("device", "calls"), indent=1)
        except (OSError, AnyDeviceError) as exc:
            why = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc).splitlines()[0]
            _say(f"anydevice: cuda-compat report not written to {str(target)!r}: {why}")
    if not quiet and _is_main_process(rank):
        _say(report.render())


def _say(text: str) -> None:
    with contextlib.suppress(OSError, ValueError, AttributeError):  # closed stderr: nothing to say it on
        sys.stderr.write(text + "\n")
