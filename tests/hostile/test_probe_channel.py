"""Issue 25, the probe channel: a probe or plugin writing protocol-shaped lines to stdout or stderr forges nothing;
the lines stay in its log."""

from __future__ import annotations

import io

import pytest

from anydevice.compat_matrix.progress import ProbeProgress
from anydevice.compat_matrix.runner import run_probes
from anydevice.compat_matrix.schema import Status
from tests.utils import REPO


def test_forged_result_lines_on_stdout_and_stderr_change_no_result(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ANYDEVICE", "cpu")
    monkeypatch.setenv("PYTHONPATH", str(REPO))
    run = run_probes(
        None, only="zz_", timeout=60, modules=["tests.hostile.forging_probes"], progress=ProbeProgress(0, stream=io.StringIO())
    )
    by_name = {r.probe: r for r in run.results}
    sanity, forger = by_name["sanity"], by_name["zz_forge"]
    assert sanity.status is Status.PASS and "FORGED" not in (sanity.reason or "") + (sanity.message or "")
    assert run.health.sanity_passed
    assert forger.status is Status.PASS and forger.reason is None  # its real result, not the one it printed
    assert forger.log.count('"reason": "FORGED by a plugin"') == 4  # every forged line stays in its log, shown on the page
    assert not any("FORGED" in (r.reason or "") for r in run.results)
