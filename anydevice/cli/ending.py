"""How an ``anydevice`` command ends when a third-party plugin left something that would keep it alive.

A plugin imported by the command may start a non-daemon thread, or register an exit handler that never
returns; Python waits for both after the command's last line, forever. :func:`finish` runs once the
command's output is written: when plugin code ran here, it gives the non-daemon threads a short grace
(:data:`GRACE`), then, when a plugin's call registered an exit handler, runs the exit handlers in a daemon
thread under the same grace (otherwise Python runs them, in the main thread, as always). What is still
running then and belongs to a plugin (:func:`anydevice.runtime.leftovers.owner`) is named on stderr,
the streams are flushed, and the process ends at once (``os._exit``) with the command's own status.
Leftovers nothing ties to a plugin are left to Python, as before: an exit handler of the user's own (a logger's
upload, a last save) that takes longer than the grace is waited for, never cut short.
"""

from __future__ import annotations

import atexit
import os
import sys
import threading
import time
from typing import NoReturn

from anydevice.runtime import guard, leftovers

GRACE = 1.0
"""Seconds the leftover threads (together), then the exit handlers, may take before the command ends without them."""


def finish(code: int) -> int:
    """End the command with ``code``: returns it, or ends the process now when a plugin's leftovers would hold it."""
    if not leftovers.plugins_ran():
        return code
    _flush()
    deadline = time.monotonic() + GRACE
    running = []
    for thread in threading.enumerate():
        if thread is threading.current_thread() or thread.daemon:
            continue
        thread.join(guard.remaining(deadline))
        if thread.is_alive():
            running.append(thread)
    blamed = [(thread, leftovers.owner(thread)) for thread in running]
    if any(plugin is not None for _, plugin in blamed):
        for thread, plugin in blamed:
            if plugin is not None:
                _say(plugin, f"left a thread running ({thread.name!r}) that would keep this command from ending")
        _end_now(code)
    if running or not leftovers.exit_handler_plugins():
        return code  # threads no plugin is known to have started, or no plugin's exit handler: Python's way, as always
    handlers = threading.Thread(target=atexit._run_exitfuncs, name="anydevice-exit-handlers", daemon=True)
    handlers.start()
    handlers.join(GRACE)
    if handlers.is_alive():
        stuck = leftovers.owner(handlers)
        if stuck is not None:  # only a handler running a plugin's code is cut short: the user's own may take long
            _say(stuck, f"has an exit handler that did not finish within {GRACE:g} s")  # (saving, uploading logs)
            _end_now(code)
        handlers.join()
    return code


def _say(plugin: str, what: str) -> None:
    from anydevice.runtime.untrusted import clean

    plugin = clean(plugin, 100)
    try:
        sys.stderr.write(f"anydevice: plugin '{plugin}' {what}; ended without waiting for it ({guard.plugin_fix(plugin)})\n")
    except (OSError, ValueError):
        pass


def _flush() -> None:
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError, AttributeError):  # a closed pipe: its status is the command's business
            pass


def _end_now(code: int) -> NoReturn:
    _flush()
    os._exit(code)
