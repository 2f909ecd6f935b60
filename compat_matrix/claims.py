"""What a result says beyond its status: whether it contradicts its plugin's claim, and whose failure it is.

Claimed vs observed: what the selected plugin declares (``DeviceSpec.unsupported``) against what a
probe saw. A claimed-supported probe that fails (or works only in part) contradicts its plugin; so
does a declared-unsupported probe that works. A declared-unsupported probe that fails or skips
agrees. Skips, harness errors and untested probes never contradict a claim of support.

Where a failure comes from (:func:`origin`): the device, the plugin, the vendor package, a
simulation, or the harness, read from the evidence a result file holds, so that a red cell says
whose problem it is. A failure in a simulated run is a missing feature of the simulated vendor
module unless anydevice itself raised: the simulated column tests the plugin's code paths, not the
hardware.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from enum import Enum
from typing import TYPE_CHECKING

from anydevice.compat_matrix.schema import WORKING, Claim, ProbeResult, Run, Status

if TYPE_CHECKING:
    from anydevice.compat_matrix.merge import Column, LoadedRun, Matrix

SUPPORTED = Claim(supported=True)


def claim_for(probe: str, unsupported: Mapping[str, str]) -> Claim:
    """The claim for ``probe`` given a plugin's ``unsupported`` table."""
    reason = unsupported.get(probe)
    return SUPPORTED if reason is None else Claim(supported=False, reason=reason)


def with_claims(results: Iterable[ProbeResult], unsupported: Mapping[str, str]) -> list[ProbeResult]:
    """``results`` with ``expected`` filled from the plugin's table."""
    return [r.model_copy(update={"expected": claim_for(r.probe, unsupported)}) for r in results]


def describe(claim: Claim) -> str:
    """The claim in words: ``supported`` or ``unsupported: <reason>``."""
    return "supported" if claim.supported else f"unsupported: {claim.reason}"


def mismatch(result: ProbeResult) -> str | None:
    """Why the observed status contradicts the plugin's claim, or None when they agree or nothing was claimed."""
    claim = result.expected
    if claim is None:
        return None
    if not claim.supported and result.status in WORKING:
        return "claimed unsupported, but it works"
    if claim.supported and result.status is Status.FAIL:
        return "claimed supported, but it fails"
    if claim.supported and result.status is Status.PARTIAL:
        return "claimed supported, but it works only in part"
    return None


def short(result: ProbeResult) -> str | None:
    """A few words for a matrix cell: the contradicted claim, ``declared unsupported``, or None."""
    claim = result.expected
    if claim is None:
        return None
    if mismatch(result) is not None:
        return "claimed " + ("supported" if claim.supported else "unsupported")
    return None if claim.supported else "declared unsupported"


@dataclass(frozen=True)
class Finding:
    """One result whose plugin declared it unsupported or whose status contradicts the claim."""

    column: Column
    loaded: LoadedRun
    result: ProbeResult
    contradiction: str | None


def findings(matrix: Matrix) -> list[Finding]:
    """Every contradicted claim and every declared-unsupported probe on the page, in page order."""
    found = []
    for row in matrix.rows:
        for column in matrix.columns:
            for loaded, result in matrix.cell(row.probe, column).entries:
                why = mismatch(result)
                if why is not None or (result.expected is not None and not result.expected.supported):
                    found.append(Finding(column, loaded, result, why))
    return found


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
    if run.export is not None:  # the export target's converter or runtime, or the slice's compiler, speaking
        packages = ", ".join(f"{k} {v}" for k, v in sorted(run.export.versions.items()))
        return Origin(Source.VENDOR, f"the {run.export.label} ({packages}) {_stage(result)}")
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
