"""Where a failure comes from: the device, the plugin, the vendor package, a simulation, or the harness.

Read from the evidence a result file holds, so that a red cell says whose problem it is. A failure
in a simulated run is a missing feature of the simulated vendor module unless anydevice itself
raised: the simulated column tests the plugin's code paths, not the hardware.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum

from anydevice.compat_matrix.schema import ProbeResult, Run, Status

NEEDS_ORIGIN = frozenset({Status.FAIL, Status.PARTIAL, Status.HARNESS_ERROR})


class Source(str, Enum):
    """Whose problem a failure is."""

    DEVICE = "device"
    PLUGIN = "plugin"
    VENDOR = "vendor package"
    SIMULATION = "simulation"
    HARNESS = "harness"


@dataclass(frozen=True)
class Origin:
    """A failure's source and one sentence saying why it is read that way."""

    source: Source
    why: str

    @property
    def short(self) -> str:
        """A few words for a cell: ``from the plugin``."""
        return f"from the {self.source.value}"


def origin(run: Run, result: ProbeResult) -> Origin | None:
    """Where ``result``'s failure comes from; None for results that did not fail."""
    if result.status not in NEEDS_ORIGIN:
        return None
    plugin = run.plugin.name
    vendor = run.plugin.vendor_package
    if result.status is Status.HARNESS_ERROR:
        return Origin(Source.HARNESS, "the probe harness or the anydevice API it calls was at fault, not the device")
    if result.expected is not None and not result.expected.supported:
        return Origin(Source.PLUGIN, f"the {plugin} plugin declares this unsupported: {result.expected.reason}")
    if (result.exception_type or "").startswith("anydevice."):
        return Origin(Source.PLUGIN, f"anydevice's {plugin} plugin raised {result.exception_type}")
    if run.hardware.simulated:
        return Origin(
            Source.SIMULATION,
            f"the simulated {vendor or plugin} module lacks what this needs ({_stage(result)}); the {plugin} plugin's "
            "code path ran up to there. This says nothing about the real hardware",
        )
    if result.failure_stage is not None and result.failure_stage.value == "import":
        return Origin(Source.VENDOR, f"{_vendor(run)} failed to import")
    if vendor and vendor != "torch":
        return Origin(Source.VENDOR, f"{_vendor(run)} (with torch {run.env.torch or '?'}) {_stage(result)}")
    device = run.hardware.chip or run.hardware.device_type
    return Origin(Source.DEVICE, f"torch's {run.hardware.device_type} backend on {device} {_stage(result)}")


def _stage(result: ProbeResult) -> str:
    return f"failed at {result.failure_stage.value}" if result.failure_stage is not None else "worked only in part"


def _vendor(run: Run) -> str:
    return f"{run.plugin.vendor_package} {run.plugin.vendor_version or ''}".strip()
