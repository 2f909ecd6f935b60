"""Publishing a checkpoint in one atomic step, and cleaning up only what a dead writer of ours left.

A save writes a temporary beside its target, named ``.NAME.anydevice-tmp.<16 hex>`` (a file for
``ad.save``, a directory for ``ad.checkpoint.save``), and publishes it in one step:

- a file: ``fsync``, ``rename(2)`` over the target, ``fsync`` of the directory;
- a directory: ``renameat2(RENAME_NOREPLACE)`` when the path is free, else
  ``renameat2(RENAME_EXCHANGE)`` swapping the new directory with the previous checkpoint, whose
  tree (now under the temporary name) is then deleted. Where ``renameat2`` is missing (not Linux,
  or a filesystem without it) two renames are used, with a recovery rule (see
  :func:`remove_stale_temps`).

Liveness: the writer holds ``flock`` on its temporary file (on the ``.anydevice-checkpoint``
marker inside a temporary directory) until it has published. A lock lives in the kernel (or
the NFS lock manager), not in a PID, so it holds across containers and PID namespaces; it is
released when the writer dies, however it dies. Cleanup removes a temporary only when its name
is one this module makes and its lock can be taken; other tools' hidden files are never touched.
A temporary is created as ``.NAME.anydevice-new.<hex>`` and renamed ``-tmp`` once locked; for that
instant the writer holds a shared ``flock`` on the directory itself (:func:`naming`), so cleanup,
which takes it exclusive, can tell a writer killed in that instant from one still in it.
"""

from __future__ import annotations

import ctypes
import errno
import os
import re
import secrets
import stat
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import IO, Any, cast

from anydevice.errors import CheckpointError
from anydevice.files.safe_place import Place, kind, save_error

MARKER = ".anydevice-checkpoint"
"""The file every directory checkpoint holds: its writer's lock while it is a temporary, and a sign of whose it is."""

METADATA = ".metadata"

GRACE_S = 60.0
"""Where the directory cannot be locked, a ``.NAME.anydevice-new.<hex>`` (a temporary in the instant between its creation
and its lock) is left alone this long."""

STALE_AFTER_S = 3600.0
"""Where locks do not work (``ENOLCK``), a temporary this old is stale."""

_OURS = re.compile(r"^\..+\.anydevice-(?P<kind>tmp|old|new)\.(?P<token>[0-9a-f]{16})$")
_CLOEXEC = getattr(os, "O_CLOEXEC", 0)
_NOFOLLOW = getattr(os, "O_NOFOLLOW", 0)
_RENAME_NOREPLACE, _RENAME_EXCHANGE = 1, 2


def temp_name(name: str, token: str | None = None, kind: str = "tmp") -> str:
    """The hidden name of a temporary (``kind="tmp"``; ``"new"`` until it is locked) or moved-aside checkpoint (``"old"``)."""
    return f".{name[:200]}.anydevice-{kind}.{token or secrets.token_hex(8)}"


def fsync_directory(fd: int) -> None:
    """Make a rename in the directory ``fd`` durable (some filesystems refuse; the rename is still atomic)."""
    try:
        os.fsync(fd)
    except OSError:
        pass


def lock(fd: int, *, wait: bool, shared: bool = False) -> bool | None:
    """``flock`` on ``fd`` (exclusive, or ``shared`` for a probe): True when taken, False when another holds it, None
    where locks do not work."""
    try:
        import fcntl
    except ImportError:  # Windows
        return None
    try:
        fcntl.flock(fd, (fcntl.LOCK_SH if shared else fcntl.LOCK_EX) | (0 if wait else fcntl.LOCK_NB))
    except BlockingIOError:
        return False
    except OSError as exc:
        if exc.errno in (errno.EWOULDBLOCK, errno.EAGAIN, errno.EACCES):
            return False
        return None  # ENOLCK, EOPNOTSUPP, EINVAL: this filesystem has no locks
    return True


@contextmanager
def naming(place: Place) -> Iterator[None]:
    """Held while a writer creates its ``-new`` temporary, locks it and renames it ``-tmp``: a shared ``flock`` on the
    directory. Cleanup removes a ``-new`` only while it holds that lock exclusively (no writer is in that instant), so a
    ``-new`` it sees then was left by a dead writer. Where the directory cannot be opened or locked, nothing is held
    and cleanup falls back to :data:`GRACE_S`."""
    fd = _open_directory(place.fd)
    try:
        if fd is not None:
            lock(fd, wait=True, shared=True)
        yield
    finally:
        if fd is not None:
            os.close(fd)


def _open_directory(dir_fd: int) -> int | None:
    """A new open file description of the directory ``dir_fd`` (``flock`` locks belong to one), or None."""
    try:
        return os.open(".", os.O_RDONLY | os.O_DIRECTORY | _CLOEXEC, dir_fd=dir_fd)
    except OSError:
        return None


# -- stale temporaries ----------------------------------------------------------------------------


def remove_stale_temps(place: Place) -> list[str]:
    """Delete the temporaries that dead writers of ours left beside ``place``; return their names.

    A name matching ``.NAME.anydevice-tmp.<hex>`` is removed when its lock can be taken; where locks
    do not work, after :data:`STALE_AFTER_S`. A ``-new`` one is removed while no writer is naming a
    temporary in the directory (:func:`naming`) and its own lock, if it has one yet, can be taken;
    where the directory cannot be locked, only after :data:`GRACE_S`. A moved-aside
    ``.NAME.anydevice-old.<hex>`` (only the two-rename fallback makes one) whose writer is dead is
    renamed back to ``NAME`` when nothing is there (the crash fell between the two renames), else
    deleted. Nothing else is touched.
    """
    removed: list[str] = []
    try:
        names = os.listdir(place.fd)
    except OSError:
        return removed
    now = time.time()
    fresh = [name for name in names if (match := _OURS.match(name)) is not None and match["kind"] == "new"]
    if fresh:
        removed += _remove_dead_new(place, fresh, now)
    for name in names:
        match = _OURS.match(name)
        try:
            if match is not None and match["kind"] == "tmp":
                if _writer_dead(place.fd, name, now):
                    _remove(place.fd, name)
                    removed.append(name)
            elif match is not None and match["kind"] == "old":
                if not _writer_dead(place.fd, temp_name(name.split(".anydevice-old.")[0][1:], match["token"]), now):
                    continue
                original = name[1 : name.rindex(".anydevice-old.")]
                if place.lstat(original) is None:
                    os.rename(name, original, src_dir_fd=place.fd, dst_dir_fd=place.fd)
                else:
                    _remove(place.fd, name)
                removed.append(name)
        except OSError:
            continue  # cleaned by another saver first, published by its writer, or not ours to delete: best effort
    return removed


def _remove_dead_new(place: Place, names: list[str], now: float) -> list[str]:
    """Remove the ``-new`` temporaries among ``names`` whose writers are dead (:func:`remove_stale_temps`)."""
    fd = _open_directory(place.fd)
    held = lock(fd, wait=False) if fd is not None else None
    try:
        if held is False:
            return []  # a writer is naming its temporary now: a later save sweeps what a dead one left
        removed = []
        for name in names:
            try:
                if _writer_dead(place.fd, name, now, grace=held is None):
                    _remove(place.fd, name)
                    removed.append(name)
            except OSError:
                continue  # renamed -tmp by its writer, or cleaned by another saver first
        return removed
    finally:
        if fd is not None:
            os.close(fd)


def _writer_dead(dir_fd: int, name: str, now: float, grace: bool = False) -> bool:
    """True when the temporary ``name`` exists and no live writer holds its lock (and, with ``grace``, it is old)."""
    try:
        st = os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
    except FileNotFoundError:
        return True  # its writer published or removed it (a moved-aside checkpoint's pair)
    age = now - st.st_mtime
    if stat.S_ISDIR(st.st_mode):
        try:
            inner = os.open(name, os.O_RDONLY | os.O_DIRECTORY | _NOFOLLOW | _CLOEXEC, dir_fd=dir_fd)
        except OSError:
            return False
        try:
            fd = os.open(MARKER, os.O_RDONLY | _NOFOLLOW | _CLOEXEC, dir_fd=inner)
        except FileNotFoundError:
            return not grace or age > GRACE_S  # a -tmp is marked before it is named: a dead writer was deleting it
        finally:
            os.close(inner)
    elif stat.S_ISREG(st.st_mode):
        fd = os.open(name, os.O_RDONLY | _NOFOLLOW | _CLOEXEC | getattr(os, "O_NONBLOCK", 0), dir_fd=dir_fd)
    else:
        return False  # a link or a device with our pattern: not something we made
    try:
        taken = lock(fd, wait=False, shared=True)  # fails while the writer holds its exclusive lock
        if taken is None:
            return age > STALE_AFTER_S
        return taken and (not grace or age > GRACE_S)
    finally:
        os.close(fd)


def _remove(dir_fd: int, name: str) -> None:
    """Delete ``name`` in ``dir_fd``: a file, or a directory tree (walked by descriptor, never following links)."""
    st = os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
    if not stat.S_ISDIR(st.st_mode):
        os.unlink(name, dir_fd=dir_fd)
        return
    inner = os.open(name, os.O_RDONLY | os.O_DIRECTORY | _NOFOLLOW | _CLOEXEC, dir_fd=dir_fd)
    try:
        for child in os.listdir(inner):
            try:
                _remove(inner, child)
            except FileNotFoundError:
                pass
    finally:
        os.close(inner)
    os.rmdir(name, dir_fd=dir_fd)


# -- files -------------------------------------------------------------------------------------------


class _Recorder:
    """A file object that remembers the first ``OSError`` a write raised (torch reports it as "unexpected pos")."""

    def __init__(self, handle: IO[bytes]) -> None:
        self.handle = handle
        self.error: OSError | None = None

    def write(self, data: Any) -> int:
        try:
            return self.handle.write(data)
        except OSError as exc:
            self.error = self.error or exc
            raise

    def flush(self) -> None:
        try:
            self.handle.flush()
        except OSError as exc:
            self.error = self.error or exc
            raise

    def __getattr__(self, name: str) -> Any:
        return getattr(self.handle, name)


def check_replaceable_file(place: Place, st: os.stat_result, accepts: Callable[[bytes], bool] | None = None) -> None:
    """Raise :class:`CheckpointError` unless the existing entry is a writable earlier checkpoint file.

    An earlier checkpoint is what :func:`anydevice.files.file_kinds.torch_checkpoint` recognises (torch's archive
    layout, read from the zip's central directory; never the zip magic alone), or an empty file. ``accepts`` judges
    the file's first 14 bytes instead (another format's writer, e.g. ``ad.export``'s ``.tflite``).
    """
    from anydevice.files import file_kinds

    path = place.path
    if stat.S_ISDIR(st.st_mode):
        raise CheckpointError(
            f"Cannot save {path}: it is a directory; it was left as it was.",
            "ad.save writes one file: give a file path (ckpt/step-100.pt), or use ad.checkpoint.save for a directory.",
        )
    if not stat.S_ISREG(st.st_mode):
        resolved = place.directory / place.name
        what = kind(st) if Path(os.path.abspath(path)) == resolved else f"a symbolic link to {resolved}, {kind(st)}"
        raise CheckpointError(
            f"Cannot save {path}: it is {what}, not a regular file; nothing was written through it.",
            "ad.save writes a regular file (beside it first, then renamed into place): give the path of one.",
        )
    if not st.st_mode & 0o222 or not os.access(place.name, os.W_OK, dir_fd=place.fd):
        raise CheckpointError(
            f"Cannot save {path}: the file is read-only (mode {stat.S_IMODE(st.st_mode):04o}); it was left as it was.",
            f"Make it writable (chmod u+w {path}) to let ad.save replace it, or save to another path.",
        )
    if st.st_size == 0:
        return
    fd = os.open(place.name, os.O_RDONLY | _NOFOLLOW | _CLOEXEC | getattr(os, "O_NONBLOCK", 0), dir_fd=place.fd)
    try:
        if accepts is not None:
            if not accepts(os.pread(fd, 14, 0)):
                raise CheckpointError(
                    f"Cannot replace {path}: the file there is not of the kind being written; it was left alone."
                )
            return
        if file_kinds.torch_checkpoint(fd):
            return
        what = file_kinds.describe(fd)
    finally:
        os.close(fd)
    raise CheckpointError(
        f"Cannot save {path}: the file there looks like {what}, not a checkpoint; it was left as it was.",
        "ad.save replaces only an earlier checkpoint (a torch.save archive): move that file away, or save to another path.",
    )


def write_file(place: Place, write: Callable[[IO[bytes]], Any], *, accepts: Callable[[bytes], bool] | None = None) -> None:
    """``write(handle)`` into a locked temporary beside ``place``, fsync, rename over the target, fsync the directory.

    An existing target must be an earlier checkpoint file, or one ``accepts`` takes (:func:`check_replaceable_file`). Where
    the directory is not writable but the target file is, the file is rewritten in place
    (:func:`_write_in_place`). Every failure is a :class:`CheckpointError` naming the file.
    """
    existing = place.lstat()
    if existing is not None:
        check_replaceable_file(place, existing, accepts)
    remove_stale_temps(place)
    free = free_space(place.fd)
    try:
        fd, name = locked_temp_file(place)
    except OSError as exc:
        if exc.errno in (errno.EACCES, errno.EPERM) and existing is not None:
            _write_in_place(place, existing, write)
            return
        said = save_error(place.path, OSError(exc.errno, exc.strerror))  # the temporary's name means nothing to the user
        where = f"no new file can be made in its folder {Path(place.path).parent}; nothing was written"
        raise CheckpointError(f"{said.message.removesuffix('.')}: {where}.", said.hint) from None
    recorder: _Recorder | None = None
    try:
        with os.fdopen(os.dup(fd), "wb") as handle:
            recorder = _Recorder(handle)
            write(recorder)  # type: ignore[arg-type]  # the recorder stands in for the file the writer expects
            recorder.flush()
            os.fsync(handle.fileno())
        os.rename(name, place.name, src_dir_fd=place.fd, dst_dir_fd=place.fd)
    except BaseException as exc:
        unlink_quietly(place.fd, name)
        failure = recorder.error if recorder is not None and recorder.error is not None else exc
        if isinstance(failure, OSError):
            raise space_error(place.path, failure, write, free) from exc
        if isinstance(exc, Exception) and not isinstance(exc, CheckpointError):  # e.g. an object pickle refuses
            detail = (str(exc).strip().splitlines() or [""])[0]
            raise CheckpointError(f"Cannot save {place.path}: {type(exc).__name__}: {detail}".rstrip(": ")) from exc
        raise
    finally:
        os.close(fd)
    fsync_directory(place.fd)


_FULL = (errno.ENOSPC, errno.EDQUOT)


def space_error(path: Path | str, exc: OSError, write: Callable[[IO[bytes]], Any], free: int | None) -> CheckpointError:
    """:func:`~anydevice.files.safe_place.save_error` for a write that failed; on a full disk (or past a size limit)
    it says how many bytes the file needs (``write`` run again into a counter: nothing is written) and, on a full
    disk, how many were ``free`` when the save began (:func:`free_space`)."""
    if exc.errno not in (*_FULL, errno.EFBIG):
        return save_error(path, exc)
    counter = _Counter()
    try:
        write(cast(IO[bytes], counter))  # the counter stands in for the file the writer expects
        needed: int | None = counter.size
    except Exception:  # the size is a courtesy: the error stands without it
        needed = None
    return save_error(path, exc, needed=needed, free=free if exc.errno in _FULL else None)


def free_space(fd: int) -> int | None:
    """Bytes an unprivileged writer may still use on the filesystem holding ``fd`` (None where it cannot be told)."""
    try:
        found = os.fstatvfs(fd)
    except OSError:
        return None
    return found.f_bavail * found.f_frsize


class _Counter:
    """A file object that only counts what is written to it."""

    def __init__(self) -> None:
        self.size = 0

    def write(self, data: Any) -> int:
        written = memoryview(data).nbytes
        self.size += written
        return written

    def flush(self) -> None:
        pass


def locked_temp_file(place: Place) -> tuple[int, str]:
    """A new temporary file beside ``place``, locked before it gets its ``-tmp`` name; returns its fd and name.

    Created as ``-new`` and renamed once locked, so every ``-tmp`` file that is not locked has a
    dead writer, whatever size it has (a kill before the first write leaves an empty one).
    """
    token = secrets.token_hex(8)
    new, name = temp_name(place.name, token, "new"), temp_name(place.name, token)
    with naming(place):
        fd = os.open(new, os.O_WRONLY | os.O_CREAT | os.O_EXCL | _NOFOLLOW | _CLOEXEC, 0o666, dir_fd=place.fd)
        try:
            lock(fd, wait=True)  # held until the publishing rename: other savers' cleanup leaves it alone
            os.rename(new, name, src_dir_fd=place.fd, dst_dir_fd=place.fd)
        except BaseException:
            os.close(fd)
            unlink_quietly(place.fd, new)
            raise
    return fd, name


def _write_in_place(place: Place, existing: os.stat_result, write: Callable[[IO[bytes]], Any]) -> None:
    """Rewrite the target's contents when its directory cannot hold a temporary (not crash-atomic).

    The new contents are staged in a temporary file first (``TMPDIR``), so the target is touched
    only once the serialization succeeded; a crash during the copy leaves it truncated, which
    ``ad.load`` reports. A hard-linked file is refused: rewriting it in place would change its other names too.
    """
    import tempfile

    if existing.st_nlink > 1:
        others = existing.st_nlink - 1
        raise CheckpointError(
            f"Cannot save {place.path}: its directory cannot be written, so the file would be rewritten in place, but it "
            f"has {others} other hard link{'s' if others > 1 else ''}, which would change with it; it was left as it was.",
            f"Save to a directory you can write to, or make {place.directory} writable (ad.save then replaces the name "
            "alone and the other links keep the old contents).",
        )
    staging = f"{place.path} (staged in {tempfile.gettempdir()})"
    try:
        staged = tempfile.TemporaryFile()  # noqa: SIM115 - closed by close_quietly: a failed write must not fail twice
    except OSError as exc:
        raise save_error(staging, exc) from None
    try:
        free = free_space(staged.fileno())
        recorder = _Recorder(staged)
        try:
            write(recorder)  # type: ignore[arg-type]  # the recorder stands in for the file the writer expects
            recorder.flush()
        except BaseException as exc:
            if recorder.error is not None:
                raise space_error(staging, recorder.error, write, free) from exc
            raise
        size = staged.tell()
        staged.seek(0)
        _copy_over(place, staged, size)
    finally:
        close_quietly(staged)


def _copy_over(place: Place, staged: IO[bytes], size: int) -> None:
    """Copy ``size`` bytes of ``staged`` over the target's contents, locked, then fsync."""
    import shutil

    try:
        fd = os.open(place.name, os.O_WRONLY | _NOFOLLOW | _CLOEXEC, dir_fd=place.fd)
    except OSError as exc:
        raise save_error(place.path, exc) from None
    try:
        lock(fd, wait=True)
        target = os.fdopen(os.dup(fd), "wb")  # closed by close_quietly, as above
        try:
            shutil.copyfileobj(staged, target, 1 << 20)
            target.flush()
            os.ftruncate(target.fileno(), size)
            os.fsync(target.fileno())
        finally:
            close_quietly(target)
    except OSError as exc:
        raise save_error(place.path, exc) from None
    finally:
        os.close(fd)


def close_quietly(handle: IO[bytes]) -> None:
    """Close a buffered file whose error is already being reported: a write that failed (a full disk) leaves bytes in
    its buffer, and the close's flush would fail again and replace the error that says why (and with which file)."""
    try:
        handle.close()
    except OSError:
        pass


def unlink_quietly(dir_fd: int, name: str) -> None:
    """Remove ``name`` from ``dir_fd`` if it is there (a failed write's temporary)."""
    try:
        os.unlink(name, dir_fd=dir_fd)
    except OSError:
        pass


# -- directories -------------------------------------------------------------------------------------


def directory_problem(place: Place) -> str | None:
    """None when the target is absent, empty, or an earlier directory checkpoint; else why it is not one.

    Concurrent saves may move the target away or delete the previous checkpoint's files while it is read: a name gone
    by then is not held against it (the publishing rename, atomic, is what decides).
    """
    st = place.lstat()
    if st is None:
        return None
    if not stat.S_ISDIR(st.st_mode):
        return "it is not a directory"
    try:
        fd = os.open(place.name, os.O_RDONLY | os.O_DIRECTORY | _NOFOLLOW | _CLOEXEC, dir_fd=place.fd)
    except FileNotFoundError:
        return None  # moved away by a concurrent save since the lstat
    except NotADirectoryError:
        return "it is not a directory"
    try:
        foreign = sorted(entry for entry in os.listdir(fd) if not _checkpoint_entry(fd, entry))
    finally:
        os.close(fd)
    if foreign:
        shown = ", ".join(foreign[:5]) + (f" and {len(foreign) - 5} more" if len(foreign) > 5 else "")
        return f"it holds {shown}, which a checkpoint does not"
    return None


def _checkpoint_entry(dir_fd: int, entry: str) -> bool:
    """True when ``entry`` is a file a directory checkpoint holds, or is gone (a concurrent save deleted it)."""
    if not (entry in (METADATA, MARKER) or entry.endswith(".distcp")):
        return False
    try:
        return stat.S_ISREG(os.stat(entry, dir_fd=dir_fd, follow_symlinks=False).st_mode)
    except FileNotFoundError:
        return True


def refuse_directory(place: Place, problem: str) -> CheckpointError:
    """The error for a directory-checkpoint target that is not an earlier checkpoint (``problem`` says why)."""
    return CheckpointError(
        f"Cannot save checkpoint {place.path}: {problem}; nothing in it was touched.",
        "ad.checkpoint.save replaces only an earlier checkpoint directory: give a new path (ckpt/step-100).",
    )


class DirectoryWrite:
    """A temporary checkpoint directory beside ``place``, locked by this process until :meth:`publish`."""

    def __init__(self, place: Place) -> None:
        self.place = place
        self.token = secrets.token_hex(8)
        self.name = temp_name(place.name, self.token)
        new = temp_name(place.name, self.token, "new")  # renamed to -tmp once its marker is locked
        try:
            with naming(place):
                os.mkdir(new, 0o777, dir_fd=place.fd)
                inner = os.open(new, os.O_RDONLY | os.O_DIRECTORY | _NOFOLLOW | _CLOEXEC, dir_fd=place.fd)
                try:
                    self.marker = os.open(MARKER, os.O_RDWR | os.O_CREAT | os.O_EXCL | _NOFOLLOW | _CLOEXEC, 0o666, dir_fd=inner)
                finally:
                    os.close(inner)
                lock(self.marker, wait=True)
                os.write(self.marker, b"anydevice checkpoint (torch.distributed.checkpoint)\n")
                os.rename(new, self.name, src_dir_fd=place.fd, dst_dir_fd=place.fd)
        except OSError as exc:
            raise save_error(place.path, exc) from None

    @property
    def path(self) -> str:
        """The temporary directory's path, for DCP's writers on every rank."""
        return str(self.place.directory / self.name)

    def publish(self) -> None:
        """Swap the finished temporary into place in one step; the previous checkpoint is then deleted."""
        place = self.place
        try:
            for _ in range(5):
                problem = directory_problem(place)
                if problem is not None:
                    raise refuse_directory(place, problem)
                if place.lstat() is None:
                    if _rename(place.fd, self.name, place.name, _RENAME_NOREPLACE):
                        break
                    continue  # another saver published first: replace its checkpoint on the next pass
                if _rename(place.fd, self.name, place.name, _RENAME_EXCHANGE):
                    try:
                        _remove(place.fd, self.name)  # now the previous checkpoint (a concurrent cleanup may beat us)
                    except FileNotFoundError:
                        pass
                    break
            else:
                raise CheckpointError(f"Cannot save checkpoint {place.path}: other saves kept replacing it; try again.")
        except OSError as exc:
            raise save_error(place.path, exc) from None
        finally:
            self.close()
        fsync_directory(place.fd)

    def abandon(self) -> None:
        """Delete the temporary after a failed save."""
        try:
            _remove(self.place.fd, self.name)
        except OSError:
            pass
        self.close()

    def close(self) -> None:
        if self.marker >= 0:
            os.close(self.marker)
            self.marker = -1


def rename_noreplace(dir_fd: int, source: str, target: str) -> bool:
    """Rename ``source`` to ``target`` in ``dir_fd`` unless ``target`` exists (then False): one atomic step where the
    kernel has ``renameat2``."""
    return _rename(dir_fd, source, target, _RENAME_NOREPLACE)


def _rename(dir_fd: int, source: str, target: str, flags: int) -> bool:
    """``renameat2(source, target, flags)`` in ``dir_fd``: False when ``target`` appeared (NOREPLACE) or vanished (EXCHANGE).

    Falls back to plain renames where ``renameat2`` is unsupported.
    """
    result = _renameat2(dir_fd, source, target, flags)
    if result is None:  # unsupported here
        if flags == _RENAME_NOREPLACE:
            try:
                os.rename(source, target, src_dir_fd=dir_fd, dst_dir_fd=dir_fd)  # replaces at most an empty directory
            except OSError as exc:
                if exc.errno in (errno.ENOTEMPTY, errno.EEXIST):
                    return False
                raise
            return True
        return _fallback_rename_exchange(dir_fd, source, target)
    if result in (errno.EEXIST, errno.ENOTEMPTY) and flags == _RENAME_NOREPLACE:
        return False
    if result == errno.ENOENT and flags == _RENAME_EXCHANGE:
        return False
    if result:
        raise OSError(result, os.strerror(result), target)
    return True


def _fallback_rename_exchange(dir_fd: int, source: str, target: str) -> bool:
    """Where ``renameat2`` is missing, three renames: the old checkpoint aside, the new one in, the old to ``source``.

    A crash between the first two leaves ``.NAME.anydevice-old.<token>`` and no ``NAME``; the next
    save's :func:`remove_stale_temps` renames it back once this writer's lock is gone. False when a
    concurrent save moved ``target`` first or published into the gap (the caller tries again).
    """
    token = source.rsplit(".", 1)[1]
    old = temp_name(target, token, "old")
    try:
        os.rename(target, old, src_dir_fd=dir_fd, dst_dir_fd=dir_fd)
    except FileNotFoundError:
        return False
    try:
        os.rename(source, target, src_dir_fd=dir_fd, dst_dir_fd=dir_fd)
    except OSError as exc:
        if exc.errno not in (errno.ENOTEMPTY, errno.EEXIST):
            raise
        try:
            _remove(dir_fd, old)  # a concurrent save published a newer checkpoint into the gap: ours goes in next
        except FileNotFoundError:
            pass  # a concurrent save's cleanup deleted it first
        return False
    try:
        os.rename(old, source, src_dir_fd=dir_fd, dst_dir_fd=dir_fd)  # where the caller deletes the previous checkpoint
    except FileNotFoundError:
        pass  # a concurrent save's cleanup deleted it already (its pair, the temporary, was gone)
    return True


_libc_renameat2: Any = None


def _renameat2(dir_fd: int, source: str, target: str, flags: int) -> int | None:
    """The errno of ``renameat2`` (0 on success), or None where it is unavailable (no symbol, ENOSYS, EINVAL)."""
    global _libc_renameat2
    if _libc_renameat2 is None:
        function: Any
        try:
            function = ctypes.CDLL(None, use_errno=True).renameat2
        except (AttributeError, OSError):
            function = False
        else:
            function.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_int, ctypes.c_char_p, ctypes.c_uint]
            function.restype = ctypes.c_int
        _libc_renameat2 = function
    if _libc_renameat2 is False:
        return None
    if _libc_renameat2(dir_fd, os.fsencode(source), dir_fd, os.fsencode(target), flags) == 0:
        return 0
    code = ctypes.get_errno()
    return None if code in (errno.ENOSYS, errno.EINVAL, errno.EOPNOTSUPP) else code
