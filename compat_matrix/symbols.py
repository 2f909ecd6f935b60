"""How each status is shown: a symbol and a label (never colour alone), shared by CLI and page."""

from __future__ import annotations

from typing import Final

from anydevice.compat_matrix.schema import Status

SYMBOL: Final[dict[Status, str]] = {
    Status.PASS: "✔",
    Status.FALLBACK: "◐",
    Status.PARTIAL: "◑",
    Status.FAIL: "✘",
    Status.SKIP: "–",
    Status.HARNESS_ERROR: "⚠",
    Status.UNTESTED: "?",
    Status.FAKE: "◇",
}

LABEL: Final[dict[Status, str]] = {
    Status.PASS: "pass",
    Status.FALLBACK: "pass (CPU fallback)",
    Status.PARTIAL: "partial",
    Status.FAIL: "fail",
    Status.SKIP: "skip",
    Status.HARNESS_ERROR: "harness error",
    Status.UNTESTED: "untested",
    Status.FAKE: "fake (simulated, not verified on hardware)",
}

DISAGREE_SYMBOL: Final = "≠"
SIMULATED: Final = "simulated: not verified on hardware"

# Statuses that count as "working" for diffs between runs.
WORKING: Final = frozenset({Status.PASS, Status.FALLBACK, Status.FAKE})
BROKEN: Final = frozenset({Status.FAIL, Status.HARNESS_ERROR, Status.PARTIAL})

# Marks a cell whose observed status contradicts what the plugin declares (text follows it).
CLAIM_MISMATCH_SYMBOL: Final = "‼"
