"""Issue 11, the page: hostile result files and option values, each with its exact outcome."""

from __future__ import annotations

import re
import time
from pathlib import Path

import pytest

from anydevice.compat_matrix.cli import main
from anydevice.compat_matrix.schema import Invocation, Status, dump_run
from tests.compat_matrix.builders import result, run

EVIL = "<img src=x onerror=alert(1)>"


def _hostile_run(tmp_path: Path) -> Path:
    bad = run(
        [
            result("sanity", shim="sanity"),
            result(f"{EVIL}|probe", Status.FAIL, shim="ops", message=f"{EVIL} | broke", reason=f"{EVIL}|why"),
        ]
    )
    bad = bad.model_copy(
        update={
            "invocation": Invocation(
                argv=["--out", "x.json"], ANYDEVICE=f"cpu{EVIL}|gpu", command=f"ANYDEVICE='{EVIL}|' anydevice matrix probe"
            )
        }
    )
    path = tmp_path / "hostile.json"
    dump_run(bad, path)
    return path


def _unescaped_pipes(line: str) -> int:
    return len(re.findall(r"(?<!\\)\|", line))


def test_html_and_pipes_in_probe_name_and_anydevice_are_escaped_in_both_pages(tmp_path: Path) -> None:
    out = tmp_path / "site"
    assert main(["render", str(_hostile_run(tmp_path)), "--out", str(out)]) == 0
    html = (out / "index.html").read_text(encoding="utf-8")
    markdown = (out / "index.md").read_text(encoding="utf-8")
    # HTML: never a live tag; the text shows escaped
    assert "<img" not in html
    assert "&lt;img src=x onerror=alert(1)&gt;|probe" in html
    # Markdown: HTML escaped too (a renderer that passes HTML through gets text), pipes escaped
    assert "<img" not in markdown
    assert "&lt;img src=x onerror=alert(1)&gt;\\|probe" in markdown
    assert "cpu&lt;img src=x onerror=alert(1)&gt;\\|gpu" in markdown  # the reproduce command's ANYDEVICE
    # no table row splits: every row of a table has as many cell separators as its header
    tables: list[list[str]] = []
    for line in markdown.splitlines():
        if line.startswith("|"):
            if tables and tables[-1]:
                tables[-1].append(line)
            else:
                tables.append([line])
        elif tables and tables[-1]:
            tables.append([])
    for table in filter(None, tables):
        widths = {_unescaped_pipes(line) for line in table}
        assert len(widths) == 1, table
    # nothing is put into a code span, where escapes do not apply
    assert "`<" not in markdown and "`&lt;" not in markdown


def test_deeply_nested_json_is_named_and_skipped_beside_a_good_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    deep = tmp_path / "deep.json"
    deep.write_text("[" * 200_000 + "]" * 200_000, encoding="utf-8")
    good = tmp_path / "good.json"
    dump_run(run([result("sanity", shim="sanity"), result("matmul")]), good)
    out = tmp_path / "site"
    assert main(["render", str(deep), str(good), "--out", str(out)]) == 0
    captured = capsys.readouterr()
    assert "error: deep.json: not a result file: its JSON is nested too deeply to read" in captured.err
    assert "from 1 run(s); skipped 1 file(s) named above" in captured.out
    page = (out / "index.html").read_text(encoding="utf-8")
    assert "Result file not used: deep.json" in page and 'id="probe-matmul"' in page


def test_nothing_valid_leaves_the_existing_page_alone_and_fails(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "site"
    good = tmp_path / "good.json"
    dump_run(run([result("sanity", shim="sanity")]), good)
    assert main(["render", str(good), "--out", str(out)]) == 0
    before = {p.name: p.read_bytes() for p in out.iterdir()}
    capsys.readouterr()
    bad = tmp_path / "bad.json"
    bad.write_text("{not json", encoding="utf-8")
    deep = tmp_path / "deep.json"
    deep.write_text("{" + '"a":{' * 200_000 + "}" * 200_001, encoding="utf-8")
    assert main(["render", str(bad), str(deep), str(tmp_path / "missing.json"), "--out", str(out)]) == 1
    err = capsys.readouterr().err
    assert f"error: none of the 3 result file(s) given is valid: nothing rendered, {out} left as it was" in err
    assert "bad.json: not JSON" in err and "deep.json: not a result file" in err and "missing.json: cannot read" in err
    assert {p.name: p.read_bytes() for p in out.iterdir()} == before


def test_render_out_naming_a_file_is_a_clear_error(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    good = tmp_path / "good.json"
    dump_run(run([result("sanity", shim="sanity")]), good)
    target = tmp_path / "page.html"
    target.write_text("keep me", encoding="utf-8")
    with pytest.raises(SystemExit) as exc:
        main(["render", str(good), "--out", str(target)])
    assert exc.value.code == 2
    assert f"error: --out {target} is a file: give the directory to write index.html and index.md into" in capsys.readouterr().err
    assert target.read_text(encoding="utf-8") == "keep me"


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--timeout", "-1"], "argument --timeout: -1 is not a usable timeout: give seconds above 0 and at most 86400"),
        (["--timeout", "0"], "argument --timeout: 0 is not a usable timeout"),
        (["--timeout", "nan"], "argument --timeout: nan is not a usable timeout"),
        (["--timeout", "soon"], "argument --timeout: 'soon' is not a number of seconds"),
        (["--seed", "-3"], "argument --seed: -3 is out of range: give a seed from 0 to 2**63-1"),
        (["--only", " , "], "argument --only: is empty"),
    ],
)
def test_probe_option_values_are_checked_before_any_work(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], args: list[str], message: str
) -> None:
    out = tmp_path / "r.json"
    start = time.monotonic()
    with pytest.raises(SystemExit) as exc:
        main(["probe", *args, "--out", str(out)])
    assert exc.value.code == 2
    assert message in capsys.readouterr().err
    assert not out.exists() and time.monotonic() - start < 5


def test_probe_only_matching_nothing_is_an_error(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "r.json"
    assert main(["probe", "--only", "no_such_probe", "--out", str(out)]) == 2
    assert "error: --only 'no_such_probe' matches no probe" in capsys.readouterr().err
    assert not out.exists()


def test_probe_out_naming_a_directory_is_an_error(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exc:
        main(["probe", "--out", str(tmp_path)])
    assert exc.value.code == 2
    assert f"--out {tmp_path} is a directory: give the result file to write" in capsys.readouterr().err
