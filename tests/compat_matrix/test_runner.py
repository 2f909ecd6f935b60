"""The runner end to end: real worker subprocesses on the CPU, crashes, hangs and a missing device."""

from __future__ import annotations

import io
from datetime import datetime, timezone
from pathlib import Path

import pytest

from anydevice.compat_matrix import catalog
from anydevice.compat_matrix.claims import SUPPORTED
from anydevice.compat_matrix.cli import main
from anydevice.compat_matrix.progress import ProbeProgress
from anydevice.compat_matrix.runner import _assemble, _State, run_probes
from anydevice.compat_matrix.schema import Status, load_run
from tests.compat_matrix.builders import result

REPO = Path(__file__).resolve().parents[2]


def _quiet() -> ProbeProgress:
    return ProbeProgress(0, stream=io.StringIO(), tty=False)


def test_probe_run_on_cpu_writes_a_valid_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ANYDEVICE", "cpu")
    stream = io.StringIO()
    out = tmp_path / "cpu.json"
    run = run_probes(
        out, only="matmul,dtype_int8", argv=["--out", "cpu.json"], progress=ProbeProgress(0, stream=stream, tty=False)
    )
    loaded = load_run(out)
    assert loaded == run
    assert [r.probe for r in run.results] == ["sanity", "dtype_int8", "matmul"]
    assert all(r.status is Status.PASS for r in run.results), [(r.probe, r.reason) for r in run.results]
    assert all(r.expected == SUPPORTED for r in run.results)  # the cpu plugin declares nothing unsupported
    assert run.health.sanity_passed and run.health.device_available
    assert run.hardware.device_type == "cpu" and run.env.torch and run.plugin.name == "cpu"
    assert run.invocation.command == "ANYDEVICE=cpu anydevice matrix probe --out cpu.json"
    assert "sanity passed" in stream.getvalue() and "pass" in stream.getvalue()


def test_crash_and_hang_are_isolated(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ANYDEVICE", "cpu")
    monkeypatch.setenv("PYTHONPATH", str(REPO))
    # 10 s per probe: the hang is cut at 10 s, and the sanity probe has room on a loaded machine (3 s timed it out)
    run = run_probes(None, only="zz_", timeout=10, modules=["tests.compat_matrix.crashy_probes"], progress=_quiet())
    by_name = {r.probe: r for r in run.results}
    assert by_name["sanity"].status is Status.PASS
    crash, hang, after = by_name["zz_crash"], by_name["zz_hang"], by_name["zz_after"]
    assert crash.status is Status.FAIL and crash.exception_type == "WorkerCrash" and "SIGABRT" in (crash.reason or "")
    assert hang.status is Status.FAIL and hang.exception_type == "Timeout" and hang.failure_stage is not None
    assert after.status is Status.PASS and "still alive" in after.log


def test_unavailable_device_gives_an_honest_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ANYDEVICE", "tpu")
    out = tmp_path / "tpu.json"
    assert main(["probe", "--out", str(out), "--only", "matmul"]) == 0
    run = load_run(out)
    assert not run.health.device_available and not run.health.sanity_passed
    assert run.plugin.name == "tpu" and "not available" in (run.health.note or "")
    assert {r.status for r in run.results} == {Status.SKIP}
    assert all((r.reason or "").startswith("device not available") for r in run.results)
    assert all(r.expected is None for r in run.results)  # no device selected: no plugin claims


def test_failed_sanity_gates_the_rest() -> None:
    probes = catalog.select(catalog.builtin_probes(), "matmul")
    state = _State(results={"sanity": result("sanity", Status.FAIL, "sanity")}, gated="sanity probe fail: boom")
    run = _assemble(state, probes, datetime(2026, 1, 1, tzinfo=timezone.utc), [], 0, None)
    assert not run.health.sanity_passed and run.health.device_available
    assert "boom" in (run.health.note or "")
    assert [r.status for r in run.results[1:]] == [Status.UNTESTED] * (len(probes) - 1)


def test_list(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["probe", "--list", "--only", "collectives"]) == 0
    listed = capsys.readouterr().out
    assert "all_reduce" in listed and "sanity" in listed and "matmul" not in listed


def test_progress_bar_on_a_terminal_and_plain_lines_otherwise() -> None:
    tty, plain = io.StringIO(), io.StringIO()
    for stream, is_tty in ((tty, True), (plain, False)):
        progress = ProbeProgress(2, stream=stream, tty=is_tty)
        progress.result(result("matmul"))
        progress.result(result("sdpa", Status.FAIL))
    assert "\r\x1b[Kprobing [" in tty.getvalue() and "2/2" in tty.getvalue() and "fail" in tty.getvalue()
    lines = plain.getvalue().splitlines()
    assert lines[0].startswith("probing [1/2] matmul ✔ pass") and "\r" not in plain.getvalue()
    assert lines[1].startswith("probing [2/2] sdpa") and "fail" in lines[1]
