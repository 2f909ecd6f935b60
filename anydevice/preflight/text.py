"""The findings as text: one formatter for ``anydevice check``'s report and ``anydevice export``'s refusal.

A :class:`~anydevice.preflight.schema.Finding` reads the same wherever it comes from: severity, check,
what, the user's line, then the fixes (``fix 1: ...``).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from anydevice.preflight.schema import Finding

RANK = {"error": 0, "warning": 1, "info": 2}


def finding_line(finding: Finding) -> str:
    """``  error   ops         the op aten.x has no LiteRT lowering  (model.py:12)``."""
    return f"  {finding.severity:<7} {finding.check:<11} {finding.message}" + (f"  ({finding.line})" if finding.line else "")


def findings_block(findings: Iterable[Finding], fixes: Sequence[str] | None = None) -> list[str]:
    """The findings worst first, then the fixes numbered (``fixes`` None: each finding's own fix, in that order)."""
    ordered = sorted(findings, key=lambda f: RANK[f.severity])
    if fixes is None:
        fixes = list(dict.fromkeys(f.fix for f in ordered if f.fix))
    return [*map(finding_line, ordered), *(f"  fix {i}: {fix}" for i, fix in enumerate(fixes, 1))]
