"""An anydevice error that ends the user's program prints as one clear error, not a traceback.

Where anydevice runs the program (a rank of ``anydevice run``, a script under cuda-compat), an
:class:`~anydevice.errors.AnyDeviceError` that nothing caught (a refusal such as Hogwild's
``model.share_memory()`` on a lazy device, a bad ``ad.use()``) is printed as the CLI prints its own:
``anydevice: error: MESSAGE``, the fix, and the line of the program that made the call; the exit
status stays 1. ``ANYDEVICE_DEBUG=1`` gives the traceback. Any other exception keeps Python's report.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable
from types import TracebackType

from anydevice import settings
from anydevice.errors import AnyDeviceError

ExceptHook = Callable[[type[BaseException], BaseException, TracebackType | None], object]

_PACKAGE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


class _Hook:
    """The installed ``sys.excepthook``: :func:`excepthook` in front of the hook it replaced (``previous``)."""

    def __init__(self, previous: ExceptHook) -> None:
        self.previous = previous

    def __call__(self, kind: type[BaseException], value: BaseException, tb: TracebackType | None) -> None:
        excepthook(kind, value, tb, self.previous)


def install() -> None:
    """Make :func:`excepthook` this process's ``sys.excepthook`` (once; the previous hook handles everything else)."""
    if isinstance(sys.excepthook, _Hook):
        return
    sys.excepthook = _Hook(sys.excepthook)


def uninstall() -> None:
    """Give back the hook :func:`install` replaced (when nothing replaced :func:`install`'s since)."""
    if isinstance(sys.excepthook, _Hook):
        sys.excepthook = sys.excepthook.previous


def excepthook(kind: type[BaseException], value: BaseException, tb: TracebackType | None, previous: ExceptHook) -> None:
    """Print ``value`` as one clear error when it is an anydevice error (and debugging is off), else hand it on."""
    text = one_error(value, tb)
    if text is None:
        previous(kind, value, tb)
        return
    try:
        sys.stderr.write(text)
        sys.stderr.flush()
    except (OSError, ValueError, AttributeError):  # no stderr to write to: the exit status still says it failed
        pass


def one_error(value: BaseException, tb: TracebackType | None) -> str | None:
    """The text :func:`excepthook` prints for ``value`` (lines ending in a newline), or None: not an anydevice error,
    or ``ANYDEVICE_DEBUG`` asks for the traceback."""
    if not isinstance(value, AnyDeviceError) or _debug():
        return None
    where = call_site(tb)
    at = f"(raised at {where}; ANYDEVICE_DEBUG=1 shows the traceback)" if where else "(ANYDEVICE_DEBUG=1 shows the traceback)"
    return f"anydevice: error: {value}\n{at}\n"


def call_site(tb: TracebackType | None) -> str | None:
    """``FILE:LINE`` of the innermost frame of the traceback in the user's code (not anydevice's, torch's or Python's)."""
    skipped = [_PACKAGE, os.path.dirname(os.path.abspath(os.__file__))]  # anydevice, Python's own library
    torch = sys.modules.get("torch")
    if torch is not None and getattr(torch, "__file__", None):
        skipped.append(os.path.dirname(os.path.abspath(str(torch.__file__))))
    found = None
    while tb is not None:
        filename = tb.tb_frame.f_code.co_filename
        own = str(tb.tb_frame.f_globals.get("__name__", "")).startswith("anydevice.")  # shims/, plugins/ in a checkout
        if not own and not filename.startswith("<") and not any(filename.startswith(folder + os.sep) for folder in skipped):
            found = f"{filename}:{tb.tb_lineno}"
        tb = tb.tb_next
    return found


def _debug() -> bool:
    try:
        return settings.ANYDEVICE_DEBUG.flag()
    except AnyDeviceError:
        return False
