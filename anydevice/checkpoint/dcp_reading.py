"""Reading a sharded (DCP) checkpoint without running code from it: what ``ad.checkpoint.load`` adds to torch.

torch's ``FileSystemReader`` reads a checkpoint's ``.metadata`` with a plain ``pickle.load`` and
its ``DefaultLoadPlanner`` reads every non-tensor value (a step count, an optimizer's hyperparameters)
with ``torch.load(weights_only=False)``: a crafted checkpoint runs code on load. Here:

- ``.metadata`` goes through :class:`MetadataUnpickler`, which imports only the classes DCP's
  metadata is made of: the dataclasses and enums of ``torch.distributed.checkpoint.metadata`` and
  of ``torch.distributed.checkpoint.filesystem`` (whatever the running torch defines there, so the
  list follows torch 2.9 to 2.15), ``torch.Size``, torch dtypes and layouts, and ``pathlib`` paths;
  anything else is refused with the class named;
- non-tensor values are read with ``torch.load(weights_only=True)``, as tensors already are;
- every file (``.metadata`` and each shard) is opened only when it is a regular file
  (:class:`RegularFiles`): a FIFO among the shards would block the load forever, a link to a
  device (``/dev/zero``) would never end; they are refused by name, unread.

Imports torch: import this module only when loading a checkpoint.
"""

from __future__ import annotations

import collections
import contextlib
import dataclasses
import enum
import fcntl
import io
import os
import pathlib
import pickle
import stat
from collections.abc import Iterator
from functools import cache
from typing import IO, Any, cast

import torch
from torch.distributed.checkpoint import filesystem, metadata
from torch.distributed.checkpoint._traverse import set_element
from torch.distributed.checkpoint.default_planner import DefaultLoadPlanner
from torch.distributed.checkpoint.filesystem import FileSystem, FileSystemReader
from torch.distributed.checkpoint.planner import ReadItem

from anydevice.errors import CheckpointError
from anydevice.files.safe_place import kind

_NEVER = "never load a checkpoint you do not trust with a loader that runs code (plain torch.distributed.checkpoint.load)"


@cache
def allowed_classes() -> dict[tuple[str, str], Any]:
    """``(module, name) -> object`` for every global a DCP ``.metadata`` written by this torch may name."""
    allowed: dict[tuple[str, str], Any] = {}
    for module in (metadata, filesystem):
        for name, value in vars(module).items():
            ours = isinstance(value, type) and value.__module__ == module.__name__
            if ours and (dataclasses.is_dataclass(value) or issubclass(value, enum.Enum)):
                allowed[(module.__name__, name)] = value
    allowed[("torch", "Size")] = torch.Size
    for name, value in vars(torch).items():
        if isinstance(value, (torch.dtype, torch.layout)):
            allowed[("torch", name)] = value
    allowed[("torch.serialization", "_get_layout")] = torch.serialization._get_layout  # name -> torch.layout
    for path_class in (pathlib.PurePosixPath, pathlib.PureWindowsPath, pathlib.PosixPath, pathlib.WindowsPath):
        allowed[(path_class.__module__, path_class.__name__)] = path_class
    allowed[("collections", "OrderedDict")] = collections.OrderedDict
    return allowed


class MetadataUnpickler(pickle.Unpickler):
    """A ``pickle.Unpickler`` that imports only :func:`allowed_classes`; ``where`` names the file in errors."""

    def __init__(self, handle: IO[bytes], where: str) -> None:
        super().__init__(handle)
        self.where = where

    def find_class(self, module: str, name: str) -> Any:
        found = allowed_classes().get((module, name))
        if found is None:
            raise CheckpointError(
                f"Checkpoint metadata {self.where} was refused: it names {module}.{name}, which is not one of "
                "DCP's metadata classes (loading it could run code from the file).",
                f"Load only checkpoints written by ad.checkpoint.save or torch.distributed.checkpoint.save; {_NEVER}.",
            )
        return found


def read_metadata_file(handle: IO[bytes], where: str) -> metadata.Metadata:
    """The :class:`~torch.distributed.checkpoint.metadata.Metadata` in ``handle``, read with :class:`MetadataUnpickler`."""
    try:
        result = MetadataUnpickler(handle, where).load()
    except CheckpointError:
        raise
    except Exception as exc:  # truncated or garbage pickle
        raise CheckpointError(
            f"Checkpoint metadata {where} is corrupt or truncated ({type(exc).__name__}: {exc}).",
            "Load an older checkpoint, or save it again.",
        ) from None
    if not isinstance(result, metadata.Metadata):
        raise CheckpointError(
            f"Checkpoint metadata {where} holds a {type(result).__name__}, not DCP metadata.",
            "Load a directory that ad.checkpoint.save wrote.",
        )
    return result


def not_regular(path: pathlib.Path, st: os.stat_result) -> CheckpointError:
    """The refusal of checkpoint file ``path``, which is not a regular file (``st``: what it is)."""
    return CheckpointError(
        f"Checkpoint file {path} is {kind(st)}, not a regular file; it was refused unread (reading it could block or never end).",
        "A checkpoint's files are the regular files ad.checkpoint.save wrote: replace this one, or load another checkpoint.",
    )


def open_regular(path: pathlib.Path) -> IO[bytes]:
    """``path`` opened for reading, when it is a regular file (links followed); else :func:`not_regular` is raised.

    Judged by ``stat`` before the open, and again by ``fstat`` after an open that never blocks (a file
    swapped for a FIFO in between is refused too).
    """
    try:
        before = os.stat(path)
    except OSError:
        before = None  # missing or unreadable: the open below says so, as torch's own open would
    if before is not None and not stat.S_ISREG(before.st_mode):
        raise not_regular(path, before)
    fd = os.open(path, os.O_RDONLY | getattr(os, "O_CLOEXEC", 0) | getattr(os, "O_NONBLOCK", 0))
    try:
        opened = os.fstat(fd)
        if not stat.S_ISREG(opened.st_mode):
            raise not_regular(path, opened)
        fcntl.fcntl(fd, fcntl.F_SETFL, fcntl.fcntl(fd, fcntl.F_GETFL) & ~getattr(os, "O_NONBLOCK", 0))
        return os.fdopen(fd, "rb")
    except BaseException:
        os.close(fd)
        raise


class RegularFiles(FileSystem):
    """torch's local ``FileSystem``, reading only regular files (:func:`open_regular`); a refusal is kept on ``reader``."""

    def __init__(self, reader: SafeReader) -> None:
        super().__init__()
        self.reader = reader

    @contextlib.contextmanager
    def create_stream(self, path: str | os.PathLike[str], mode: str) -> Iterator[io.IOBase]:
        if mode not in ("r", "rb"):  # the reader only reads; anything else as torch does it
            with super().create_stream(path, mode) as stream:
                yield stream
            return
        try:
            handle = open_regular(pathlib.Path(path))
        except CheckpointError as exc:
            self.reader.refusal = self.reader.refusal or exc
            raise
        with handle:
            yield cast(io.IOBase, handle)


class SafeReader(FileSystemReader):
    """torch's ``FileSystemReader`` reading ``.metadata`` with :class:`MetadataUnpickler`, and only regular files.

    A refusal is kept in :attr:`refusal` too: torch catches errors of ``read_metadata`` and
    reports "metadata is None" instead (and gathers a shard's read error into its own exception),
    so the caller re-raises the refusal itself.
    """

    refusal: CheckpointError | None = None

    def __init__(self, path: str | os.PathLike[str], *args: Any, **kwargs: Any) -> None:
        super().__init__(path, *args, **kwargs)
        self.fs = RegularFiles(self)

    def read_metadata(self, *args: Any, **kwargs: Any) -> metadata.Metadata:
        path = self._get_metadata_path(kwargs.get("rank"))
        try:
            with self.fs.create_stream(path, "rb") as handle:
                result = read_metadata_file(cast("IO[bytes]", handle), str(path))
        except CheckpointError as exc:
            self.refusal = exc
            raise
        if getattr(result, "storage_meta", None) is None:  # as torch's own reader does
            result.storage_meta = metadata.StorageMeta()
        assert result.storage_meta is not None
        result.storage_meta.load_id = self.load_id
        return result


class SafePlanner(DefaultLoadPlanner):
    """torch's ``DefaultLoadPlanner`` loading non-tensor values with ``weights_only=True``."""

    refusal: CheckpointError | None = None

    def load_bytes(self, read_item: ReadItem, value: io.BytesIO) -> None:
        fqn = read_item.dest_index.fqn
        try:
            loaded = torch.load(value, weights_only=True)
        except Exception as exc:
            from anydevice.checkpoint.loading import refused_global

            needed = refused_global(exc)
            self.refusal = CheckpointError(
                f"Checkpoint value '{fqn}' was refused: it needs {needed}, which a safe (weights-only) load does not import."
                if needed
                else f"Checkpoint value '{fqn}' could not be read ({type(exc).__name__}).",
                "Save plain values (numbers, strings, tensors, containers of them); register your own types with "
                f"torch.serialization.add_safe_globals; {_NEVER}.",
            )
            raise self.refusal from None
        if self.flatten_state_dict:
            set_element(self.original_state_dict, self.mappings[fqn], loaded)
        else:
            self.state_dict[fqn] = loaded
