"""The result schema: valid files load, invalid ones are rejected with the file named."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from pydantic import ValidationError

from anydevice.compat_matrix.schema import (
    MAX_LOG,
    MAX_MESSAGE,
    ProbeResult,
    ResultFileError,
    Run,
    Status,
    bounded,
    dump_run,
    load_run,
)
from tests.compat_matrix.builders import FIXTURES, result, run

RESULTS = Path(__file__).resolve().parents[2] / "compat_matrix" / "results"


def test_roundtrip(tmp_path: Path) -> None:
    original = run([result("sanity", shim="sanity"), result("matmul", Status.FAIL)])
    dump_run(original, tmp_path / "r.json")
    assert load_run(tmp_path / "r.json") == original


def test_fail_needs_stage_and_other_statuses_forbid_it() -> None:
    with pytest.raises(ValidationError, match="failure_stage"):
        ProbeResult(probe="x", shim="ops", status=Status.FAIL, reason="r")
    with pytest.raises(ValidationError, match="only for failed"):
        ProbeResult(probe="x", shim="ops", status=Status.PASS, failure_stage="compile")


@pytest.mark.parametrize("status", [Status.SKIP, Status.UNTESTED, Status.HARNESS_ERROR])
def test_statuses_that_need_a_reason(status: Status) -> None:
    with pytest.raises(ValidationError, match="needs a reason"):
        ProbeResult(probe="x", shim="ops", status=status)


def test_duplicate_probe_rejected() -> None:
    with pytest.raises(ValidationError, match="appears twice"):
        run([result("matmul"), result("matmul")])


def test_bounded_keeps_head_and_tail() -> None:
    text = "HEAD" + "x" * 20_000 + "TAIL"
    cut = bounded(text, MAX_LOG)
    assert cut is not None and len(cut) == MAX_LOG
    assert cut.startswith("HEAD") and cut.endswith("TAIL") and "truncated" in cut
    assert bounded("short", 10) == "short" and bounded(None, 10) is None


def test_overlong_message_in_a_file_is_rejected(tmp_path: Path) -> None:
    data = json.loads(run([result("matmul")]).model_dump_json())
    data["results"][0]["message"] = "m" * (MAX_MESSAGE + 1)
    path = tmp_path / "long.json"
    path.write_text(json.dumps(data))
    with pytest.raises(ResultFileError, match=r"long\.json"):
        load_run(path)


@pytest.mark.parametrize(
    ("content", "detail"),
    [
        ("{not json", "not JSON"),
        ("[]", "not a JSON object"),
        ('{"schema_version": 99}', "unsupported schema_version 99"),
        ('{"schema_version": 1, "run_id": "x"}', "schema error"),
    ],
)
def test_malformed_files_name_the_file(tmp_path: Path, content: str, detail: str) -> None:
    path = tmp_path / "bad.json"
    path.write_text(content)
    with pytest.raises(ResultFileError) as info:
        load_run(path)
    assert info.value.path == path and detail in str(info.value) and "bad.json" in str(info.value)


def test_unknown_field_rejected(tmp_path: Path) -> None:
    data = json.loads(run([result("matmul")]).model_dump_json())
    data["results"][0]["colour"] = "green"
    with pytest.raises(ValidationError, match="colour"):
        Run.model_validate(data)


def test_fixtures_are_valid_except_the_malformed_one() -> None:
    for path in sorted(FIXTURES.glob("*.json")):
        if path.name == "malformed.json":
            with pytest.raises(ResultFileError):
                load_run(path)
        else:
            assert load_run(path).results


def test_committed_results_validate() -> None:
    files = sorted(RESULTS.glob("*.json"))
    assert files, "compat_matrix/results/ has no result files"
    for path in files:
        loaded = load_run(path)
        assert loaded.results, path.name
    cpu = load_run(RESULTS / "cpu.json")
    assert cpu.health.sanity_passed and cpu.hardware.device_type == "cpu"
    assert len(cpu.results) >= 50
    assert {r.shim for r in cpu.results} >= {"placement", "compilation", "collectives", "profiling", "dtypes", "ops"}
