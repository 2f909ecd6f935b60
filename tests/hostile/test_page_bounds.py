"""Issue 46, the page: what one hostile result file can put on it is bounded, so is the whole page, and every cut is
named (a hostile result folder rendered a 116 MB page).

Real result files written with the schema's own writer, rendered by ``anydevice matrix render``'s entry point.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from anydevice.compat_matrix.cli import main
from anydevice.compat_matrix.merge import load_bounded_runs
from anydevice.compat_matrix.page_bounds import MAX_RESULTS_ON_PAGE, MAX_RESULTS_PER_RUN
from anydevice.compat_matrix.schema import EnvInfo, Invocation, Status, dump_run
from tests.compat_matrix.builders import result, run

FLOOD = "<" * 2000  # the most a message may hold, and every character of it escaped on the page


def _hostile(path: Path, results: int) -> None:
    flooded = [result("sanity", shim="sanity")] + [
        result(
            f"p{i}",
            Status.FAIL,
            message=FLOOD,
            reason="r" * 1000,
            params={f"k{j}": "v" * 200 for j in range(40)},
            fallback_ops=["op" * 100] * 40,
        )
        for i in range(results - 1)
    ]
    bad = run(flooded, run_id=path.stem).model_copy(
        update={
            "env": EnvInfo(python="3.11", os="Linux", packages={f"pkg{i}": "<" * 1000 for i in range(500)}),
            "invocation": Invocation(argv=["x" * 10_000] * 100, command="anydevice " + "y" * 100_000),
        }
    )
    dump_run(bad, path)


def test_one_hostile_file_is_cut_to_its_share_and_the_cut_is_named(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    _hostile(tmp_path / "hostile.json", 21)
    dump_run(run([result("sanity", shim="sanity"), result("matmul")], plugin="cpu", run_id="good"), tmp_path / "good.json")
    out = tmp_path / "site"
    assert main(["render", str(tmp_path / "hostile.json"), str(tmp_path / "good.json"), "--out", str(out)]) == 0
    captured = capsys.readouterr()
    note = (
        "hostile.json: 20 result(s) (reasons, messages and descriptions to 500 characters, params and fallback ops to 16 of "
        "100 characters); its environment, command or identity (lists to 16 entries, texts to 100 characters)"
    )
    assert captured.err.splitlines() == [f"note: cut to fit the page: {note}"]
    assert captured.out.endswith("from 2 run(s); cut 1 file(s) to fit the page, named above\n")
    page = (out / "index.html").read_text(encoding="utf-8")
    assert f"Result file cut to fit the page: {note}" in page and 'id="probe-matmul"' in page and 'id="probe-p19"' in page
    assert "y" * 1001 not in page and "v" * 101 not in page and "&lt;" * 501 not in page
    per_result = ((out / "index.html").stat().st_size + (out / "index.md").stat().st_size) / 21
    assert per_result < 20_000, f"{per_result:.0f} bytes of page per result"  # 2.1 MB (a 45 MB page) before the bounds


def test_a_file_with_more_results_than_its_share_keeps_the_first(tmp_path: Path) -> None:
    _hostile(tmp_path / "many.json", MAX_RESULTS_PER_RUN + 100)
    (loaded,), problems, cuts = load_bounded_runs([tmp_path / "many.json"])
    assert [r.probe for r in loaded.run.results] == ["sanity"] + [f"p{i}" for i in range(MAX_RESULTS_PER_RUN - 1)]
    assert problems == [] and cuts[0].startswith(
        f"many.json: {MAX_RESULTS_PER_RUN + 100} probe results (the first {MAX_RESULTS_PER_RUN} kept); "
    )


def test_files_past_the_pages_total_are_skipped_and_named(tmp_path: Path) -> None:
    count = MAX_RESULTS_ON_PAGE // MAX_RESULTS_PER_RUN + 1
    for i in range(count):
        plain = [result("sanity", shim="sanity")] + [result(f"p{j}") for j in range(MAX_RESULTS_PER_RUN - 1)]
        dump_run(run(plain, run_id=f"run{i}", day=i), tmp_path / f"run{i}.json")
    runs, problems, cuts = load_bounded_runs(sorted(tmp_path.glob("*.json")))
    assert [r.source for r in runs] == [f"run{i}.json" for i in range(count - 1)] and cuts == []
    (problem,) = problems
    assert problem.startswith(
        f"run{count - 1}.json: the page holds at most {MAX_RESULTS_ON_PAGE} probe results and about 24 MB, and the files "
        f"before it fill {MAX_RESULTS_ON_PAGE} results and "
    )
    assert problem.endswith(" in this one); render fewer files at once") and f"({MAX_RESULTS_PER_RUN} results and " in problem


def test_the_committed_results_are_not_cut() -> None:
    results = sorted((Path(__file__).resolve().parents[2] / "compat_matrix" / "results").glob("*.json"))
    runs, problems, cuts = load_bounded_runs(results)
    assert len(runs) == len(results) and problems == [] and cuts == []
