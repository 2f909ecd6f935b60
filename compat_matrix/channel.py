"""The runner's side of a probe worker's two pipes: its private message channel and its stdout+stderr.

Messages (:mod:`anydevice.compat_matrix.worker`) come only on the channel, a socket whose other
end the worker alone holds; whatever anything writes to the worker's stdout or stderr is output,
the running probe's log, however it is worded. Output written before a message is delivered
before it (the worker writes both in order, so when a message is read its output is already in
the output pipe). The worker waits for :meth:`WorkerPipes.go_ahead` after announcing a probe, so
no output of that probe can be mistaken for the previous one's: each probe's log is its own.
"""

from __future__ import annotations

import os
import selectors
import time
from collections import deque
from typing import Literal

Kind = Literal["message", "output", "end"]
MAX_LINE = 1 << 20
"""Bytes of one line kept before it is delivered unfinished."""


class WorkerPipes:
    """Lines from a worker in the order it wrote them: ``("message", line)``, ``("output", line)``, then ``("end", "")``
    once the channel closed (the worker exited or closed it) and the output pending then was delivered."""

    def __init__(self, channel: int, output: int) -> None:
        self.channel, self.output = channel, output
        os.set_blocking(output, False)
        self._buffers = {channel: b"", output: b""}
        self._ready: deque[tuple[Kind, str]] = deque()
        self._selector = selectors.DefaultSelector()
        self._selector.register(channel, selectors.EVENT_READ)
        self._selector.register(output, selectors.EVENT_READ)
        self._closed: set[int] = set()

    def next(self, timeout: float) -> tuple[Kind, str] | None:
        """The next line, or None when none came within ``timeout`` seconds."""
        until = time.monotonic() + timeout
        while not self._ready:
            if self.channel in self._closed:
                self._drain_output(final=True)
                self._ready.append(("end", ""))
                break
            wait = until - time.monotonic()
            if wait <= 0:
                return None
            for key, _ in self._selector.select(wait):
                if key.fd == self.output:
                    self._drain_output(final=False)
                else:
                    self._drain_output(final=True)  # what was written before this message belongs before it
                    self._read_channel()
        return self._ready.popleft()

    def go_ahead(self) -> None:
        """Tell the worker, waiting after its ``start`` message, that it may run the probe."""
        try:
            os.write(self.channel, b"\n")
        except OSError:
            pass  # it is gone: its end is reported as it comes

    def close(self) -> None:
        """Stop watching; the caller closes the descriptors."""
        self._selector.close()

    def _read_channel(self) -> None:
        chunk = os.read(self.channel, 65536)
        if not chunk:
            self._closed.add(self.channel)
            self._selector.unregister(self.channel)
        self._split(self.channel, chunk, "message", final=not chunk)

    def _drain_output(self, *, final: bool) -> None:
        """Read whatever output is in the pipe now; with ``final``, a last line without a newline too."""
        while self.output not in self._closed:
            try:
                chunk = os.read(self.output, 65536)
            except BlockingIOError:
                break
            if not chunk:
                self._closed.add(self.output)
                self._selector.unregister(self.output)
            self._split(self.output, chunk, "output", final=False)
        self._split(self.output, b"", "output", final=final)

    def _split(self, fd: int, chunk: bytes, kind: Kind, *, final: bool) -> None:
        *lines, rest = (self._buffers[fd] + chunk).split(b"\n")
        self._ready.extend((kind, line.decode("utf-8", "replace") + "\n") for line in lines)
        if rest and (final or (kind == "output" and len(rest) > MAX_LINE)):  # output without newlines: in pieces
            self._ready.append((kind, rest.decode("utf-8", "replace")))
            rest = b""
        self._buffers[fd] = rest
