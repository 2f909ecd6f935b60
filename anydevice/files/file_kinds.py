"""What an existing file is, judged from its first bytes and (for a zip) its central directory: never unpickled.

:func:`torch_checkpoint` says whether a file is a checkpoint ``torch.save`` (and so ``ad.save``) wrote: its zip
archive with every member under one top-level folder ``NAME/`` holding ``NAME/data.pkl``, a version record
(``NAME/version``, ``NAME/.data/version``, ``NAME/.format_version`` or ``NAME/byteorder``) and storages
``NAME/data/<n>``; or torch's legacy (non-zip) format, whose pickle starts with torch's magic number. The zip magic
alone is not enough: a NumPy ``.npz``, a Word document, a ``.jar`` and a wheel are zip archives too.

:func:`describe` says what any other file looks like, in words for an error ("a NumPy .npz archive",
"a zip archive (Word document)", "a text file").
"""

from __future__ import annotations

import os
import re
import struct
import zipfile
from collections.abc import Sequence

HEAD_SIZE = 512
"""How much of a file's beginning :func:`describe` reads."""

ZIP_MAGIC = b"PK\x03\x04"
TORCH_LEGACY_MAGIC = b"\x80\x02\x8a\nl\xfc\x9cF\xf9 j\xa8P\x19"
"""The pickle of torch's legacy-format magic number: how every non-zip ``torch.save`` file starts."""

_VERSION_RECORDS = ("version", ".data/version", ".format_version", "byteorder")
_TORCH_RECORDS = frozenset(("data.pkl", "version", "byteorder"))
_STORAGE = re.compile(r"data/\d+")
_TORCHSCRIPT = ("code/", "constants.pkl", "extra/")
_EMPTY_ZIP = b"PK\x05\x06"

_MAGICS: tuple[tuple[bytes, str], ...] = (
    (TORCH_LEGACY_MAGIC, "a torch.save file in torch's legacy (non-zip) format"),
    (b"\x93NUMPY", "a NumPy .npy array"),
    (b"\x89HDF\r\n\x1a\n", "an HDF5 file"),
    (b"\x89PNG\r\n\x1a\n", "a PNG image"),
    (b"\xff\xd8\xff", "a JPEG image"),
    (b"GIF8", "a GIF image"),
    (b"%PDF", "a PDF document"),
    (b"\x1f\x8b", "a gzip file"),
    (b"BZh", "a bzip2 file"),
    (b"\xfd7zXZ\x00", "an xz file"),
    (b"(\xb5/\xfd", "a zstd file"),
    (b"\x7fELF", "an ELF executable or library"),
    (b"SQLite format 3\x00", "an SQLite database"),
    (_EMPTY_ZIP, "an empty zip archive"),
)


def torch_checkpoint(fd: int) -> bool:
    """Whether the open regular file ``fd`` is a ``torch.save`` checkpoint (see the module doc).

    A zip whose central directory cannot be read (a checkpoint cut short by a crash during an in-place rewrite) counts
    when its first member is torch's ``NAME/data.pkl``: it is an earlier checkpoint, damaged.
    """
    head = os.pread(fd, HEAD_SIZE, 0)
    if head.startswith(TORCH_LEGACY_MAGIC):
        return True
    if not head.startswith(ZIP_MAGIC):
        return False
    names = zip_names(fd)
    if names is None:
        first = _first_member_name(head)
        return first is not None and first.count("/") == 1 and first.endswith("/data.pkl")
    return torch_layout(names)


def torch_layout(names: Sequence[str]) -> bool:
    """Whether a zip's member ``names`` are ``torch.save``'s layout (TorchScript's ``code/`` and ``constants.pkl`` are not)."""
    folders = {name.split("/", 1)[0] for name in names}
    if len(folders) != 1 or any("/" not in name for name in names):
        return False
    prefix = f"{folders.pop()}/"
    inner = [name[len(prefix) :] for name in names]
    if "data.pkl" not in inner or not any(record in inner for record in _VERSION_RECORDS):
        return False
    # torch's hidden records (.data/, .format_version, .storage_alignment, and any it adds) are dot-named
    return all(name in _TORCH_RECORDS or name.startswith(".") or _STORAGE.fullmatch(name) for name in inner)


def zip_names(fd: int) -> list[str] | None:
    """The member names in the central directory of the zip archive ``fd`` (None when it cannot be read); nothing is
    inflated."""
    try:
        with os.fdopen(os.dup(fd), "rb") as handle, zipfile.ZipFile(handle) as archive:
            return archive.namelist()
    except (zipfile.BadZipFile, OSError, ValueError, EOFError, NotImplementedError):
        return None


def describe(fd: int) -> str:
    """What the open regular file ``fd`` looks like, in words ("a NumPy .npz archive", "a text file")."""
    head = os.pread(fd, HEAD_SIZE, 0)
    if not head:
        return "an empty file"
    if head.startswith(ZIP_MAGIC):
        names = zip_names(fd)
        return "a damaged zip archive" if names is None else describe_zip(names)
    return describe_head(head)


def describe_zip(names: Sequence[str]) -> str:
    """What a zip archive with these member ``names`` is."""
    if torch_layout(names):
        return "a torch.save checkpoint"
    folders = {name.split("/", 1)[0] for name in names}
    if len(folders) == 1 and any(name.split("/", 1)[-1].startswith(_TORCHSCRIPT) for name in names):
        return "a TorchScript model (torch.jit.save)"
    if any(name.endswith("/archive_format") or name == "archive_format" for name in names):
        return "a torch.export program (.pt2)"
    if names and all(name.endswith(".npy") for name in names):
        return "a NumPy .npz archive"
    if "[Content_Types].xml" in names:
        for folder, what in (("word/", "Word document"), ("xl/", "Excel workbook"), ("ppt/", "PowerPoint presentation")):
            if any(name.startswith(folder) for name in names):
                return f"a zip archive ({what})"
        return "a zip archive (Office document)"
    if names[:1] == ["mimetype"]:
        return "a zip archive (OpenDocument file)"
    if any(name.endswith(".dist-info/WHEEL") for name in names):
        return "a zip archive (Python wheel)"
    if "META-INF/MANIFEST.MF" in names:
        return "a zip archive (Java archive)"
    return "a zip archive"


def describe_head(head: bytes) -> str:
    """What a file starting with ``head`` (not a zip) is."""
    for magic, what in _MAGICS:
        if head.startswith(magic):
            return what
    if head[4:8] == b"TFL3":
        return "a TensorFlow Lite model"
    if len(head) > 262 and head[257:262] == b"ustar":
        return "a tar archive"
    if len(head) >= 9 and head[8:9] == b"{" and struct.unpack("<Q", head[:8])[0] < 100 << 20:
        return "a safetensors file"
    if head[:1] == b"\x80" and head[1:2] in (b"\x02", b"\x03", b"\x04", b"\x05"):
        return "a Python pickle (not a torch.save file)"
    if _is_text(head):
        return "a text file"
    return "a binary file of unknown kind"


def _is_text(head: bytes) -> bool:
    """Printable UTF-8 (a multi-byte character cut at the end of ``head`` allowed)."""
    try:
        text = head.decode("utf-8")
    except UnicodeDecodeError as exc:
        if exc.reason != "unexpected end of data":  # only a character cut at the end of the head is forgiven
            return False
        text = head[: exc.start].decode("utf-8")
    return bool(text) and all(ch.isprintable() or ch in "\t\n\r\f" for ch in text)


def _first_member_name(head: bytes) -> str | None:
    """The name in the first local file header of a zip starting with ``head``."""
    if len(head) < 30:
        return None
    length = struct.unpack("<H", head[26:28])[0]
    raw = head[30 : 30 + length]
    return raw.decode("utf-8", "replace") if len(raw) == length else None
