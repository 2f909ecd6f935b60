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

Nothing is copied in. Not covered: C code other than ``torch.save`` that writes an absolute path in those folders.
"""

from __future__ import annotations

import builtins
import io
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

WRITE_FLAGS = os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_APPEND | os.O_TRUNC
CHANGING = ("remove", "unlink", "rmdir", "mkdir", "rename", "replace", "truncate", "chmod", "utime")
"""``os`` functions that change a path: each path argument is the script's own copy (a user's file is never touched)."""


class ScratchView:
    """Maps the script's paths: reads fall through to the user's folders, writes go to ``scratch``."""

    def __init__(self, scratch: Path, user_cwd: Path, script_dir: Path) -> None:
        self.scratch = scratch.resolve()
        self.roots: list[tuple[str, str]] = [(str(user_cwd.resolve()), str(self.scratch))]
        script = str(script_dir.resolve())
        if not _under(script, self.roots[0][0]):
            self.roots.append((script, str(self.scratch.parent / "script-folder")))
        self._stat, self._scandir = os.stat, os.scandir  # the real ones, for the view's own look-ups

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

    def mapped(self, path: Any, writing: bool) -> Any:
        """The path the script really uses for ``path``: its own copy in scratch when writing or once written, else the user's."""
        text = _text(path)
        pair = self.counterparts(text) if text is not None else None
        if pair is None:
            return path
        own, user = pair
        if writing:
            self._parents(own, user)
            return own
        return own if self._exists(own) or not self._exists(user) else user

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
        """Wrap the file functions of ``builtins``, ``io``, ``os`` and ``torch.save`` in this process."""
        opened = builtins.open
        os_open = os.open
        view = self

        def open_(file: Any, mode: str = "r", *args: Any, **kwargs: Any) -> Any:
            return opened(view.mapped(file, any(c in mode for c in "wax+")), mode, *args, **kwargs)

        def os_open_(path: Any, flags: int, *args: Any, **kwargs: Any) -> int:
            if kwargs.get("dir_fd") is not None:
                return os_open(path, flags, *args, **kwargs)  # relative to an open folder: not a path of ours
            target = view.mapped(path, bool(flags & WRITE_FLAGS))
            if os.path.isdir(target) and _text(target) != _text(path):
                target = path  # never a descriptor of the user's folder: shutil.rmtree deletes through one (dir_fd)
            return os_open(target, flags, *args, **kwargs)

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
        import torch

        save = torch.save

        def save_(obj: object, f: Any, *args: Any, **kwargs: Any) -> None:
            save(obj, view.mapped(f, True), *args, **kwargs)

        torch_: Any = torch
        torch_.save = save_

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
    def wrapped(*args: Any, **kwargs: Any) -> Any:
        if any(kwargs.get(k) is not None for k in ("dir_fd", "src_dir_fd", "dst_dir_fd")):
            return function(*args, **kwargs)  # relative to an open folder (never one of the user's: see os.open)
        paths = 2 if function.__name__ in ("rename", "replace") else 1
        mapped = [view.mapped(a, True) if i < paths else a for i, a in enumerate(args)]
        return function(*mapped, **kwargs)

    wrapped.__name__ = function.__name__
    wrapped.__doc__ = function.__doc__
    return wrapped


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


def _under(path: str, root: str) -> bool:
    return path == root or path.startswith(root.rstrip(os.sep) + os.sep)
