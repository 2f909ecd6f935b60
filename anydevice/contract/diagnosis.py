"""What ``anydevice doctor`` reports: :class:`Check` lines, and the :class:`DoctorContext` checks share.

Plugins contribute their own checks through the ``anydevice_doctor_checks`` hook (vendor settings
such as ``PJRT_DEVICE`` or ``CUDA_VISIBLE_DEVICES`` are judged by the plugin that knows them); core
runs every plugin's checks and prints them with its own.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal

if TYPE_CHECKING:
    from anydevice.contract.device_spec import Devices

Status = Literal["ok", "info", "warn", "fail"]


@dataclass(frozen=True)
class Check:
    """One line of the report: what was checked, how it went, and the fix when it did not."""

    name: str
    status: Status
    message: str
    fix: str | None = None


@dataclass
class DoctorContext:
    """What the checks share: the devices (a read-only view), the user's selection and what it resolves to.

    :param requested: ``ANYDEVICE`` as set (``auto`` when unset).
    :param requested_names: the canonical device names it lists (empty for ``auto`` or a typo).
    :param selected: the device the selection resolves to here, or None when it does not resolve.
    """

    registry: Devices
    """The registered devices, read-only (``names``, ``canonical``, ``spec``)."""
    requested: str
    requested_names: list[str]
    selected: str | None = None

    def concerns(self, name: str) -> bool:
        """True when device ``name`` was asked for or picked: its settings then matter."""
        return name in self.requested_names or self.selected == name
