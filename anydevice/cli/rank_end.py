"""How a rank ends after its script succeeded while torch's gloo threads outlive the process group.

From torch 2.13 a gloo process group that ran a functional collective (DTensor, tensor parallelism, FSDP2:
``torch.distributed._functional_collectives``), or that a ``DistributedDataParallel`` module still holds, is
never freed: ``destroy_process_group`` leaves its threads (``pt_gloo_runloop``, ``gloo_tcp_loop``) running,
and the C++ teardown at the process's exit may then abort the rank ("terminate called without an active
exception", then a segmentation fault) after the script succeeded, so the launcher reports a failed run.
torch 2.9 frees the group.

A rank whose script ended with status 0 while those threads run ends the way a ``multiprocessing`` child
does (``torch.multiprocessing.spawn``'s ranks end so): Python's own shutdown steps in Python's order (the
main thread is done, non-daemon threads are joined, the exit handlers run), then the files the script left
open and the standard streams are flushed, and the process ends (``os._exit``) without the C++ teardown.
Anything else ends as before. Standard library only: it runs in a rank (:mod:`.rank_start`).
"""

from __future__ import annotations

import atexit
import gc
import io
import os
import sys
import threading

GLOO_THREADS = frozenset({"pt_gloo_runloop", "gloo_tcp_loop"})
"""The names torch's gloo backend gives its worker and transport threads (``/proc/self/task/*/comm``)."""
WRITERS = (io.TextIOWrapper, io.BufferedWriter, io.BufferedRandom)
"""The file objects that hold written data in a buffer until flushed."""


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
    shutdown = getattr(threading, "_shutdown", None)  # what Python's own exit calls first
    if callable(shutdown):
        shutdown()
    else:  # pragma: no cover - every CPython this project supports has it
        for thread in threading.enumerate():
            if thread is not threading.current_thread() and not thread.daemon:
                thread.join()
    atexit._run_exitfuncs()
    flush_open_files()
    os._exit(0)


def flush_open_files() -> None:
    """Flush every file object still open, as their finalization at Python's exit would (text layers first)."""
    files = [obj for obj in gc.get_objects() if issubclass(type(obj), WRITERS)]  # the type itself: no __class__ hooks
    files.sort(key=lambda f: not isinstance(f, io.TextIOWrapper))
    for stream in [*files, sys.stdout, sys.stderr]:
        try:
            if stream is not None and not stream.closed and stream.writable():
                stream.flush()
        except (OSError, ValueError, AttributeError):  # a closed pipe, a detached buffer: nothing to keep
            continue
