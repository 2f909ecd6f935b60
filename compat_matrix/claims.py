"""Claimed vs observed: what the selected plugin declares (``DeviceSpec.unsupported``) against what a probe saw.

A claimed-supported probe that fails (or works only in part) contradicts its plugin; so does a
declared-unsupported probe that works. A declared-unsupported probe that fails or skips agrees.
Skips, harness errors and untested probes never contradict a claim of support: nothing was observed.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING

from anydevice.compat_matrix.schema import Claim, ProbeResult, Status
from anydevice.compat_matrix.symbols import WORKING

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
