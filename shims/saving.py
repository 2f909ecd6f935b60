"""Writing checkpoints safely: atomic renames, stale temporaries, symlinks, and every rank agreeing.

A save writes ``.NAME.PID@HOST.TOKEN.tmp`` beside its target, fsyncs it, renames it over the
target and fsyncs the directory. A save killed half-way leaves that temporary behind; the next
save into the same directory removes it once it is stale: its writer is a dead process on this
host, or it has not been written to for :data:`STALE_AFTER_S` (a writer on another host). A live
writer's temporary is never touched, so concurrent savers do not break each other.
"""

from __future__ import annotations

import os
import re
import secrets
import shutil
import socket
import time
from collections.abc import Callable
from pathlib import Path
from typing import IO, Any

STALE_AFTER_S = 3600.0
"""A temporary not modified for this long is stale even if its writer's host cannot be checked."""

_TEMP = re.compile(r"^\.(?P<name>.+)\.(?P<pid>\d+)@(?P<host>[^/]*)\.(?P<token>[0-9a-f]{8})\.tmp$")
_LEGACY = re.compile(r"^\..+\.[a-z0-9_]{8}\.tmp$")  # tempfile.mkstemp names written by anydevice <= 0.1.0


def _host() -> str:
    return re.sub(r"[^A-Za-z0-9._-]", "_", socket.gethostname()) or "localhost"


def temp_path(target: Path) -> Path:
    """A fresh temporary path beside ``target`` that names this process as its writer."""
    return target.parent / f".{target.name}.{os.getpid()}@{_host()}.{secrets.token_hex(4)}.tmp"


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # someone else's live process
        return True
    except OSError:
        return True  # cannot tell: treat as alive, age decides
    return True


def is_stale(entry: Path, now: float | None = None) -> bool:
    """True when ``entry`` is an anydevice temporary whose writer is gone."""
    try:
        age = (time.time() if now is None else now) - entry.lstat().st_mtime
    except FileNotFoundError:
        return False
    match = _TEMP.match(entry.name)
    if match is not None:
        pid = int(match["pid"])
        dead_here = match["host"] == _host() and pid != os.getpid() and not _pid_alive(pid)
        return dead_here or age > STALE_AFTER_S
    return bool(_LEGACY.match(entry.name)) and age > STALE_AFTER_S


def remove_stale_temps(directory: Path) -> list[Path]:
    """Delete the stale temporaries (files or directories) that killed saves left in ``directory``."""
    removed: list[Path] = []
    try:
        entries = [e for e in directory.iterdir() if e.name.startswith(".") and e.name.endswith(".tmp")]
    except FileNotFoundError:
        return removed
    now = time.time()
    for entry in entries:
        if not is_stale(entry, now):
            continue
        try:
            if entry.is_dir() and not entry.is_symlink():
                shutil.rmtree(entry)
            else:
                entry.unlink()
        except FileNotFoundError:
            pass  # another saver removed it first
        removed.append(entry)
    return removed


def fsync_directory(directory: Path) -> None:
    """Make a rename in ``directory`` durable (a no-op where directories cannot be opened, e.g. Windows)."""
    try:
        fd = os.open(directory, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass  # some filesystems refuse fsync on directories; the rename itself is still atomic
    finally:
        os.close(fd)


def resolve_target(path: Path) -> Path:
    """The file a save to ``path`` must replace: a symlink's final target, so the link stays a link."""
    return Path(os.path.realpath(path)) if path.is_symlink() else path


def atomic_write(path: Path | str, write: Callable[[IO[bytes]], Any]) -> Path:
    """``write(handle)`` into a temporary beside ``path``, fsync, rename over it, fsync the directory.

    The file gets the umask's mode; a symlinked ``path`` has its target replaced. Returns the file
    written. A crash leaves the previous file intact and readers never see a partial one.
    """
    target = resolve_target(Path(path))
    directory = target.parent
    directory.mkdir(parents=True, exist_ok=True)
    remove_stale_temps(directory)
    tmp = temp_path(target)
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_BINARY", 0), 0o666)
    try:
        with os.fdopen(fd, "wb") as handle:
            write(handle)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, target)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    fsync_directory(directory)
    return target


def group_rank() -> int | None:
    """This process's rank in the initialised default process group, None without one."""
    import torch.distributed as dist

    if dist.is_available() and dist.is_initialized():
        return int(dist.get_rank())
    return None


def on_main_rank(action: Callable[[], None], what: str, device: Any = None) -> None:
    """Run ``action`` on the main rank; with a process group, every rank returns only after it finished.

    Without a process group the process always acts (``RANK`` alone does not make a process a
    follower). With one, rank 0 acts and then broadcasts whether it succeeded, so the other ranks
    neither return before the file is in place nor wait forever when rank 0 failed: they raise
    :class:`~anydevice.errors.CheckpointError`. ``device`` holds the status tensor for backends
    that cannot broadcast CPU tensors (the placement's device); gloo always uses the CPU.
    """
    rank = group_rank()
    if rank is None:
        action()
        return
    import torch
    import torch.distributed as dist

    failure: BaseException | None = None
    if rank == 0:
        try:
            action()
        except Exception as exc:  # reported to the other ranks, then re-raised here
            failure = exc
    backend = str(dist.get_backend())
    on = "cpu" if device is None or "gloo" in backend else device
    status = torch.tensor([0 if failure is None else 1], dtype=torch.int32, device=on)
    dist.broadcast(status, src=0)
    if failure is not None:
        raise failure
    if int(status.item()) != 0:
        from anydevice.errors import CheckpointError

        raise CheckpointError(
            f"Rank 0 failed to {what}, so this rank did not continue.", "Rank 0's error in its output says why."
        )
