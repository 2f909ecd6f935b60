"""Running a third-party plugin's code under a deadline, without letting it end the process.

A plugin's import, registration hook and detection run in a daemon thread joined with a timeout:
a plugin that hangs is abandoned (a daemon thread never blocks interpreter exit), and one that
raises anything, ``SystemExit`` included, has its exception handed back to the caller. A
``KeyboardInterrupt`` is the user's, so it is re-raised. Nothing here imports torch.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Generic, TypeVar

T = TypeVar("T")


class DeadlineExceeded(TimeoutError):
    """The plugin's code did not return within the deadline (it may still be running, abandoned)."""

    def __init__(self, seconds: float) -> None:
        super().__init__(f"did not finish within {seconds:g} s")
        self.seconds = seconds


class Guarded(Generic[T]):
    """A call started in a daemon thread; :meth:`result` waits for it up to a deadline."""

    def __init__(self, fn: Callable[[], T], name: str) -> None:
        self._fn = fn
        self._value: T | None = None
        self._error: BaseException | None = None
        self._thread = threading.Thread(target=self._run, name=f"anydevice-{name}", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        try:
            self._value = self._fn()
        except BaseException as exc:  # SystemExit and friends are reported, not obeyed
            self._error = exc

    def result(self, timeout: float) -> T:
        """The call's return value; re-raises what it raised; :class:`DeadlineExceeded` past ``timeout``."""
        self._thread.join(max(timeout, 0.0))
        if self._thread.is_alive():
            raise DeadlineExceeded(timeout)
        if self._error is not None:
            raise self._error
        return self._value  # type: ignore[return-value]  # set: the thread returned without an error


def call(fn: Callable[[], T], timeout: float, name: str) -> T:
    """Run ``fn`` under a deadline of ``timeout`` seconds (see :class:`Guarded`)."""
    return Guarded(fn, name).result(timeout)


def describe(exc: BaseException) -> str:
    """One line for a plugin's exception: ``sys.exit(3)`` reads as such, not as a bare ``3``."""
    if isinstance(exc, SystemExit):
        return f"called sys.exit({exc.code!r})"
    if isinstance(exc, DeadlineExceeded):
        return str(exc)
    return f"{type(exc).__name__}: {exc}"


def remaining(deadline: float) -> float:
    """Seconds left until a ``time.monotonic()`` deadline (never negative)."""
    return max(deadline - time.monotonic(), 0.0)
