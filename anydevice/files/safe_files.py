"""Every file anydevice writes or reads outside a checkpoint: the page, result files, lane records, reports, caches.

Writing (:func:`write_bytes`, :func:`write_json`): the directory is walked as a checkpoint save
walks it (:func:`anydevice.files.safe_place.open_parent`: a link another user planted in a shared
directory is refused), the data goes into a new temporary beside the target
(``O_CREAT|O_EXCL|O_NOFOLLOW``, a random name, locked: :func:`anydevice.files.publish.locked_temp_file`),
is fsynced and renamed over the target (``renameat2(RENAME_NOREPLACE)`` when nothing is there).
What is there already is replaced only when anydevice wrote it (the caller's ``ours`` test on
its contents), unless ``force``: a link, a FIFO, another user's file or a hand-written file is
refused, and the link is never followed. A forced write replaces the name itself, never what a
link points to; a directory is never replaced.

Reading (:func:`read_bytes`): a regular file only (checked before it is opened, so a FIFO never
hangs and ``/dev/zero`` is never read), at most ``limit`` bytes, a link only where one is
expected, and in a directory other users can write to (sticky or world-writable) a file owned by
this user, root, or (sticky) the directory's owner. ``owners`` makes the owner check apply
everywhere (caches).

Every refusal or failure is a :class:`~anydevice.errors.FileAccessError` naming the file and why.
"""

from __future__ import annotations

import json
import os
import stat
from collections.abc import Callable, Collection
from pathlib import Path
from typing import Any

from anydevice.errors import CheckpointError, FileAccessError
from anydevice.files.publish import fsync_directory, locked_temp_file, remove_stale_temps, rename_noreplace, unlink_quietly
from anydevice.files.safe_place import Place, is_shared, kind, kind_at, open_parent, os_cause

Recognise = Callable[[bytes], bool]
"""Whether the contents of a file already at the target are something anydevice wrote (and may replace)."""

RECOGNISE_LIMIT = 64 << 20
"""At most this much of an existing target is read to recognise it."""

_CLOEXEC = getattr(os, "O_CLOEXEC", 0)
_NOFOLLOW = getattr(os, "O_NOFOLLOW", 0)
_NONBLOCK = getattr(os, "O_NONBLOCK", 0)
# -- writing ----------------------------------------------------------------------------------------


def write_bytes(
    path: str | os.PathLike[str], data: bytes, *, ours: Recognise | None = None, force: bool = False, force_hint: str = ""
) -> None:
    """Write ``data`` to ``path`` in one atomic step (see the module doc); missing directories are created.

    :param ours: recognises an earlier file of the same kind; None: nothing already there is replaced unless ``force``.
    :param force: replace whatever is there (the name, never a link's target), except a directory.
    :param force_hint: how the user asks for ``force`` (``pass --force``), for the refusal's hint.
    :raises FileAccessError: refused or failed, naming the file and the cause.
    """
    shown = Path(path)
    with _open_parent(shown, make_parents=True) as place:
        remove_stale_temps(place)
        try:
            fd, temporary = locked_temp_file(place)
        except OSError as exc:
            raise FileAccessError("write", shown, os_cause(exc)) from None
        try:
            with os.fdopen(os.dup(fd), "wb") as handle:
                handle.write(data)
                handle.flush()
                os.fsync(handle.fileno())
            _publish(place, temporary, ours, force, force_hint)
        except OSError as exc:
            raise FileAccessError("write", shown, os_cause(exc)) from None
        finally:
            unlink_quietly(place.fd, temporary)  # gone once published
            os.close(fd)
        fsync_directory(place.fd)


def write_json(
    path: str | os.PathLike[str],
    data: Any,
    *,
    ours_keys: Collection[str],
    force: bool = False,
    indent: int | None = 2,
    sort_keys: bool = False,
) -> None:
    """Write ``data`` as JSON and a newline (:func:`write_bytes`); an existing file is replaced only when it is a JSON
    object with every key of ``ours_keys`` (an earlier file of the same kind), or with ``force``.

    The cuda-compat report writes its ``{"device", "calls"}`` file with ``ours_keys=("device", "calls")``.
    """
    text = json.dumps(data, indent=indent, sort_keys=sort_keys) + "\n"
    write_bytes(path, text.encode("utf-8"), ours=json_with(ours_keys), force=force)


def json_with(keys: Collection[str]) -> Recognise:
    """A :data:`Recognise` for a JSON object that has every one of ``keys``."""

    def recognise(content: bytes) -> bool:
        try:
            data = json.loads(content)
        except (ValueError, RecursionError):
            return False
        return isinstance(data, dict) and all(k in data for k in keys)

    return recognise


def check_replaceable(
    path: str | os.PathLike[str], *, ours: Recognise | None = None, force: bool = False, force_hint: str = ""
) -> None:
    """Raise the :class:`FileAccessError` that :func:`write_bytes` would raise for what is at ``path`` now, before the
    work that makes the data (nothing there, or a missing directory, passes)."""
    shown = Path(path)
    try:
        place = _open_parent(shown, make_parents=False)
    except FileNotFoundError:
        return
    with place:
        existing = place.lstat()
        if existing is not None:
            _check_replaceable(place, existing, ours, force, force_hint)


def _open_parent(shown: Path, *, make_parents: bool) -> Place:
    """:func:`open_parent`, its refusals and failures as :class:`FileAccessError` (a missing directory raised as it is)."""
    try:
        return open_parent(shown, make_parents=make_parents)
    except CheckpointError as exc:  # a planted link in the path: the same words as a save's
        raise FileAccessError("write", shown, exc.message.split(": ", 1)[-1].rstrip("."), exc.hint) from None
    except FileNotFoundError:
        if make_parents:
            raise FileAccessError("write", shown, "a directory on its path vanished while it was being made") from None
        raise
    except OSError as exc:
        raise FileAccessError("write", shown, os_cause(exc)) from None


def _publish(place: Place, temporary: str, ours: Recognise | None, force: bool, force_hint: str) -> None:
    """Rename ``temporary`` over the target once what is there (if anything) may be replaced."""
    for _ in range(5):
        existing = place.lstat()
        if existing is None:
            if rename_noreplace(place.fd, temporary, place.name):
                return
            continue  # a file appeared meanwhile: judge it too
        _check_replaceable(place, existing, ours, force, force_hint)
        os.rename(temporary, place.name, src_dir_fd=place.fd, dst_dir_fd=place.fd)
        return
    raise FileAccessError("write", place.path, "other files kept appearing at that name; it was left as it was")


def _check_replaceable(place: Place, st: os.stat_result, ours: Recognise | None, force: bool, force_hint: str) -> None:
    what = kind(st)
    fix = f"Move it away, or {force_hint} to replace it" if force_hint else "Move it away, or write to another path"
    if stat.S_ISDIR(st.st_mode):
        raise FileAccessError("write", place.path, "it is a directory; it was left as it was", "Give a file path.")
    if force:
        return
    if not stat.S_ISREG(st.st_mode):
        target = f" to {os.readlink(place.name, dir_fd=place.fd)}" if stat.S_ISLNK(st.st_mode) else ""
        raise FileAccessError(
            "write",
            place.path,
            f"it is {what}{target}, which anydevice did not make and never writes through; it was left as it was",
            fix + (" (the link itself, not what it points to)." if target else "."),
        )
    if st.st_uid != os.geteuid() and place.shared():
        raise FileAccessError(
            "write", place.path, f"it belongs to another user (uid {st.st_uid}) in a directory others can write to", fix + "."
        )
    try:
        content = _read_regular(place.fd, place.name, RECOGNISE_LIMIT, follow=False)
    except FileAccessError:
        content = None
    if content is None or ours is None or not ours(content):
        raise FileAccessError(
            "write", place.path, "a file anydevice did not write is there (a hand-written one?); it was left as it was", fix + "."
        )


# -- judging a path before it is opened ---------------------------------------------------------------


def existing_regular(path: str | os.PathLike[str], action: str) -> os.stat_result | None:
    """What is at ``path`` (links followed) when it is a regular file, None when nothing is there.

    Anything else (a FIFO, ``/dev/stdout`` on a pipe, a socket, a device, a directory) raises
    :class:`FileAccessError` naming it, judged before any open: opening a FIFO blocks until a writer
    comes, and a device may act or never end.
    """
    try:
        st = os.stat(path)
    except (FileNotFoundError, NotADirectoryError):
        return None
    except OSError as exc:
        raise FileAccessError(action, Path(path), os_cause(exc)) from None
    if not stat.S_ISREG(st.st_mode):
        raise FileAccessError(action, Path(path), f"it is {kind_at(path, st)}, not a regular file; it was left as it was")
    return st


def read_head(path: str | os.PathLike[str], size: int, action: str) -> bytes:
    """The first ``size`` bytes of the regular file ``path`` (b"" when nothing is there), type judged before opening."""
    st = existing_regular(path, action)
    if st is None:
        return b""
    try:
        fd = os.open(path, os.O_RDONLY | _CLOEXEC | _NONBLOCK)
    except OSError as exc:
        raise FileAccessError(action, Path(path), os_cause(exc)) from None
    try:
        opened = os.fstat(fd)
        if (opened.st_dev, opened.st_ino) != (st.st_dev, st.st_ino):
            raise FileAccessError(action, Path(path), "it was replaced while being opened")
        return os.read(fd, size)
    except OSError as exc:
        raise FileAccessError(action, Path(path), os_cause(exc)) from None
    finally:
        os.close(fd)


# -- reading ----------------------------------------------------------------------------------------


def read_bytes(
    path: str | os.PathLike[str], *, limit: int, follow_links: bool = True, owners: Collection[int] | None = None
) -> bytes:
    """The contents of the regular file ``path``, at most ``limit`` bytes (see the module doc).

    :param follow_links: False where a link is not expected (a cache entry): a link is then refused.
    :param owners: uids the file must belong to wherever it lies (default: checked only in a shared directory).
    :raises FileAccessError: refused or unreadable (``FileNotFoundError`` is raised as it is), naming the file.
    """
    shown = Path(path)
    absolute = Path(os.path.abspath(path))
    try:
        dir_fd = os.open(absolute.parent, os.O_RDONLY | os.O_DIRECTORY | _CLOEXEC)
    except FileNotFoundError:
        raise
    except OSError as exc:
        raise FileAccessError("read", shown, os_cause(exc)) from None
    try:
        return _read_regular(dir_fd, absolute.name, limit, follow=follow_links, owners=owners, shown=shown)
    finally:
        os.close(dir_fd)


def _read_regular(
    dir_fd: int, name: str, limit: int, *, follow: bool, owners: Collection[int] | None = None, shown: Path | None = None
) -> bytes:
    shown = shown or Path(name)
    try:
        st = os.stat(name, dir_fd=dir_fd, follow_symlinks=follow)
        if not stat.S_ISREG(st.st_mode):  # judged before opening: opening a FIFO can block, a device can act
            raise FileAccessError("read", shown, f"it is {kind(st)}, not a regular file")
        directory = os.fstat(dir_fd)
        _check_owner(shown, st, directory, owners)
        fd = os.open(name, os.O_RDONLY | _CLOEXEC | _NONBLOCK | (0 if follow else _NOFOLLOW), dir_fd=dir_fd)
    except FileNotFoundError:
        raise
    except OSError as exc:
        raise FileAccessError("read", shown, os_cause(exc)) from None
    try:
        opened = os.fstat(fd)
        if (opened.st_dev, opened.st_ino) != (st.st_dev, st.st_ino):
            raise FileAccessError("read", shown, "it was replaced while being opened")
        if opened.st_size > limit:
            raise FileAccessError("read", shown, f"it is {opened.st_size} bytes, more than the {limit} bytes allowed")
        chunks, size = [], 0
        while size <= limit:
            chunk = os.read(fd, min(1 << 20, limit + 1 - size))
            if not chunk:
                break
            chunks.append(chunk)
            size += len(chunk)
    except OSError as exc:
        raise FileAccessError("read", shown, os_cause(exc)) from None
    finally:
        os.close(fd)
    if size > limit:
        raise FileAccessError("read", shown, f"it grew past the {limit} bytes allowed while being read")
    return b"".join(chunks)


def _check_owner(shown: Path, st: os.stat_result, directory: os.stat_result, owners: Collection[int] | None) -> None:
    me = os.geteuid()
    if owners is not None:
        trusted = set(owners)
    elif is_shared(directory):
        trusted = {me, 0} | ({directory.st_uid} if directory.st_mode & stat.S_ISVTX else set())
    else:
        return
    if st.st_uid not in trusted:
        where = "" if owners is not None else " in a directory other users can write to"
        raise FileAccessError(
            "read",
            shown,
            f"it belongs to another user (uid {st.st_uid}){where}, so it may not be what anydevice or you wrote",
            "If you trust it, copy it into a directory of your own and use the copy.",
        )
