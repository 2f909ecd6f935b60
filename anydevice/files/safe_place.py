"""Where a save writes: a directory opened component by component, and a name in it.

Paths are walked with ``openat``-style calls (``dir_fd``, ``O_NOFOLLOW``), never resolved with
``realpath`` first. A symbolic link is followed only when it can be trusted: outside a directory
other users can write to (sticky or world-writable, ``/tmp``-like, or another user's directory
below one), or owned by this user (or, in a sticky directory, by the directory's owner: the
kernel's ``protected_symlinks`` rule). Any
other link is refused with :class:`~anydevice.errors.CheckpointError`, so a link planted by
another user never makes a save write, replace or delete what it points to.

:func:`os_cause` and :func:`save_error` turn an ``OSError`` into words naming the file and the
cause (no space, permission, read-only filesystem...), the shape every checkpoint error has.
"""

from __future__ import annotations

import errno
import os
import stat
from pathlib import Path
from types import TracebackType

from anydevice.errors import CheckpointError

_MAX_LINKS = 40  # as the kernel's ELOOP limit

_CAUSES = {
    errno.ENOSPC: "no space left on the device",
    errno.EDQUOT: "no space left: the disk quota is exceeded",
    errno.EACCES: "permission denied",
    errno.EPERM: "permission denied (operation not permitted)",
    errno.EROFS: "the filesystem is read-only",
    errno.EFBIG: "the file is too large for this filesystem or for the process's file-size limit",
    errno.ENOTDIR: "a part of the path is not a directory",
    errno.EISDIR: "it is a directory",
    errno.ENAMETOOLONG: "the name is too long",
    errno.ELOOP: "too many levels of symbolic links",
    errno.EIO: "an input/output error (a failing disk or a lost network filesystem)",
}


_KINDS = (
    (stat.S_ISDIR, "a directory"),
    (stat.S_ISLNK, "a symbolic link"),
    (stat.S_ISFIFO, "a FIFO (named pipe)"),
    (stat.S_ISSOCK, "a socket"),
    (stat.S_ISCHR, "a character device"),
    (stat.S_ISBLK, "a block device"),
)


def kind(st: os.stat_result) -> str:
    """What a file is, in words: ``a FIFO (named pipe)``, ``a regular file``."""
    return next((name for test, name in _KINDS if test(st.st_mode)), "a regular file")


def kind_at(path: str | os.PathLike[str], st: os.stat_result) -> str:
    """:func:`kind` of ``st`` (``path``'s stat, links followed), saying which link led there when ``path`` is one:
    ``a symbolic link to /dev/zero, a character device``."""
    try:
        target = os.readlink(path)
    except OSError:  # not a link
        return kind(st)
    shown = "".join(c if c.isprintable() else ascii(c)[1:-1] for c in target[:200])  # a link's target is anyone's text
    return f"a symbolic link to {shown}{'...' if len(target) > 200 else ''}, {kind(st)}"


def os_cause(exc: OSError) -> str:
    """The cause of ``exc`` in words (``no space left on the device``), and the file it names when it names one."""
    cause = _CAUSES.get(exc.errno or 0) or (exc.strerror or str(exc) or type(exc).__name__)
    return f"{cause} ({exc.filename})" if exc.filename else cause


def save_error(path: Path | str, exc: OSError, *, needed: int | None = None, free: int | None = None) -> CheckpointError:
    """A :class:`CheckpointError` saying that saving ``path`` failed, and why; ``needed`` and ``free`` (bytes) say how
    much the file needs and how much the filesystem had, where a full disk or a size limit is why."""
    hints = {
        errno.ENOSPC: "Free space on that filesystem, or save somewhere else; the previous checkpoint was kept.",
        errno.EDQUOT: "Free space within your quota, or save somewhere else; the previous checkpoint was kept.",
        errno.EACCES: "Save to a directory you can write to, or fix its permissions.",
        errno.EPERM: "Save to a directory you can write to, or fix its permissions.",
        errno.EROFS: "Save to a writable filesystem.",
    }
    sizes = [f"{needed:,} bytes needed"] if needed is not None else []
    sizes += [f"{free:,} free there"] if free is not None else []
    cause = os_cause(exc) + (f" ({', '.join(sizes)})" if sizes else "")
    return CheckpointError(f"Cannot save {path}: {cause}.", hints.get(exc.errno or 0))


class Place:
    """An open directory (``fd``) and the ``name`` a save writes in it; ``path`` is what messages show."""

    def __init__(self, fd: int, directory: Path, name: str, path: Path) -> None:
        self.fd = fd
        self.directory = directory
        self.name = name
        self.path = path

    def lstat(self, name: str | None = None) -> os.stat_result | None:
        """``lstat`` of ``name`` (default: the target) in the directory; None when nothing is there."""
        try:
            return os.stat(name or self.name, dir_fd=self.fd, follow_symlinks=False)
        except FileNotFoundError:
            return None

    def shared(self) -> bool:
        """True when other users can create names in the directory (sticky or world-writable)."""
        return is_shared(os.fstat(self.fd))

    def close(self) -> None:
        os.close(self.fd)

    def __enter__(self) -> Place:
        return self

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None) -> None:
        self.close()


def is_shared(st: os.stat_result) -> bool:
    """Whether a directory with this ``stat`` lets other users create names in it (sticky or world-writable)."""
    return bool(st.st_mode & (stat.S_ISVTX | stat.S_IWOTH))


def _exposed(directory: os.stat_result, below_shared: bool) -> bool:
    """Whether another user may have put names in ``directory``: it is shared, or it is someone else's below a shared one."""
    return is_shared(directory) or (below_shared and directory.st_uid not in (os.geteuid(), 0))


def _trusted(directory: os.stat_result, link: os.stat_result, below_shared: bool) -> bool:
    """Whether a symlink with ``link``'s owner may be followed in a directory with ``directory``'s mode and owner."""
    if not _exposed(directory, below_shared):
        return True
    sticky_owner = bool(directory.st_mode & stat.S_ISVTX) and link.st_uid == directory.st_uid
    return link.st_uid == os.geteuid() or sticky_owner


def _refuse_link(shown: Path, where: Path, link: os.stat_result) -> CheckpointError:
    return CheckpointError(
        f"Refusing to save through {shown}: it is a symbolic link owned by another user (uid {link.st_uid}) in "
        f"{where}, a directory other users can write to; following it could overwrite or delete their target.",
        "Save to a path in a directory you own, or remove the link if you trust neither it nor its owner.",
    )


def open_place(path: Path, *, make_parents: bool = True, shown: Path | None = None) -> Place:
    """Open the directory that will hold ``path`` and return it with the final name.

    Missing directories are created when ``make_parents``. A final component that is a trusted
    symlink is followed (saving through it updates its target, the link stays); an untrusted one,
    anywhere in the path, raises :class:`CheckpointError`. OS errors are raised as they are.
    """
    shown = shown or path
    for _ in range(_MAX_LINKS):
        place, below_shared = _open_parent(path, make_parents, shown)
        st = place.lstat()
        if st is None or not stat.S_ISLNK(st.st_mode):
            return place
        try:
            if not _trusted(os.fstat(place.fd), st, below_shared):
                raise _refuse_link(shown, place.directory, st)
            target = os.readlink(place.name, dir_fd=place.fd)
        finally:
            place.close()
        path = place.directory / target
    raise CheckpointError(f"Cannot save {shown}: {_CAUSES[errno.ELOOP]}.")


def open_parent(path: Path, *, make_parents: bool = True, shown: Path | None = None) -> Place:
    """Open the directory that will hold ``path`` as :func:`open_place` does, never following the final name.

    For files anydevice replaces rather than updates (:mod:`anydevice.files.safe_files`): a link in the
    final name is the caller's to judge, not a path to walk.
    """
    return _open_parent(path, make_parents, shown or path)[0]


def _open_parent(path: Path, make_parents: bool, shown: Path) -> tuple[Place, bool]:
    absolute = Path(os.path.abspath(path))
    if absolute.name in ("", ".", ".."):
        raise CheckpointError(f"Cannot save {shown}: the path names no file.", "Give a path ending in a file name.")
    fd, below_shared = _open_directory(absolute.parent, make_parents, shown)
    return Place(fd, absolute.parent, absolute.name, shown), below_shared


def _open_directory(directory: Path, make: bool, shown: Path) -> tuple[int, bool]:
    """An ``O_DIRECTORY`` descriptor for ``directory``, walked one component at a time from ``/``.

    Also says whether the walk passed through a shared directory: below one, a directory owned by
    another user (made there by them) is treated as shared too.
    """
    flags = os.O_RDONLY | os.O_DIRECTORY | getattr(os, "O_CLOEXEC", 0)
    fd = os.open(directory.anchor or "/", flags)
    where = Path(directory.anchor or "/")
    below_shared = False
    try:
        for part in directory.parts[1:]:
            here = os.fstat(fd)
            try:
                st = os.stat(part, dir_fd=fd, follow_symlinks=False)
            except FileNotFoundError:
                if not make:
                    raise
                try:
                    os.mkdir(part, 0o777, dir_fd=fd)
                except FileExistsError:
                    pass  # created by a concurrent saver
                st = os.stat(part, dir_fd=fd, follow_symlinks=False)
            link = stat.S_ISLNK(st.st_mode)
            if link and not _trusted(here, st, below_shared):
                raise _refuse_link(shown, where, st)
            below_shared = below_shared or _exposed(here, below_shared)
            if not link and not stat.S_ISDIR(st.st_mode):
                raise NotADirectoryError(errno.ENOTDIR, os.strerror(errno.ENOTDIR), str(where / part))
            nofollow = 0 if link else getattr(os, "O_NOFOLLOW", 0)
            following = os.open(part, flags | nofollow, dir_fd=fd)
            os.close(fd)
            fd, where = following, where / part
    except BaseException:
        os.close(fd)
        raise
    return fd, below_shared or _exposed(os.fstat(fd), below_shared)
