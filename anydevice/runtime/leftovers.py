"""What third-party plugin code leaves behind in this process: threads that keep it alive, exit handlers.

Around each call into a third-party plugin (:class:`anydevice.runtime.guard.Guarded`), :func:`watched`
notes the non-daemon threads the call started and the exit handlers (``atexit``) it registered; the
registry notes each plugin's module (:func:`note_package`). When a command is about to
end, :func:`owner` names the plugin a leftover thread belongs to: the plugin whose module is on the
thread's stack, else whose module holds the thread's target, else the plugin whose call started it.
Standard library only; nothing here imports torch.
"""

from __future__ import annotations

import atexit
import contextlib
import sys
import threading
import weakref
from collections.abc import Iterator

_lock = threading.Lock()
_started_by: weakref.WeakKeyDictionary[threading.Thread, str] = weakref.WeakKeyDictionary()
_exit_handlers: dict[str, int] = {}  # plugin -> exit handlers its calls registered
_packages: dict[str, set[str]] = {}  # an entry point's module and each package above it -> the plugins under it
_plugins: set[str] = set()  # third-party plugins whose code ran in this process


@contextlib.contextmanager
def watched(plugin: str) -> Iterator[None]:
    """Note the non-daemon threads started and the exit handlers registered while the block runs ``plugin``'s code."""
    with _lock:
        _plugins.add(plugin)
    before = set(threading.enumerate())
    handlers = atexit._ncallbacks()
    try:
        yield
    finally:
        started = [t for t in threading.enumerate() if t not in before and not t.daemon]
        added = atexit._ncallbacks() - handlers
        with _lock:
            for thread in started:
                _started_by.setdefault(thread, plugin)
            if added > 0:
                _exit_handlers[plugin] = _exit_handlers.get(plugin, 0) + added


def note_package(module: str, plugin: str) -> None:
    """``module`` (an entry point's module, ``pkg.mod``) is ``plugin``'s: code under it is the plugin's, and so is
    code under ``pkg`` unless another plugin's entry point is in ``pkg`` too (one distribution, several plugins)."""
    parts = module.strip().split(".")
    if not parts[0] or parts[0] == "anydevice":
        return
    with _lock:
        for end in range(1, len(parts) + 1):
            _packages.setdefault(".".join(parts[:end]), set()).add(plugin)


def plugins_ran() -> bool:
    """Whether any third-party plugin code ran in this process."""
    return bool(_plugins)


def owner(thread: threading.Thread) -> str | None:
    """The plugin ``thread`` belongs to (see the module's docstring), or None when nothing ties it to one."""
    frame = sys._current_frames().get(thread.ident) if thread.ident is not None else None
    while frame is not None:
        plugin = _plugin_of(str(frame.f_globals.get("__name__", "")))
        if plugin is not None:
            return plugin
        frame = frame.f_back
    target = getattr(thread, "_target", None)
    plugin = _plugin_of(str(getattr(target, "__module__", "") or ""))
    if plugin is not None:
        return plugin
    with _lock:
        return _started_by.get(thread)


def exit_handler_plugins() -> list[str]:
    """The plugins whose calls registered exit handlers, in name order."""
    with _lock:
        return sorted(_exit_handlers)


def _plugin_of(module: str) -> str | None:
    """The one plugin whose code ``module`` is: the longest noted prefix of it that one plugin alone is under."""
    parts = module.split(".")
    with _lock:
        for end in range(len(parts), 0, -1):
            plugins = _packages.get(".".join(parts[:end]), set())
            if len(plugins) == 1:
                return next(iter(plugins))
            if plugins:
                return None  # a package several plugins share: the module is none of theirs in particular
    return None
