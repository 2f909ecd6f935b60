"""One supervisor for anydevice's own child processes: third-party plugin vetting and the matrix's probe workers.

A :class:`Child` is ``python -m MODULE`` in its own session (so whatever it starts ends with it), given a
request on stdin, and read line by line under the caller's deadline; :meth:`Child.close` kills its whole
process group and reaps it, also when it already exited. Its messages come either on its stdout (its
stderr discarded: the vetting child points the plugins' own output there) or, with ``channel=True``, on a
private socket whose other end only the child holds (``--channel FD``), its stdout and stderr then being
*output*, the log of whatever runs, never read as a message.
"""

from __future__ import annotations

import contextlib
import os
import selectors
import signal
import socket
import subprocess
import sys
import time
from collections import deque
from collections.abc import Mapping
from types import TracebackType
from typing import Literal

Kind = Literal["message", "output", "end"]
MAX_LINE = 1 << 20
"""Bytes of output without a newline kept before they are delivered as a piece."""


class Lines:
    """Lines from a child in the order it wrote them: ``("message", line)``, ``("output", line)``, then ``("end", "")``
    once the message pipe closed (the child exited or closed it) and the output pending then was delivered.

    Output written before a message is delivered before it (the child writes both in order, so when a message
    is read its output is already in the output pipe).
    """

    def __init__(self, messages: int, output: int | None = None) -> None:
        self.messages, self.output = messages, output
        self._buffers = {messages: b""}
        self._ready: deque[tuple[Kind, str]] = deque()
        self._selector = selectors.DefaultSelector()
        self._selector.register(messages, selectors.EVENT_READ)
        self._closed: set[int] = set()
        if output is not None:
            os.set_blocking(output, False)
            self._buffers[output] = b""
            self._selector.register(output, selectors.EVENT_READ)

    def next(self, timeout: float) -> tuple[Kind, str] | None:
        """The next line, or None when none came within ``timeout`` seconds."""
        until = time.monotonic() + timeout
        while not self._ready:
            if self.messages in self._closed:
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
                    self._read_messages()
        return self._ready.popleft()

    def close(self) -> None:
        """Stop watching; the owner closes the descriptors."""
        self._selector.close()

    def _read_messages(self) -> None:
        chunk = os.read(self.messages, 65536)
        if not chunk:
            self._closed.add(self.messages)
            self._selector.unregister(self.messages)
        self._split(self.messages, chunk, "message", final=not chunk)

    def _drain_output(self, *, final: bool) -> None:
        """Read whatever output is in the pipe now; with ``final``, a last line without a newline too."""
        if self.output is None:
            return
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


class Child:
    """``python -m module`` supervised: request on stdin, lines out (:meth:`next`), killed with its group on :meth:`close`.

    :param channel: messages on a private socket (passed as ``--channel FD``) and stdout+stderr as output;
        without it, messages on stdout and stderr discarded.
    :raises OSError: the child cannot be started (no Python executable, no process left).
    """

    def __init__(
        self, module: str, request: str, *, env: Mapping[str, str], channel: bool = False, python: str | None = None
    ) -> None:
        python = python or sys.executable
        if not python:
            raise OSError(f"no Python executable to start {module} with")
        ours: socket.socket | None = None
        argv = [python, "-m", module]
        fds: tuple[int, ...] = ()
        if channel:
            ours, theirs = socket.socketpair()  # messages one way, the go-ahead the other
            argv += ["--channel", str(theirs.fileno())]
            fds = (theirs.fileno(),)
        try:
            self.proc = subprocess.Popen(
                argv,
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT if channel else subprocess.DEVNULL,
                env=dict(env),
                pass_fds=fds,
                start_new_session=True,  # its own process group: what it starts ends with it
            )
        except BaseException:
            if ours is not None:
                ours.close()
            raise
        finally:
            if channel:
                theirs.close()  # the child holds the only other end: its exit closes the channel
        self._socket = ours
        self._closed = False
        assert self.proc.stdin is not None and self.proc.stdout is not None
        try:
            self.proc.stdin.write(request.encode("utf-8"))
            self.proc.stdin.close()
        except OSError:
            pass  # it died at once: its end is reported as it comes
        out = self.proc.stdout.fileno()
        self.lines = Lines(ours.fileno(), out) if ours is not None else Lines(out)

    def next(self, timeout: float) -> tuple[Kind, str] | None:
        """The next line (``message``, ``output``, or ``end`` once it exited), or None after ``timeout`` seconds."""
        return self.lines.next(max(timeout, 0.0))

    def go_ahead(self) -> None:
        """Write one line back on the channel (a child that waits for it may go on)."""
        if self._socket is None:
            return
        try:
            self._socket.send(b"\n")
        except OSError:
            pass  # it is gone: its end is reported as it comes

    def wait(self) -> int:
        """Its exit status (negative: the signal that ended it)."""
        return self.proc.wait()

    def close(self) -> None:
        """Kill the child's whole process group (also after it exited: what it left running), reap it, close the pipes.

        Once: a second call does nothing (the group's id could belong to someone else by then).
        """
        if self._closed:
            return
        self._closed = True
        self.lines.close()
        try:
            os.killpg(self.proc.pid, signal.SIGKILL)
        except ProcessLookupError:  # already gone, with its group
            pass
        except OSError:
            with contextlib.suppress(OSError):
                self.proc.kill()
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            pass
        if self.proc.stdout is not None:
            self.proc.stdout.close()
        if self._socket is not None:
            self._socket.close()

    def __enter__(self) -> Child:
        return self

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None) -> None:
        self.close()


def ending(code: int) -> str:
    """How a child ended, as a phrase: ``crashed the process (SIGSEGV)``, ``ended the process (exit status 0)``."""
    if code < 0:
        return f"crashed the process ({signal_name(-code)})"
    return f"ended the process (exit status {code})"


def signal_name(number: int) -> str:
    try:
        return signal.Signals(number).name
    except ValueError:
        return f"signal {number}"
