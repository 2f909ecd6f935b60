"""``ad.load``: ``torch.load`` whose failures name the file and say what is wrong with it.

An empty, truncated or garbage file raises :class:`~anydevice.errors.CheckpointError` saying so;
a file holding objects a weights-only load refuses says which, and never suggests turning the
safe load off (the right advice for a file you did not write is not to unpickle it).
"""

from __future__ import annotations

import pickle
import re
import warnings
import zipfile
from pathlib import Path
from typing import TYPE_CHECKING, Any

from anydevice.errors import CheckpointError

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


def _classify(path: Path, exc: Exception) -> Exception:
    text = str(exc)
    refused = _GLOBAL.search(text)
    if isinstance(exc, pickle.UnpicklingError) and refused:
        return CheckpointError(
            f"Checkpoint {path} was refused: it needs {refused[1].rstrip('.')}, which a safe (weights-only) load "
            "does not import.",
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
