"""Progress for long-running commands: a one-line bar on a terminal, plain lines otherwise.

    with Progress(total=len(items), label="probing") as progress:
        for item in items:
            ...
            progress.advance(item.name)
        progress.close("12 probes in 3.4s")

On a terminal the bar is redrawn in place (``\\r``) and :meth:`Progress.note` prints a line above
it; in logs and CI (not a TTY) every update is one plain line, at most one per ``min_interval_s``.
Everything goes to stderr by default, so a command's stdout (JSON) stays clean.
"""

from __future__ import annotations

import shutil
import sys
import time
from collections.abc import Iterable, Iterator, Sized
from types import TracebackType
from typing import TextIO, TypeVar

T = TypeVar("T")

_CLEAR = "\r\x1b[K"


def _duration(seconds: float) -> str:
    if seconds < 60:
        return f"{seconds:.1f}s"
    minutes, secs = divmod(int(seconds), 60)
    return f"{minutes}m{secs:02d}s" if minutes < 60 else f"{minutes // 60}h{minutes % 60:02d}m"


class Progress:
    """Reports how far a long task has got; ``total=None`` when the length is unknown.

    :param tty: force the bar (True) or plain lines (False); default: whether ``stream`` is a terminal.
    :param min_interval_s: in plain-line mode, the least time between two lines (the last always prints).
    """

    def __init__(
        self,
        total: int | None,
        label: str = "",
        stream: TextIO | None = None,
        tty: bool | None = None,
        min_interval_s: float = 0.0,
    ) -> None:
        self.total = total
        self.label = label
        self.stream = stream or sys.stderr
        self.tty = _isatty(self.stream) if tty is None else tty
        self.min_interval_s = min_interval_s
        self.done = 0
        self.started = time.monotonic()
        self._last_line = float("-inf")
        self._closed = False

    # -- reporting ----------------------------------------------------------------------
    def advance(self, item: str = "", n: int = 1) -> None:
        """``n`` more units are done; ``item`` names the one just finished."""
        self.done += n
        if self.tty:
            self._draw_bar(item)
            return
        now = time.monotonic()
        last = self.total is not None and self.done >= self.total
        if last or now - self._last_line >= self.min_interval_s:
            self._last_line = now
            self._write(self.line(item) + "\n")

    def note(self, text: str) -> None:
        """A message that is not a step (a warning, a respawn); printed above the bar."""
        self._write((_CLEAR if self.tty else "") + text + "\n")
        if self.tty and not self._closed:
            self._draw_bar("")

    def close(self, summary: str | None = None) -> None:
        """Finish: clear the bar and print ``summary`` (default: count and elapsed time)."""
        if self._closed:
            return
        self._closed = True
        text = summary if summary is not None else self.line("done")
        self._write((_CLEAR if self.tty else "") + (text + "\n" if text else ""))

    # -- formatting ---------------------------------------------------------------------
    def fraction(self) -> float | None:
        """How much is done, 0..1, or None when the total is unknown."""
        return min(1.0, self.done / self.total) if self.total else None

    def eta_s(self) -> float | None:
        """Seconds left at the pace so far, or None when it cannot be estimated."""
        if not self.total or not self.done:
            return None
        elapsed = time.monotonic() - self.started
        return max(0.0, elapsed / self.done * (self.total - self.done))

    def line(self, item: str = "") -> str:
        """The plain-line form: ``label [3/10] item (1.2s, eta 2.8s)``."""
        count = f"{self.done}/{self.total}" if self.total is not None else str(self.done)
        timing = _duration(time.monotonic() - self.started)
        eta = self.eta_s()
        if eta is not None and self.total is not None and self.done < self.total:
            timing += f", eta {_duration(eta)}"
        parts = [p for p in (self.label, f"[{count}]", item, f"({timing})") if p]
        return " ".join(parts)

    def bar(self, item: str = "", width: int | None = None) -> str:
        """The terminal form: ``label [#####-----] 3/10 1.2s item``, fitted to ``width`` columns."""
        columns = width or shutil.get_terminal_size((100, 24)).columns
        fraction = self.fraction()
        count = f"{self.done}/{self.total}" if self.total is not None else str(self.done)
        eta = self.eta_s()
        timing = _duration(time.monotonic() - self.started) + (f" eta {_duration(eta)}" if eta and fraction != 1.0 else "")
        head = f"{self.label} " if self.label else ""
        tail = f" {count} {timing} {item}".rstrip()
        room = max(10, min(40, columns - len(head) - len(tail) - 3))
        if fraction is None:  # unknown total: a marker that moves with each step
            pos = self.done % room
            body = "-" * pos + "#" + "-" * (room - pos - 1)
        else:
            filled = int(room * fraction)
            body = "#" * filled + "-" * (room - filled)
        return f"{head}[{body}]{tail}"[: max(columns - 1, 20)]

    # -- plumbing -----------------------------------------------------------------------
    def _draw_bar(self, item: str) -> None:
        self._write(_CLEAR + self.bar(item))

    def _write(self, text: str) -> None:
        try:
            self.stream.write(text)
            self.stream.flush()
        except (OSError, ValueError):  # a closed pipe must not break the work being reported
            pass

    def __enter__(self) -> Progress:
        if self.tty:
            self._draw_bar("")
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None) -> None:
        if exc_type is not None and not self._closed:
            self.close(self.line("interrupted" if exc_type is KeyboardInterrupt else "failed"))
        self.close()


def track(items: Iterable[T], label: str = "", total: int | None = None, stream: TextIO | None = None) -> Iterator[T]:
    """Yield ``items`` while showing progress (``total`` defaults to ``len(items)`` when it has one)."""
    if total is None and isinstance(items, Sized):
        total = len(items)
    with Progress(total, label, stream) as progress:
        for item in items:
            yield item
            progress.advance()


def _isatty(stream: TextIO) -> bool:
    try:
        return stream.isatty()
    except (AttributeError, ValueError):
        return False
