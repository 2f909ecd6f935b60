"""What could not convert, and where: a converter's exception turned into the finding ``anydevice check`` would report.

The construct is read from what torch.export and litert-torch say (``Lowering not found:
aten.X``, a guard on a data-dependent value, a dynamic-shape constraint, an unsupported element
type); the line from the source frames their messages quote, else from the traceback's frames
in the model's own files. The result is a :class:`~anydevice.preflight.schema.Finding` (check
``ops``, ``dtypes``, ``capture`` or ``shapes``, severity ``error``, the line, the fix), carried by one
:class:`ExportError` and printed by ``anydevice export`` the way ``anydevice check`` prints findings.
"""

from __future__ import annotations

import inspect
import re
import traceback
from collections.abc import Iterable
from typing import TYPE_CHECKING, Literal

from anydevice.errors import ExportError

if TYPE_CHECKING:
    from anydevice.preflight.schema import Finding

Check = Literal["ops", "dtypes", "capture", "shapes"]
"""The checks of ``anydevice check`` a conversion failure falls under."""

_LOWERING = re.compile(r"Lowering not found: (?P<op>[\w.]+)")
_EXECUTING = re.compile(r"target=torch\.ops\.(?P<op>[\w.]+)")
_ELEMENT = re.compile(r"Unsupported ir element type: (?P<type>\S+)")
_FRAME = re.compile(r'File "(?P<file>[^"]+)", line (?P<line>\d+)')
_QUOTED = ("Original traceback:", "The following call raised this error:")


def conversion_finding(exc: BaseException, model_files: Iterable[str]) -> Finding:
    """What ``exc`` (raised by torch.export or litert-torch) says could not convert, as a check finding."""
    from anydevice.preflight.schema import Finding

    text = _full_text(exc)
    check, construct, fix = _construct(exc, text)
    where = _quoted_frame(text) or _model_frame(exc, set(model_files))
    return Finding(check=check, severity="error", message=construct, line=where, fix=fix)


def conversion_error(exc: BaseException, model_files: Iterable[str], target: str) -> ExportError:
    """One clear error for a failed conversion: the construct, the source line, what to do (its ``finding``)."""
    finding = conversion_finding(exc, model_files)
    at = f" at {finding.line}" if finding.line else ""
    first = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
    return ExportError(
        f"Cannot export the model to {target}: {finding.message}{at}. Nothing was written. ({type(exc).__name__}: {first[:300]})",
        finding.fix,
        finding=finding,
    )


def _full_text(exc: BaseException) -> str:
    """The messages of ``exc`` and of its causes and contexts."""
    parts, seen = [], set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        parts.append(str(current))
        current = current.__cause__ or current.__context__
    return "\n".join(parts)


def _construct(exc: BaseException, text: str) -> tuple[Check, str, str]:
    """``(check, construct, fix)``: the check ``anydevice check`` files it under, what could not convert, what to do."""
    names = {cls.__name__ for cls in type(exc).__mro__}
    if match := _LOWERING.search(text):
        op = match["op"].removesuffix(".default")
        return (
            "ops",
            f"the op {op} has no LiteRT lowering",
            (
                f"Replace {op} in the model's forward with ops LiteRT has (docs/export.md lists what converts), "
                "or compute it outside the exported module."
            ),
        )
    if match := _ELEMENT.search(text):
        op = _EXECUTING.search(text)
        via = f" (from {op['op'].removesuffix('.default')})" if op else ""
        return (
            "dtypes",
            f"LiteRT has no {match['type']} tensors{via}",
            ("Keep complex numbers and other unsupported dtypes out of forward."),
        )
    if "GuardOnDataDependentSymNode" in names or "data-dependent" in text:
        return (
            "capture",
            "a data-dependent branch (Python control flow on a tensor's value)",
            (
                "Make the branch independent of tensor values (torch.where, or torch.cond for both branches), "
                "or move it outside the exported module."
            ),
        )
    if "ConstraintViolationError" in names or "Constraints violated" in text or "dynamic_shapes" in text:
        return (
            "shapes",
            "a dynamic shape the exporter refuses",
            (
                "Export with fixed shapes (leave dynamic_shapes=None; the example inputs fix them) or relax the "
                "constraints torch.export names."
            ),
        )
    if match := _EXECUTING.search(text):
        op = match["op"].removesuffix(".default")
        return "ops", f"the op {op} failed to convert", "Replace that op in the forward, or compute it outside the module."
    return "capture", f"the converter failed ({type(exc).__name__})", "Run with ANYDEVICE_DEBUG=1 for the converter's traceback."


def _quoted_frame(text: str) -> str | None:
    """The source line that torch.export or litert-torch quote in their message."""
    for marker in _QUOTED:
        at = text.find(marker)
        if at >= 0 and (match := _FRAME.search(text, at)):
            return f"{match['file']}:{match['line']}"
    return None


def _model_frame(exc: BaseException, model_files: set[str]) -> str | None:
    """The deepest traceback frame in one of the model's own source files."""
    found = None
    for frame in traceback.extract_tb(exc.__traceback__):
        if frame.filename in model_files:
            found = f"{frame.filename}:{frame.lineno}"
    return found


def source_files(modules: Iterable[object]) -> set[str]:
    """The files that define the classes of ``modules`` (the model's own code)."""
    files = set()
    for module in modules:
        try:
            path = inspect.getsourcefile(type(module))
        except TypeError:  # a built-in class
            continue
        if path:
            files.add(path)
    return files
