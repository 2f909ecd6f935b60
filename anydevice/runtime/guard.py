"""Calling a plugin's code without letting it end, hang or print over the process.

Every call into plugin code goes through :func:`call`: the plugin's ``print()`` goes to stderr
(never into a command's stdout), anything it raises, ``SystemExit`` included, comes back as
:class:`PluginCallError` naming the plugin and the stage, and with a deadline the call runs in a
daemon thread joined with a timeout (a plugin that hangs is abandoned; a daemon thread never
blocks interpreter exit). Without a deadline (the built-in plugins, trusted) the call runs in
the calling thread: no thread is started. A ``KeyboardInterrupt`` is the user's: re-raised.
What in-process guarding cannot stop (C code holding the GIL, a native crash, ``os._exit``) is
why third-party detection runs in a child process (:mod:`anydevice.runtime.isolation`).
Nothing here imports torch.
"""

from __future__ import annotations

import contextlib
import os
import sys
import threading
import time
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Generic, TypeVar, cast

from anydevice.runtime import leftovers

if TYPE_CHECKING:
    from anydevice.contract.device_spec import Detection

T = TypeVar("T")


class DeadlineExceeded(TimeoutError):
    """The plugin's code did not return within the deadline (it may still be running, abandoned)."""

    def __init__(self, seconds: float) -> None:
        super().__init__(f"did not finish within {seconds:g} s")
        self.seconds = seconds


class PluginCallError(Exception):
    """A call into a plugin failed: which plugin, at which stage, and what it did (``error``: one line)."""

    def __init__(self, plugin: str, stage: str, cause: BaseException) -> None:
        from anydevice.runtime.untrusted import clean

        self.plugin, self.stage, self.cause = clean(plugin, 100), stage, cause
        self.error = describe(cause)
        super().__init__(f"plugin '{plugin}' failed at {stage}: {self.error}")


@contextlib.contextmanager
def stdout_to_stderr() -> Iterator[None]:
    """Send ``print()`` to stderr for the duration (a plugin's output must not reach a command's stdout)."""
    if sys.stdout is sys.stderr or sys.stderr is None:
        yield
        return
    with contextlib.redirect_stdout(sys.stderr):
        yield


@contextlib.contextmanager
def commands_stdout_kept() -> Iterator[None]:
    """For a command whose stdout is its result (``list --json``): everything written to stdout in the
    block goes to stderr, at the file-descriptor level too (a plugin's C ``printf``, a subprocess).
    """
    try:
        sys.stdout.flush()
        out, err = sys.stdout.fileno(), sys.stderr.fileno()
        saved = os.dup(out)
    except (AttributeError, OSError, ValueError):  # no real descriptor (a captured stdout): Python level only
        with stdout_to_stderr():
            yield
        return
    try:
        os.dup2(err, out)
        with stdout_to_stderr():
            yield
    finally:
        try:
            sys.stderr.flush()
        finally:
            os.dup2(saved, out)
            os.close(saved)


class Guarded(Generic[T]):
    """A call started in a daemon thread; :meth:`result` waits for it up to a deadline."""

    def __init__(self, fn: Callable[[], T], name: str, plugin: str | None = None) -> None:
        """Start ``fn`` in a daemon thread named ``anydevice-NAME``; ``plugin``: the third-party plugin whose code it is,
        whose leftovers (non-daemon threads, exit handlers) are noted (:mod:`anydevice.runtime.leftovers`)."""
        self._fn = fn
        self._plugin = plugin
        self._value: T | None = None
        self._error: BaseException | None = None
        self._thread = threading.Thread(target=self._run, name=f"anydevice-{name}", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        try:
            if self._plugin is None:
                self._value = self._fn()
            else:
                with leftovers.watched(self._plugin):
                    self._value = self._fn()
        except BaseException as exc:  # SystemExit and friends are reported, not obeyed
            self._error = exc

    def result(self, timeout: float) -> T:
        """The call's return value; re-raises what it raised; :class:`DeadlineExceeded` past ``timeout``."""
        with stdout_to_stderr():
            self._thread.join(max(timeout, 0.0))
        if self._thread.is_alive():
            raise DeadlineExceeded(timeout)
        if self._error is not None:
            raise self._error
        return cast(T, self._value)  # set: the thread returned without an error


def call(fn: Callable[[], T], timeout: float | None, plugin: str, stage: str) -> T:
    """Run plugin code ``fn`` for ``plugin``'s ``stage``; any failure is a :class:`PluginCallError`.

    ``timeout``: seconds, in a daemon thread; None: in this thread, without a deadline.
    """
    try:
        if timeout is None:
            with stdout_to_stderr():
                return fn()
        return Guarded(fn, f"{stage}-{plugin}", plugin).result(timeout)
    except KeyboardInterrupt:
        raise
    except BaseException as exc:  # a plugin must not end the process, even by exiting
        raise PluginCallError(plugin, stage, exc) from exc


def describe(exc: BaseException) -> str:
    """One line for a plugin's exception: ``sys.exit(3)`` reads as such, not as a bare ``3``."""
    from anydevice.runtime.untrusted import clean

    if isinstance(exc, SystemExit):
        return f"called sys.exit({clean(repr(exc.code))})"
    if isinstance(exc, DeadlineExceeded):
        return str(exc)
    return clean(f"{type(exc).__name__}: {exc}")


def remaining(deadline: float) -> float:
    """Seconds left until a ``time.monotonic()`` deadline (never negative)."""
    return max(deadline - time.monotonic(), 0.0)


def plugin_fix(plugin: str) -> str:
    """What to do about a plugin that failed: tell its maintainers, or leave it out."""
    return f"report this to the maintainers of the '{plugin}' plugin, or exclude it with ANYDEVICE_PLUGINS"


def plugin_detection_failure(plugin: str, kind: str, error: str, timeout: float | None = None) -> Detection:
    """The unavailable :class:`Detection` of a detection that failed.

    ``kind``: ``timeout`` (past the deadline), ``exit`` (``SystemExit``; ``error`` says
    ``called sys.exit(N)``), ``raised``, ``invalid`` (a malformed result) or ``died`` (the
    child process doing the detection crashed or exited; ``error`` says how).
    """
    from anydevice.contract.device_spec import Detection
    from anydevice.runtime.untrusted import clean

    plugin, error = clean(plugin, 100), clean(error)
    fix = plugin_fix(plugin)
    if kind == "timeout":
        from anydevice import settings

        seconds = f"{timeout:g} s" if timeout is not None else "the deadline"
        reason = f"plugin '{plugin}' did not finish detection within {seconds}"
        return Detection.missing(
            reason, f"{fix}; if it is only slow, raise {settings.ANYDEVICE_DETECT_TIMEOUT.name}", "plugin_error"
        )
    if kind == "invalid":
        return Detection.missing(f"plugin '{plugin}' returned an invalid detection: {error}", fix, "plugin_error")
    if kind == "raised":
        return Detection.missing(f"plugin '{plugin}' raised during detection: {error}", fix, "plugin_error")
    return Detection.missing(f"plugin '{plugin}' {error} during detection", fix, "plugin_error")  # exit, died
