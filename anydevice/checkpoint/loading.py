"""``ad.load``: ``torch.load`` whose failures name the file and say what is wrong with it.

Before unpickling, the CRC-32 that ``torch.save`` stores for every member of its zip archive is
checked (:func:`verify_archive`), so a bit flip in the data or a file cut short is reported as such
instead of loading wrong numbers. An empty, truncated or garbage file raises
:class:`~anydevice.errors.CheckpointError` saying so;
a file holding objects a weights-only load refuses says which, and never suggests turning the
safe load off (the right advice for a file you did not write is not to unpickle it).
"""

from __future__ import annotations

import pickle
import re
import stat
import warnings
import zipfile
import zlib
from pathlib import Path
from typing import TYPE_CHECKING, Any

from anydevice.errors import CheckpointError
from anydevice.files import file_kinds

if TYPE_CHECKING:
    import torch

_ZIP_MARKERS = ("PytorchStreamReader", "zip archive", "magic number", "corrupt", "central directory")
_GLOBAL = re.compile(r"(?:Unsupported global: GLOBAL|unsupported GLOBAL) ([\w.]+)")


def load_file(path: Path, map_location: str | torch.device = "cpu", weights_only: bool = True) -> Any:
    """``torch.load(path)``; an unreadable checkpoint raises :class:`CheckpointError` naming ``path``."""
    import torch

    if path.is_file() and path.stat().st_size == 0:
        raise CheckpointError(
            f"Checkpoint {path} is empty (0 bytes): it was never written completely.",
            "Load an older checkpoint, or save it again.",
        )
    verify_archive(path)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            result = torch.load(path, map_location=map_location, weights_only=weights_only)
        except (FileNotFoundError, PermissionError, IsADirectoryError, NotADirectoryError):
            raise  # missing, unreadable, a directory: the OS error names the path already
        except Exception as exc:
            raise _classify(path, exc) from None
    for warning in caught:  # the load worked: pass its warnings on
        warnings.warn_explicit(warning.message, warning.category, warning.filename, warning.lineno)
    return result


def verify_archive(path: Path) -> None:
    """Check every member's CRC-32 in a ``torch.save`` zip archive; raise :class:`CheckpointError` naming the damage.

    A zip archive must have ``torch.save``'s layout (:func:`anydevice.files.file_kinds.torch_layout`), else it is
    refused naming what it looks like ("a NumPy .npz archive"), as is a recognisable non-zip file (a text file, an
    image); torch's legacy format and unrecognised bytes are left to ``torch.load``.
    Missing or unreadable files raise the OS error, which names them.
    """
    st = path.stat()
    if not stat.S_ISREG(st.st_mode) and not stat.S_ISDIR(st.st_mode):  # a FIFO or a device would block or never end
        from anydevice.files.safe_place import kind_at

        raise CheckpointError(
            f"Checkpoint {path} is {kind_at(path, st)}, not a regular file; it was not read.",
            "Give the path of a file ad.save wrote.",
        )
    if stat.S_ISDIR(st.st_mode):
        raise CheckpointError(
            f"Checkpoint {path} is a directory; ad.load reads one file that ad.save wrote.",
            "For a directory checkpoint (ad.checkpoint.save), use ad.checkpoint.load.",
        )
    with open(path, "rb") as handle:
        head = handle.read(file_kinds.HEAD_SIZE)
    if not head.startswith(file_kinds.ZIP_MAGIC):
        what = file_kinds.describe_head(head)
        if what not in _LEFT_TO_TORCH:  # recognisably something else: say what, never unpickle it
            raise _not_a_checkpoint(path, what)
        return
    try:
        with zipfile.ZipFile(path) as archive:
            names = archive.namelist()
            if not file_kinds.torch_layout(names):
                raise _not_a_checkpoint(path, file_kinds.describe_zip(names))
            bad = _first_bad_member(path, archive, st.st_size)
    except zipfile.BadZipFile as exc:
        cut = "not a zip file" in str(exc)  # no end-of-archive record: the tail is missing
        reason = "truncated: the end of the archive is missing" if cut else f"corrupt: {exc}"
        raise CheckpointError(f"Checkpoint {path} is corrupt or truncated ({reason}).", _AGAIN) from None
    except (EOFError, ValueError, OSError) as exc:
        raise CheckpointError(f"Checkpoint {path} is corrupt or truncated ({type(exc).__name__}: {exc}).", _AGAIN) from None
    if bad is not None:
        raise CheckpointError(
            f"Checkpoint {path} is corrupt or truncated (corrupt: member {bad} fails its CRC-32 check).", _AGAIN
        )


_AGAIN = "Load an older checkpoint, or save it again."
_LEFT_TO_TORCH = ("a torch.save file in torch's legacy (non-zip) format", "a binary file of unknown kind")
"""Non-zip kinds ``torch.load`` judges itself: torch's legacy format, and garbage (reported as corrupt)."""


def _not_a_checkpoint(path: Path, what: str) -> CheckpointError:
    hint = "ad.load reads a file that ad.save or torch.save wrote; give the path of one."
    if what.startswith("a TorchScript model"):
        hint = "Load a TorchScript model with torch.jit.load."
    return CheckpointError(f"{path} is not a checkpoint: it looks like {what}.", hint)


_INFLATE_FLOOR = 64 << 20
_INFLATE_RATIO = 4


def _first_bad_member(path: Path, archive: zipfile.ZipFile, size: int) -> str | None:
    """The first member whose CRC-32 fails, reading each at most to its declared size; None when all pass.

    ``torch.save`` stores members uncompressed, so reading them costs what the file holds. A
    compressed member (another tool's archive) is inflated only within a budget (4 times the file
    size, at least 64 MiB, for all of them together), checked against the sizes the archive declares
    before anything is inflated: a small file claiming a huge member is refused, not read.
    """
    budget = max(_INFLATE_FLOOR, _INFLATE_RATIO * size)
    for info in archive.infolist():
        if info.compress_type == zipfile.ZIP_STORED:
            if info.file_size != info.compress_size:
                return info.filename
        else:
            budget -= info.file_size
            if budget < 0:
                raise CheckpointError(
                    f"Checkpoint {path} was refused: its compressed member {info.filename} would inflate to "
                    f"{info.file_size} bytes from {info.compress_size} ({size} bytes in the whole file).",
                    "torch.save never compresses members; load only files written by torch.save or ad.save, "
                    "or re-save this one with them.",
                )
        try:
            with archive.open(info) as member:
                while member.read(1 << 20):  # zipfile checks the CRC-32 at the end and stops at the declared size
                    pass
        except (zipfile.BadZipFile, zlib.error):
            return info.filename
    return None


def refused_global(exc: BaseException) -> str | None:
    """The global a weights-only ``torch.load`` refused, as ``module.name``, when that is why ``exc`` was raised."""
    refused = _GLOBAL.search(str(exc))
    return refused[1].rstrip(".") if isinstance(exc, pickle.UnpicklingError) and refused else None


def _classify(path: Path, exc: Exception) -> Exception:
    text = str(exc)
    refused = refused_global(exc)
    if refused:
        return CheckpointError(
            f"Checkpoint {path} was refused: it needs {refused}, which a safe (weights-only) load does not import.",
            "If you saved objects of your own types, register them with torch.serialization.add_safe_globals; "
            "never load a file you do not trust.",
        )
    if isinstance(exc, RuntimeError) and not any(marker in text for marker in _ZIP_MARKERS) and _is_zip(path):
        return exc  # a well-formed archive that failed for another reason (e.g. map_location): not corruption
    detail = text.split(". ")[0].splitlines()[0] if text.strip() else ""
    if "Weights only load failed" in text:
        detail = "not a torch.save archive"
    reason = f"{type(exc).__name__}: {detail}" if detail else type(exc).__name__
    return CheckpointError(
        f"Checkpoint {path} is corrupt or truncated ({reason}).",
        "Load an older checkpoint, or save it again.",
    )


def _is_zip(path: Path) -> bool:
    try:
        return zipfile.is_zipfile(path)
    except OSError:
        return False
