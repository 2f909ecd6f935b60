"""The errors anydevice raises (a user's program sees only these; ``tests/docs/test_structure_docs.py`` holds
the tree below to the classes defined here).

The hierarchy::

    AnyDeviceError                      base class; ``hint`` says what to do next
    ├── SelectionError                  the ANYDEVICE value (or ``use()`` argument) is malformed
    │   ├── SelectionTypeError          the selection is not a string (also a TypeError)
    │   └── UnknownDeviceError          no plugin provides that name ("did you mean ...")
    ├── DeviceUnavailableError          a named device cannot be used here, and why
    │   ├── VersionMismatchError        torch and the vendor package do not pair
    │   └── NoDeviceAvailableError      no entry of a list (or ``auto``) is usable
    ├── PluginError                     a plugin failed to import, register or load
    ├── UnsupportedFeatureError         the selected device does not support a requested feature
    │   ├── UnsupportedDeviceFunctionError  a ``torch.cuda``-shaped function the device has no answer for
    │   └── CpuFallbackError        strict mode: an op ran on the CPU instead of the selected device
    ├── DistributedError                a launch environment is missing or half set
    ├── UsageError                      a command-line tool was called wrongly: what to type instead
    ├── CheckpointError                 a checkpoint cannot be read (empty, corrupt, refused) or written
    ├── FileAccessError                 another file (page, result, record, cache) refused or failed, and why
    └── ExportError                     a model cannot be exported for an edge runtime, or its export disagrees

The CLI prints ``str(error)`` (one or a few sentences, no traceback) and exits non-zero.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol


class AnyDeviceError(Exception):
    """Base class of every anydevice error; ``hint`` tells the user how to fix it."""

    def __init__(self, message: str, hint: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.hint = hint

    def __str__(self) -> str:
        if self.hint:
            return f"{self.message}\n{self.hint}"
        return self.message


class SelectionError(AnyDeviceError, ValueError):
    """The device selection string is malformed (empty item, bad index, ``auto`` in a list)."""


class SelectionTypeError(SelectionError, TypeError):
    """The selection passed to ``use()`` (or ``select()``) is not a string."""


class UnknownDeviceError(SelectionError):
    """No installed plugin provides the requested device name."""

    def __init__(self, name: str, known: Sequence[str], suggestion: str | None) -> None:
        did_you_mean = f" Did you mean '{suggestion}'?" if suggestion else ""
        super().__init__(
            f"Unknown device '{name}'.{did_you_mean}",
            "Known devices: " + ", ".join(sorted(known)) + ". Run `anydevice list` to see them all.",
        )
        self.name = name
        self.known = tuple(known)
        self.suggestion = suggestion


class DeviceUnavailableError(AnyDeviceError):
    """A named device cannot be used in this environment; ``reason`` says why."""

    def __init__(
        self,
        name: str,
        reason: str,
        fix: str | None = None,
        available: Sequence[str] = (),
        problem: str | None = None,
    ) -> None:
        avail = ", ".join(available) if available else "none"
        hint = "\n".join(part for part in (f"Fix: {fix}" if fix else None, f"Available here: {avail}.") if part)
        super().__init__(f"Device '{name}' is not available: {reason}.", hint)
        self.name = name
        self.reason = reason
        self.fix = fix
        self.available = tuple(available)
        self.problem = problem


class VersionMismatchError(DeviceUnavailableError):
    """torch and a vendor package that must match it do not (caught before importing the package)."""

    def __init__(
        self,
        name: str,
        reason: str,
        fix: str | None = None,
        available: Sequence[str] = (),
        *,
        package: str | None = None,
        package_version: str | None = None,
        torch_version: str | None = None,
    ) -> None:
        super().__init__(name, reason, fix, available, problem="version_mismatch")
        self.package = package
        self.package_version = package_version
        self.torch_version = torch_version


class NoDeviceAvailableError(DeviceUnavailableError):
    """None of the devices in a list (or ``auto``) is usable; every rejection is listed."""

    def __init__(self, request: str, rejections: Sequence[tuple[str, str]], available: Sequence[str]) -> None:
        lines = "; ".join(f"{name}: {why}" for name, why in rejections)
        super().__init__(request, f"no device in '{request}' is usable ({lines})", None, available)
        self.rejections = tuple(rejections)


class PluginError(AnyDeviceError):
    """A plugin failed to import, register or load; ``plugin`` names it."""

    def __init__(self, plugin: str, error: BaseException | str, hint: str | None = None) -> None:
        detail = error if isinstance(error, str) else f"{type(error).__name__}: {error}"
        super().__init__(f"Plugin '{plugin}' is broken: {detail}", hint)
        self.plugin = plugin
        self.error = error


class UnsupportedFeatureError(AnyDeviceError):
    """The selected device does not support a requested feature (e.g. FSDP on XLA CPU)."""


class UnsupportedDeviceFunctionError(UnsupportedFeatureError, AttributeError):
    """``ad.device_module().<function>`` has no equivalent on the selected device; never a made-up value.

    Also an ``AttributeError``, so ``hasattr(module, "Stream")`` is False where the device has no streams.
    """

    def __init__(self, function: str, device: str, reason: str, hint: str | None = None) -> None:
        shown = function if "." in function else f"{function}()"  # a property (props.major) shows as it is
        super().__init__(f"{shown} is not available on {device}: {reason}.", hint)
        self.function = function
        self.device = device
        self.reason = reason


class CpuFallbackError(UnsupportedFeatureError):
    """Strict mode (``ANYDEVICE_STRICT=1``): an op ran on the CPU instead of the selected device.

    ``ops`` maps each ``aten::`` op that fell back to the line of user code that called it (None when unknown).
    """

    def __init__(self, message: str, hint: str | None = None, ops: dict[str, str | None] | None = None) -> None:
        super().__init__(message, hint)
        self.ops = dict(ops or {})


class DistributedError(AnyDeviceError):
    """The distributed launch environment is missing, half set, or inconsistent."""


class UsageError(AnyDeviceError):
    """A command-line tool was called wrongly (a bad option value, a missing script): what to type instead."""


class CheckpointError(AnyDeviceError):
    """A checkpoint is empty, corrupt, refused by a safe load, incomplete, or its save failed on another rank."""


class FileAccessError(AnyDeviceError):
    """A file anydevice reads or writes outside a checkpoint was refused (a link, a FIFO, too large, another user's, not
    written by anydevice) or failed; ``path`` names it and ``reason`` says why."""

    def __init__(self, action: str, path: object, reason: str, hint: str | None = None) -> None:
        super().__init__(f"Cannot {action} {path}: {reason}.", hint)
        self.path = path
        self.reason = reason


class Finding(Protocol):
    """What :class:`ExportError` needs of a finding (``anydevice.preflight.schema.Finding`` is one)."""

    @property
    def message(self) -> str: ...

    @property
    def line(self) -> str | None: ...


class ExportError(AnyDeviceError):
    """``ad.export`` could not convert the model, or the converted model disagrees with PyTorch; nothing was written.

    ``finding`` is what could not convert, as ``anydevice check`` reports it
    (:class:`anydevice.preflight.schema.Finding`: the check, the construct, its ``file:line``, the fix);
    ``construct`` and ``where`` are its message and line, when known.
    """

    def __init__(self, message: str, hint: str | None = None, *, finding: Finding | None = None) -> None:
        super().__init__(message, hint)
        self.finding = finding

    @property
    def construct(self) -> str | None:
        """What could not convert: an op (``the op aten._linalg_svd has no LiteRT lowering``), a branch, a shape."""
        return self.finding.message if self.finding is not None else None

    @property
    def where(self) -> str | None:
        """The source line (``file:line``) of the construct, when known."""
        return self.finding.line if self.finding is not None else None
