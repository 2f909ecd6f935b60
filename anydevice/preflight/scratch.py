"""The scratch working directory of ``anydevice check``'s child: the script's first steps never write the user's files.

The child runs with its working directory set to an empty scratch folder, so whatever the script (or C code in
it, such as ``torch.save``'s writer) writes under a relative path lands there. :class:`ScratchView` then makes the
user's files readable as if the script ran where the user is, and keeps writes out of the user's folders:

* a relative path opened for reading that the scratch folder lacks is read from the user's working directory
  (``open``, ``io.open``, ``os.open``, ``os.stat``/``lstat``/``access``/``listdir``/``scandir``: ``os.path.exists``,
  ``pathlib`` and ``numpy.memmap`` go through these); once the script has written a path, it reads its own copy;
* a path opened for writing inside the user's working directory or the script's folder (``os.path.dirname(__file__)``)
  goes to a mirror of it in scratch, its parent folders made there as needed; ``torch.save`` to such a path too;
* ``os.remove``, ``rename``, ``mkdir``, ``rmdir``, ``chmod`` ... (and so ``shutil.rmtree``, ``pathlib``) act on the
  script's own copy: removing a user's file or folder finds nothing to remove; ``os.open`` never returns a
  descriptor of a user's folder (``shutil.rmtree`` deletes through one).

Nothing is copied in, except a user's file the script opens to change in place (``"r+"``, ``"a"``, ``O_RDWR``
without ``O_TRUNC``: an ``mmap`` write), copied into scratch first (up to :data:`COPY_UP_LIMIT` bytes).

This is a convenience (a script that writes a log or a checkpoint at start-up runs on into scratch); the guarantee
is the kernel's (:mod:`anydevice.preflight.containment`): everything outside check's temporary folder is read-only
for the script and every process it starts. What would change a user's file is refused with the error a read-only
file system gives (``EROFS`` from here: removing, renaming, truncating by path, ``chmod`` of a user's file; ``EACCES``
or ``EROFS`` from the kernel: the shell, a subprocess, C code, ``shutil.rmtree`` through a folder's descriptor).
Each refusal is appended to :data:`REFUSED` in check's temporary folder with the user's line, and so is each
command the script runs (``os.system``, ``subprocess``: an audit hook), for check's report.
"""

from __future__ import annotations

import builtins
import errno
import io
import json
import os
import shutil
import stat
import sys
import sysconfig
from collections.abc import Callable
from pathlib import Path
from types import FrameType
from typing import Any

WRITE_FLAGS = os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_APPEND | os.O_TRUNC
CHANGING = ("remove", "unlink", "rmdir", "mkdir", "rename", "replace", "truncate", "chmod", "utime")
"""``os`` functions that change a path: each path argument is the script's own copy (a user's file is never touched)."""
REFUSED = "refused-writes.jsonl"
"""In check's temporary folder (the scratch folder's parent): one JSON object a line, ``{"op", "path", "line"}`` for each
write refused, ``{"op": "run", "command", "line"}`` for each command the script ran."""
REFUSED_ERRNOS = frozenset({errno.EACCES, errno.EPERM, errno.EROFS})
COPY_UP_LIMIT = 256 * 2**20
"""A user's file opened to change in place is copied into scratch up to this size; a larger one is refused."""
VERBS = {"remove": "remove", "unlink": "remove", "rmdir": "remove", "rename": "rename", "replace": "replace"}
VERBS |= {"truncate": "truncate", "chmod": "change the mode of", "utime": "change the times of", "mkdir": "make"}
RUNS_KEPT = 50
"""At most this many commands the script ran are noted."""


class ScratchView:
    """Maps the script's paths: reads fall through to the user's folders, writes go to ``scratch``."""

    def __init__(self, scratch: Path, user_cwd: Path, script_dir: Path) -> None:
        self.scratch = scratch.resolve()
        self.roots: list[tuple[str, str]] = [(str(user_cwd.resolve()), str(self.scratch))]
        script = str(script_dir.resolve())
        if not _under(script, self.roots[0][0]):
            self.roots.append((script, str(self.scratch.parent / "script-folder")))
        self._stat, self._lstat, self._scandir = os.stat, os.lstat, os.scandir  # the real ones, for the view's own look-ups
        self._opened: Callable[..., Any] = builtins.open
        self._removing: tuple[str, str | None] | None = None
        """The folder the last ``shutil.rmtree`` call removes (a refused file under it is named by the folder)."""
        self._runs = 0

    def _exists(self, path: str) -> bool:
        try:
            self._stat(path)
        except (OSError, ValueError):
            return False
        return True

    def counterparts(self, path: str) -> tuple[str, str] | None:
        """(the script's own copy in scratch, the user's file) for a path in the user's folders or scratch, else None."""
        absolute = os.path.abspath(path)  # relative paths resolve in the scratch working directory
        if _under(absolute, str(self.scratch.parent)) and not _under(absolute, str(self.scratch)):
            return None  # check's own temporary folder (TMPDIR, caches): used as it is
        if _under(absolute, str(self.scratch)):
            return absolute, os.path.join(self.roots[0][0], os.path.relpath(absolute, self.scratch))
        for root, mirror in self.roots:
            if _under(absolute, root):
                return os.path.join(mirror, os.path.relpath(absolute, root)), absolute
        return None

    def mapped(self, path: Any, writing: bool, in_place: bool = False) -> Any:
        """The path the script really uses for ``path``: its own copy in scratch when writing or once written, else the user's.

        ``in_place`` (a file opened to change, not replace): a user's file is copied into scratch first."""
        text = _text(path)
        pair = self.counterparts(text) if text is not None else None
        if pair is None:
            return path
        own, user = pair
        if writing:
            self._parents(own, user)
            original = self._regular(user) if in_place and not self._exists(own) else None
            if original is not None:
                if original.st_size > COPY_UP_LIMIT:
                    raise self.refuse("change", user)
                with self._opened(user, "rb") as original, self._opened(own, "wb") as copy:
                    shutil.copyfileobj(original, copy)
            return own
        return own if self._exists(own) or not self._exists(user) else user

    def user_only(self, path: Any) -> str | None:
        """The user's path when ``path`` names a user's file or folder the script has no copy of (changing it is refused)."""
        text = _text(path)
        pair = self.counterparts(text) if text is not None else None
        if pair is None or pair[0] == pair[1]:
            return None
        own, user = pair
        return user if not self._lexists(own) and self._lexists(user) else None

    def _regular(self, path: str) -> os.stat_result | None:
        try:
            found = self._stat(path)
        except (OSError, ValueError):
            return None
        return found if stat.S_ISREG(found.st_mode) else None

    def _lexists(self, path: str) -> bool:
        try:
            self._lstat(path)
        except (OSError, ValueError):
            return False
        return True

    def folders(self, path: Any) -> list[Any]:
        """The folders a listing of ``path`` merges: the script's own copy first, then the user's (those that exist)."""
        text = _text(path)
        pair = self.counterparts(text) if text is not None else None
        found = [f for f in dict.fromkeys(pair or ()) if self._exists(f)]
        return found or [path]  # neither exists (or not a path of ours): the real call gives the real answer

    def _parents(self, target: str, original: str) -> None:
        """Make ``target``'s parent folder in scratch when the user's copy of it exists (``out/ckpt.pt``)."""
        parent = os.path.dirname(target)
        if not self._exists(parent) and self._exists(os.path.dirname(original)):
            os.makedirs(parent, exist_ok=True)

    def install(self) -> None:
        """Wrap the file functions of ``builtins``, ``io``, ``os`` and ``torch.save`` in this process; note refusals."""
        opened = builtins.open
        os_open = os.open
        view = self

        def open_(file: Any, mode: str = "r", *args: Any, **kwargs: Any) -> Any:
            writing = any(c in mode for c in "wax+")
            target = view.mapped(file, writing, in_place=writing and "w" not in mode)
            try:
                return opened(target, mode, *args, **kwargs)
            except OSError as exc:
                if writing:
                    view.refused(exc, "write", file)
                raise

        def os_open_(path: Any, flags: int, *args: Any, **kwargs: Any) -> int:
            if kwargs.get("dir_fd") is not None:
                return os_open(path, flags, *args, **kwargs)  # relative to an open folder: not a path of ours
            writing = bool(flags & WRITE_FLAGS)
            target = view.mapped(path, writing, in_place=writing and not flags & os.O_TRUNC)
            try:
                return os_open(target, flags, *args, **kwargs)
            except OSError as exc:
                if writing:
                    view.refused(exc, "write", path)
                raise

        builtins_: Any = builtins  # the script's view of these modules is replaced for the observed run
        io_: Any = io
        os_: Any = os
        builtins_.open = io_.open = open_
        os_.open = os_open_
        for name in ("stat", "lstat", "access"):
            setattr(os, name, _reading(getattr(os, name), view))
        for name in CHANGING:  # remove, rename, mkdir ...: on the script's own copy in scratch, never on the user's
            setattr(os, name, _changing(getattr(os, name), view))
        listdir, scandir = os.listdir, os.scandir

        def listdir_(path: Any = ".") -> list[Any]:
            return list(dict.fromkeys(name for folder in view.folders(path) for name in listdir(folder)))

        def scandir_(path: Any = ".") -> _Entries:
            return _Entries([scandir(folder) for folder in view.folders(path)])

        os_.listdir, os_.scandir = listdir_, scandir_
        self._opened = opened
        sys.addaudithook(self._audit)  # the commands the script runs, and the folder an rmtree removes
        import torch

        save = torch.save

        def save_(obj: object, f: Any, *args: Any, **kwargs: Any) -> None:
            save(obj, view.mapped(f, True), *args, **kwargs)

        torch_: Any = torch
        torch_.save = save_

    def refused(self, exc: OSError, op: str, path: Any, through_folder: bool = False) -> None:
        """Note ``exc`` when it is a refused write (read-only, permission): ``op`` on ``path``, from the user's line.

        ``through_folder``: a call relative to an open folder; under a folder ``shutil.rmtree`` removes, the folder is named."""
        if exc.errno not in REFUSED_ERRNOS:
            return
        text = _text(path)
        where = os.path.abspath(text) if text is not None else str(exc.filename or path)
        if through_folder and self._removing is not None and _under(where, self._removing[0]):
            where, op = self._removing[0], "remove"
        pair = self.counterparts(where)
        self.note({"op": op, "path": pair[1] if pair else where, "line": self.user_line()})

    def refuse(self, op: str, path: str) -> OSError:
        """The error a read-only file system gives for ``op`` on the user's ``path``, noted."""
        exc = OSError(errno.EROFS, f"{os.strerror(errno.EROFS)} (anydevice check never changes your files)", path)
        self.refused(exc, op, path)
        return exc

    def note(self, record: dict[str, Any]) -> None:
        try:
            with self._opened(os.path.join(self.scratch.parent, REFUSED), "a") as log:
                log.write(json.dumps(record) + "\n")
        except OSError:
            pass  # check's own folder gone (check ended): nothing to tell

    def user_line(self) -> str | None:
        """``file:line`` of the innermost frame of the user's code (not the standard library, site-packages or anydevice)."""
        frame: FrameType | None = sys._getframe(1)
        while frame is not None:
            name = frame.f_code.co_filename
            if not name.startswith("<") and not any(_under(name, root) for root in _LIBRARIES):
                return f"{name}:{frame.f_lineno}"
            frame = frame.f_back  # None at the outermost frame ends the loop
        return None

    def _audit(self, event: str, args: tuple[Any, ...]) -> None:
        if event not in _AUDITED:
            return
        if event == "shutil.rmtree":
            text = _text(args[0])
            self._removing = (os.path.abspath(text), self.user_line()) if text is not None else None
            return
        if self._runs >= RUNS_KEPT:
            return
        self._runs += 1
        command = args[0] if event == "os.system" else args[1] if event == "subprocess.Popen" else args[:2]
        if isinstance(command, bytes):
            command = command.decode(errors="replace")
        elif not isinstance(command, str):
            try:
                command = " ".join(os.fsdecode(a) for a in command)
            except TypeError:
                command = repr(command)
        self.note({"op": "run", "command": command[:500], "line": self.user_line()})

    def written(self) -> list[str]:
        """The files the script wrote, as the paths it named (relative to its working directory, or absolute)."""
        found: list[str] = []
        for root, mirror in self.roots:
            for relative in self._files(mirror, ""):
                found.append(relative if mirror == str(self.scratch) else os.path.join(root, relative))
        return sorted(found)

    def _files(self, folder: str, prefix: str) -> list[str]:
        try:
            with self._scandir(folder) as entries:
                listed = list(entries)
        except OSError:
            return []
        found = []
        for entry in listed:
            name = os.path.join(prefix, entry.name)
            found += self._files(entry.path, name) if entry.is_dir(follow_symlinks=False) else [name]
        return found


def _changing(function: Callable[..., Any], view: ScratchView) -> Callable[..., Any]:
    name = function.__name__
    verb = VERBS.get(name, "change")

    def wrapped(*args: Any, **kwargs: Any) -> Any:
        fds = [kwargs.get(k) for k in ("dir_fd", "src_dir_fd", "dst_dir_fd")]
        if any(fd is not None for fd in fds):  # relative to an open folder (shutil.rmtree): the kernel guards it
            try:
                return function(*args, **kwargs)
            except OSError as exc:
                folder = next(fd for fd in fds if fd is not None)
                view.refused(exc, verb, _in_folder(folder, args[0]) if args else None, through_folder=True)
                raise
        if args and name != "mkdir":
            user = view.user_only(args[0])
            if user is not None:  # removing, renaming, truncating a user's file: refused as a read-only file system would
                raise view.refuse(verb, user)
        paths = 2 if name in ("rename", "replace") else 1
        mapped = [view.mapped(a, True) if i < paths else a for i, a in enumerate(args)]
        try:
            return function(*mapped, **kwargs)
        except OSError as exc:
            view.refused(exc, verb, args[0] if args else None)
            raise

    wrapped.__name__ = function.__name__
    wrapped.__doc__ = function.__doc__
    return wrapped


def _in_folder(folder: int, name: Any) -> str | None:
    """The path of ``name`` in the folder open as descriptor ``folder``."""
    try:
        return os.path.join(os.readlink(f"/proc/self/fd/{folder}"), os.fsdecode(name))
    except (OSError, TypeError):
        return None


class _Entries:
    """``os.scandir`` over several folders: each name once, the first folder's entry winning."""

    def __init__(self, scans: list[Any]) -> None:
        self.scans = scans
        self.seen: set[str] = set()
        self.entries = (entry for scan in scans for entry in scan)

    def __iter__(self) -> _Entries:
        return self

    def __next__(self) -> os.DirEntry[Any]:
        while True:
            entry: os.DirEntry[Any] = next(self.entries)
            if entry.name not in self.seen:
                self.seen.add(entry.name)
                return entry

    def __enter__(self) -> _Entries:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        for scan in self.scans:
            scan.close()


def _reading(function: Callable[..., Any], view: ScratchView) -> Callable[..., Any]:
    def wrapped(path: Any = ".", *args: Any, **kwargs: Any) -> Any:
        if kwargs.get("dir_fd") is not None:
            return function(path, *args, **kwargs)  # relative to an open folder: not a path of ours
        return function(view.mapped(path, False), *args, **kwargs)

    wrapped.__name__ = function.__name__
    wrapped.__doc__ = function.__doc__
    return wrapped


def _text(path: Any) -> str | None:
    """``path`` as a non-empty ``str``, or None (a file descriptor, bytes, or not a path)."""
    if isinstance(path, int) or not isinstance(path, (str, os.PathLike)):
        return None
    text = os.fspath(path)
    return text if isinstance(text, str) and text else None


_AUDITED = frozenset({"os.system", "subprocess.Popen", "os.posix_spawn", "os.exec", "os.spawn", "shutil.rmtree"})
_LIBRARIES = tuple(
    dict.fromkeys(
        p
        for p in (
            *(sysconfig.get_paths().get(k) for k in ("stdlib", "platstdlib", "purelib", "platlib")),
            os.path.dirname(os.path.dirname(os.path.abspath(__file__))),  # anydevice itself
        )
        if p
    )
)
"""Where code that is not the user's lives: a refusal is named by the innermost frame outside them."""


def _under(path: str, root: str) -> bool:
    return path == root or path.startswith(root.rstrip(os.sep) + os.sep)
