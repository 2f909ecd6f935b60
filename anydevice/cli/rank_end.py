"""How a rank ends after its script succeeded while torch's gloo threads outlive the script.

From torch 2.13 a gloo process group outlives ``destroy_process_group``: the functions of
``torch.distributed.nn.functional`` (imported by DDP and the functional collectives, often after
``init_process_group``) keep the group as a default argument (``group=group.WORLD``), and a
``DistributedDataParallel`` module in the script's globals keeps it too. Such a group is freed only inside
Python's own teardown, with its threads (``pt_gloo_runloop``, ``gloo_tcp_loop``) still running, and there now
and then the rank aborts ("terminate called without an active exception", then a segmentation fault) or hangs,
after the script succeeded. torch 2.9 frees the group the DDP case keeps the same way.

So a rank whose script ended with status 0 while those threads run ends in Python's order, with the group freed
while the interpreter is still whole:

1. Python's own first exit steps: the main thread is done, non-daemon threads are joined, the exit handlers run.
2. The groups are released: a default group the script left is destroyed, the stale defaults that hold a
   destroyed group are dropped, and, if a group still lives, the script's globals are cleared the way Python's
   teardown clears a module (names with one leading underscore first, then the rest) and collected, so each
   object's finalizer runs as at Python's exit (a gzip or zip file is finished, a DDP module frees its group).
3. Once the gloo threads are gone the rank ends as every Python program does: its teardown as always.
4. Only if a group still lives (held where nothing here reaches) does the rank end past the C++ teardown, as a
   ``multiprocessing`` child does: every file object still open is closed (wrappers before what they wrap,
   sqlite connections closed without a commit, as Python's exit leaves them), the standard streams are flushed,
   then ``os._exit(0)``.

Anything else ends as before. Standard library only until torch is already imported: it runs in a rank
(:mod:`.rank_start`).
"""

from __future__ import annotations

import atexit
import gc
import io
import os
import sys
import threading
import types
from collections.abc import Iterable

GLOO_THREADS = frozenset({"pt_gloo_runloop", "gloo_tcp_loop"})
"""The names torch's gloo backend gives its worker and transport threads (``/proc/self/task/*/comm``)."""
CLOSED_AT_EXIT = ("zipfile.ZipFile", "sqlite3.Connection")
"""Types outside :class:`io.IOBase` that Python's exit closes (their finalizer closes them), as ``module.Name``."""


def native_thread_names() -> list[str]:
    """The names of this process's native threads (Linux ``/proc``); empty where there is no ``/proc``."""
    try:
        tasks = os.listdir("/proc/self/task")
    except OSError:
        return []
    names = []
    for task in tasks:
        try:
            with open(f"/proc/self/task/{task}/comm") as comm:
                names.append(comm.read().strip())
        except OSError:  # the thread ended meanwhile
            continue
    return names


def gloo_outlives_its_group() -> bool:
    """Whether torch's gloo threads still run here (with no process group left, they never stop)."""
    return not GLOO_THREADS.isdisjoint(native_thread_names())


def finish() -> None:
    """At a rank's successful end: return (Python ends it as always), or end it now past the C++ teardown."""
    if not gloo_outlives_its_group():
        return
    run_first_exit_steps()
    release_process_groups()
    if not gloo_outlives_its_group():
        return  # the groups ended with the interpreter whole: Python's own exit does the rest
    close_open_files()
    flush_standard_streams()
    os._exit(0)


def run_first_exit_steps() -> None:
    """What Python's exit does before its teardown: join the non-daemon threads, then run the exit handlers."""
    shutdown = getattr(threading, "_shutdown", None)  # what Python's own exit calls first
    if callable(shutdown):
        shutdown()
    else:  # pragma: no cover - every CPython this project supports has it
        for thread in threading.enumerate():
            if thread is not threading.current_thread() and not thread.daemon:
                thread.join()
    atexit._run_exitfuncs()  # runs each handler once: Python's exit then finds none left


def release_process_groups() -> None:
    """Free the gloo groups while the interpreter is whole (see the module's docstring, step 2)."""
    dist = sys.modules.get("torch.distributed")
    if dist is None:
        return
    try:
        if dist.is_available() and dist.is_initialized():
            dist.destroy_process_group()  # the script's work and its exit handlers are done: nothing uses it now
    except Exception:  # a group torch cannot destroy: step 4 ends the rank
        pass
    drop_stale_group_defaults()
    gc.collect()
    if gloo_outlives_its_group():
        main = sys.modules.get("__main__")
        if main is not None:
            clear_module_dict(vars(main))
        gc.collect()


def drop_stale_group_defaults() -> None:
    """Give functions whose default argument is a destroyed process group ``None`` instead (the default group).

    ``def all_reduce(tensor, op=..., group=group.WORLD)`` evaluated after ``init_process_group`` holds that group
    for as long as the function lives: until Python's teardown, where the group's threads then outlive it.
    """
    c10d = sys.modules.get("torch.distributed.distributed_c10d")
    group_type = getattr(sys.modules.get("torch._C._distributed_c10d"), "ProcessGroup", None)
    if c10d is None or not isinstance(group_type, type):
        return
    live = getattr(getattr(c10d, "_world", None), "pg_map", {})

    def stale(value: object) -> bool:
        return issubclass(type(value), group_type) and value not in live

    for obj in gc.get_objects():
        if type(obj) is not types.FunctionType:
            continue
        if obj.__defaults__ and any(stale(value) for value in obj.__defaults__):
            obj.__defaults__ = tuple(None if stale(value) else value for value in obj.__defaults__)
        if obj.__kwdefaults__ and any(stale(value) for value in obj.__kwdefaults__.values()):
            obj.__kwdefaults__ = {key: None if stale(value) else value for key, value in obj.__kwdefaults__.items()}


def clear_module_dict(namespace: dict[str, object]) -> None:
    """Clear a module's globals as Python's teardown does (``_PyModule_ClearDict``): names with one leading
    underscore first, then every name but ``__builtins__``, each set to None in the dict's order."""
    for key in list(namespace):
        if key.startswith("_") and not key.startswith("__") and namespace[key] is not None:
            namespace[key] = None
    for key in list(namespace):
        if key != "__builtins__" and namespace[key] is not None:
            namespace[key] = None


def close_open_files() -> None:
    """Close every file object still open, wrappers before what they wrap, as their finalizers at Python's exit would.

    A gzip, lzma, bz2 or zip file is finished (its trailer written), a text or buffered file is flushed and
    closed, a custom :class:`io.RawIOBase` gets its ``close()``; an sqlite connection is closed without a commit,
    as Python's exit leaves it. The standard streams stay open.
    """
    standard = set()
    for stream in (sys.stdin, sys.stdout, sys.stderr, sys.__stdin__, sys.__stdout__, sys.__stderr__):
        for layer in (stream, getattr(stream, "buffer", None), getattr(getattr(stream, "buffer", None), "raw", None)):
            standard.add(id(layer))
    kinds: dict[type, bool] = {}
    files = []
    for obj in gc.get_objects():
        kind = type(obj)  # the type itself: no object's __class__ hook runs
        if kind not in kinds:
            kinds[kind] = _closed_at_exit(kind)
        if kinds[kind] and id(obj) not in standard:
            files.append(obj)
    for obj in outermost_first(files):
        try:
            getattr(obj, "close")()  # noqa: B009 - every kind gathered above has close()
        except Exception:  # as at Python's exit: a finalizer's error never stops the others
            continue


def _closed_at_exit(kind: type) -> bool:
    return issubclass(kind, io.IOBase) or any(f"{base.__module__}.{base.__qualname__}" in CLOSED_AT_EXIT for base in kind.__mro__)


def outermost_first(objects: list[object]) -> list[object]:
    """``objects`` ordered so that one that refers to another (a wrapper and what it wraps) comes before it."""
    ids = {id(obj) for obj in objects}
    wraps: dict[int, set[int]] = {}
    for obj in objects:
        referents = gc.get_referents(obj)
        inner = getattr(obj, "__dict__", None)
        if isinstance(inner, dict):
            referents.extend(inner.values())
        wraps[id(obj)] = {id(ref) for ref in referents if id(ref) in ids and ref is not obj}
    ordered: list[object] = []
    remaining = list(objects)
    while remaining:
        wrapped = {inner for obj in remaining for inner in wraps[id(obj)]}
        outer = [obj for obj in remaining if id(obj) not in wrapped] or remaining[:1]  # a cycle: any one first
        ordered.extend(outer)
        done = {id(obj) for obj in outer}
        remaining = [obj for obj in remaining if id(obj) not in done]
    return ordered


def flush_standard_streams(streams: Iterable[object] = ()) -> None:
    """Flush ``sys.stdout`` and ``sys.stderr`` (and ``streams``), as Python's exit does."""
    for stream in [*streams, sys.stdout, sys.stderr]:
        try:
            flush = getattr(stream, "flush", None)
            if callable(flush):
                flush()
        except (OSError, ValueError):  # a closed pipe, a detached buffer: nothing to keep
            continue
