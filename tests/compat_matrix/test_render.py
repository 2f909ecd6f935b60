"""Merging and rendering: snapshot, escaping, disagreements, diffs, malformed files, staleness."""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

import pytest

from anydevice import compat_matrix
from anydevice.compat_matrix.cli import main
from anydevice.compat_matrix.merge import build_matrix, diff_runs, load_runs, merge
from anydevice.compat_matrix.page import build_site, check_site, environment, write_site
from anydevice.compat_matrix.render_md import md
from anydevice.compat_matrix.schema import Status, dump_run
from anydevice.compat_matrix.versions_table import load_lanes
from tests.compat_matrix.builders import FIXTURES, result, run

REPO = Path(__file__).resolve().parents[2]
SNAPSHOTS = Path(__file__).parent / "snapshots"
EVIL = "<script>alert('x')</script>"


def _fixtures() -> list[Path]:
    return sorted(FIXTURES.glob("*.json"))


def test_snapshot_matches() -> None:
    # the fixture lane records, not the committed ones: scripts/test rewrites those after each run
    site = build_site(_fixtures(), load_lanes(FIXTURES / "lanes"))
    if os.environ.get("UPDATE_SNAPSHOTS") == "1":
        write_site(site, SNAPSHOTS)
    assert check_site(site, SNAPSHOTS) == [], "snapshot stale: rerun with UPDATE_SNAPSHOTS=1 and review the diff"


def test_output_is_deterministic_whatever_the_file_order() -> None:
    assert build_site(_fixtures()).files == build_site(list(reversed(_fixtures()))).files


def test_hostile_text_is_escaped_everywhere() -> None:
    site = build_site(_fixtures())
    html, markdown = site.files["index.html"], site.files["index.md"]
    assert EVIL not in html and "<script>alert" not in html
    assert "&lt;script&gt;alert(&#39;x&#39;)&lt;/script&gt;" in html  # markupsafe spells the quote &#39;
    assert html.count("<script") == 2  # the data blob and the page's own script, nothing else
    blob = re.search(r'<script type="application/json" id="matrix-data">(.*?)</script>', html, re.S)
    assert blob is not None and "<" not in blob.group(1)
    assert json.loads(blob.group(1))["runs"]
    assert "<script>" not in markdown and "&lt;script&gt;" in markdown
    assert md("a|b\nc") == "a\\|b c"


def test_page_comes_from_the_shipped_templates_autoescaped_and_self_contained() -> None:
    templates = Path(compat_matrix.__file__).parent / "templates"
    assert environment().get_template("page.html.j2").environment.autoescape is True
    html = build_site(_fixtures()).files["index.html"]
    for name in ("page.css", "page.js"):  # inlined verbatim: Jinja syntax in them would have been interpreted
        assert (templates / name).read_text() in html
    assert html.count("<style>") == 1 and " src=" not in html and "<link" not in html  # no network
    assert not re.search(r'href="(?!#)', html)  # every link stays on the page


def test_malformed_file_is_reported_and_the_rest_render() -> None:
    site = build_site(_fixtures())
    assert site.run_count == len(_fixtures()) - 1
    assert len(site.problems) == 1 and site.problems[0].startswith("malformed.json: not JSON")
    assert "Result file not used: malformed.json" in site.files["index.html"]
    assert "malformed.json" in site.files["index.md"]


def test_cli_render_reports_malformed_files_on_stderr(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "site"
    assert main(["render", *map(str, _fixtures()), "--out", str(out)]) == 0
    assert "malformed.json" in capsys.readouterr().err
    assert (out / "index.html").is_file() and (out / "index.md").is_file()


def test_merge_keeps_every_run_and_shows_disagreement() -> None:
    matrix = build_matrix(_fixtures())
    assert len(matrix.runs) == 8
    cpu_columns = [c for c in matrix.columns if c.label.startswith("cpu")]
    assert sorted(len(c.runs) for c in cpu_columns) == [1, 2]  # torch 2.12 alone; two machines on 2.13
    shared = next(c for c in cpu_columns if len(c.runs) == 2)
    matmul = matrix.cell("matmul", shared)
    assert matmul.status is None and dict(matmul.counts()) == {Status.PASS: 1, Status.FALLBACK: 1}
    xla = next(c for c in matrix.columns if c.label.startswith("xla"))
    assert matrix.cell("all_reduce", xla).status is Status.UNTESTED and not matrix.cell("all_reduce", xla).entries
    html = build_site(_fixtures()).files["index.html"]
    assert "disagree: pass ×1, pass (CPU fallback) ×1" in html
    assert "UNHEALTHY" in html and "device not available" in html and "fake (simulated, not verified on hardware)" in html


def test_diff_finds_newly_broken_and_newly_working() -> None:
    runs, _ = load_runs([FIXTURES / "cpu-old.json", FIXTURES / "cpu-new.json"])
    old, new = sorted(runs, key=lambda r: r.run.started_at)
    diff = diff_runs(old, new)
    assert [c.probe for c in diff.broken] == ["sdpa"] and [c.probe for c in diff.fixed] == ["conv2d"]
    assert merge(runs).diffs[0].broken == diff.broken
    html = build_site([FIXTURES / "cpu-old.json", FIXTURES / "cpu-new.json"]).files["index.html"]
    assert "Newly broken (1)" in html and "Newly working (1)" in html


def test_identical_copies_count_once(tmp_path: Path) -> None:
    one = run([result("sanity", shim="sanity"), result("matmul")])
    dump_run(one, tmp_path / "a.json")
    dump_run(one, tmp_path / "b.json")
    runs, problems = load_runs([tmp_path / "a.json", tmp_path / "b.json"])
    assert len(runs) == 1 and "counted once" in problems[0]


def test_check_flags_a_stale_page(tmp_path: Path) -> None:
    args = ["render", str(FIXTURES / "cpu-new.json"), "--out", str(tmp_path)]
    assert main([*args, "--check"]) == 1
    assert main(args) == 0
    assert main([*args, "--check"]) == 0
    (tmp_path / "index.md").write_text("edited by hand\n")
    assert main([*args, "--check"]) == 1


def test_committed_page_is_not_stale() -> None:
    results = sorted((REPO / "compat_matrix" / "results").glob("*.json"))
    site = build_site(results)
    assert site.problems == []
    assert check_site(site, REPO / "docs" / "compat") == [], (
        "docs/compat is stale: run `anydevice matrix render compat_matrix/results/*.json --out docs/compat`"
    )
