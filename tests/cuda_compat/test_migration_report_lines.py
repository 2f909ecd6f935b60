"""The migration report keeps each distinct CUDA call's first line of user code only when asked (``anydevice check``)."""

from __future__ import annotations

import inspect

import pytest

from anydevice.cuda_compat.migration_report import REDIRECTED, REFUSED, MigrationReport

pytestmark = pytest.mark.torch_version_sensitive  # docs/architecture.md, "Which tests the core lanes run"


def _here() -> str:
    frame = inspect.currentframe()
    assert frame is not None and frame.f_back is not None
    return f"{__file__}:{frame.f_back.f_lineno}"


def test_lines_are_recorded_at_the_first_call_from_user_code_when_asked() -> None:
    report = MigrationReport("cpu")
    report.record_lines()
    report.add("torch.cuda.synchronize()", REDIRECTED, "cpu")
    first = _here()
    report.add("torch.cuda.synchronize()", REDIRECTED, "cpu")  # the same call again: the first line stays
    report.add("torch.cuda.mem_get_info()", REFUSED, "no memory pair")
    (sync, mem) = report.as_json()["calls"]
    assert sync["line"] == f"{first.rsplit(':', 1)[0]}:{int(first.rsplit(':', 1)[1]) - 1}"
    assert mem["line"].startswith(__file__) and mem["line"] != sync["line"]
    assert f"(at {sync['line']})" in report.render()


def test_frames_of_internal_packages_are_skipped() -> None:
    report = MigrationReport("cpu", internal={"torch", "anydevice", "tests"})  # this module is tests.cuda_compat...
    report.record_lines()
    report.add("Tensor.cuda()", REDIRECTED, "cpu")
    line = report.as_json()["calls"][0]["line"]
    assert line is None or not line.startswith(__file__)


def test_no_line_is_read_unless_asked() -> None:
    report = MigrationReport("cpu")
    report.add("Tensor.cuda()", REDIRECTED, "cpu")
    assert report.as_json()["calls"] == [{"call": "Tensor.cuda()", "kind": REDIRECTED, "outcome": "cpu"}]
    assert "(at " not in report.render()
