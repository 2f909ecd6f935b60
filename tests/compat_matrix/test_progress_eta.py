"""The probe run's ETA weighs each remaining probe by its cost (issue 14: "eta 6 s at 48 of 70, took 40 s more")."""

from __future__ import annotations

import io

import pytest

from anydevice.compat_matrix.progress import GROUP_COST_S, ProbeProgress
from anydevice.compat_matrix.schema import ProbeResult, Status


def _result(name: str, took: float = 1.0) -> ProbeResult:
    return ProbeResult(probe=name, shim="ops", status=Status.PASS, description="", duration_s=took)


def test_eta_counts_the_slow_probes_still_to_come() -> None:
    progress = ProbeProgress(4, stream=io.StringIO(), tty=False)
    progress.expect([("a", "ops"), ("b", "ops"), ("c", "ops"), ("slow", "workloads")], {"a": 1.0, "b": 1.0, "c": 1.0})
    for name in ("a", "b", "c"):  # the three cheap probes took 1 s each, as last time
        progress.result(_result(name))
    eta = progress.eta_s()
    assert eta == pytest.approx(GROUP_COST_S["workloads"], rel=0.05)  # a per-probe pace would say ~1 s


def test_an_earlier_run_sets_the_weights_and_the_pace_scales_them() -> None:
    progress = ProbeProgress(2, stream=io.StringIO(), tty=False)
    progress.expect([("a", "ops"), ("b", "ops")], {"a": 1.0, "b": 9.0})
    progress.result(_result("a", took=2.0))  # twice as long as last time
    assert progress.eta_s() == pytest.approx(18.0, rel=0.05)


def test_without_expectations_it_is_the_plain_pace() -> None:
    progress = ProbeProgress(4, stream=io.StringIO(), tty=False)
    progress.started -= 2.0
    progress.result(_result("a"))
    assert progress.eta_s() == pytest.approx(6.0, rel=0.05)


def test_worker_start_up_does_not_inflate_the_pace() -> None:
    progress = ProbeProgress(2, stream=io.StringIO(), tty=False)
    progress.expect([("a", "ops"), ("b", "ops")], {"a": 1.0, "b": 1.0})
    progress.started -= 30.0  # importing torch in the worker took 30 s before the first probe ran
    progress.result(_result("a", took=1.0))
    assert progress.eta_s() == pytest.approx(1.0)
