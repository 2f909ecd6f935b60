"""Issue 25, writing: the page, result files and lane records never follow a planted link, and never replace a file
anydevice did not write unless asked (``--force``)."""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path

import pytest

from anydevice.compat_matrix.cli import main
from anydevice.compat_matrix.schema import dump_run, load_run
from anydevice.errors import FileAccessError
from anydevice.files.safe_files import write_json
from tests.compat_matrix.builders import result, run
from tests.hostile.other_user import OTHER, as_other, needs_root
from tests.utils import anydevice_cli, python


def _results(tmp_path: Path) -> Path:
    path = tmp_path / "cpu.json"
    dump_run(run([result("sanity", shim="sanity"), result("matmul")]), path)
    return path


def _regular(path: Path) -> bool:
    return stat.S_ISREG(path.lstat().st_mode)


@needs_root
def test_links_another_user_planted_in_a_shared_out_are_never_followed(
    tmp_path: Path, shared: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    results = _results(tmp_path)
    victim = tmp_path / "victim.txt"  # a file of ours the other user chose
    victim.write_text("our own notes\n")
    for name in ("index.html", "index.md"):  # the old writer's predictable temporaries, for this very process
        as_other("ln", "-s", str(victim), str(shared / f".{name}.{os.getpid()}.tmp"))
    assert main(["render", str(results), "--out", str(shared)]) == 0, capsys.readouterr().err
    assert victim.read_text() == "our own notes\n"
    for name in ("index.html", "index.md"):
        page = shared / name
        assert _regular(page) and page.lstat().st_uid == os.geteuid()  # never their link
    assert "anydevice compatibility matrix" in (shared / "index.md").read_text()


@needs_root
def test_an_out_directory_that_is_another_users_link_is_refused(
    tmp_path: Path, shared: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    ours = tmp_path / "ours"
    ours.mkdir()
    (ours / "index.md").write_text("our own page\n")
    as_other("ln", "-s", str(ours), str(shared / "site"))
    assert main(["render", str(_results(tmp_path)), "--out", str(shared / "site")]) == 1
    err = capsys.readouterr().err
    assert "it is a symbolic link owned by another user (uid 65534)" in err
    assert sorted(p.name for p in ours.iterdir()) == ["index.md"] and (ours / "index.md").read_text() == "our own page\n"


@needs_root
def test_a_page_file_that_is_another_users_link_is_refused_and_force_replaces_the_link_only(
    tmp_path: Path, shared: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    results = _results(tmp_path)
    victim = tmp_path / "victim.md"
    victim.write_text("our own page\n")
    as_other("ln", "-s", str(victim), str(shared / "index.md"))
    assert main(["render", str(results), "--out", str(shared)]) == 1
    err = capsys.readouterr().err
    assert f"Cannot write {shared / 'index.md'}: it is a symbolic link to {victim}" in err and "--force" in err
    assert not (shared / "index.html").exists()  # checked before anything was written
    assert (shared / "index.md").is_symlink() and victim.read_text() == "our own page\n"
    assert main(["render", str(results), "--out", str(shared), "--force"]) == 0
    assert _regular(shared / "index.md") and victim.read_text() == "our own page\n"


def test_a_hand_written_index_md_is_not_replaced_without_force(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    results = _results(tmp_path)
    out = tmp_path / "site"
    out.mkdir()
    (out / "index.md").write_text("# Our project\n\nWritten by hand.\n")
    assert main(["render", str(results), "--out", str(out)]) == 1
    err = capsys.readouterr().err
    assert f"Cannot write {out / 'index.md'}: a file anydevice did not write is there" in err
    assert (out / "index.md").read_text() == "# Our project\n\nWritten by hand.\n"
    assert not (out / "index.html").exists()
    assert main(["render", str(results), "--out", str(out), "--force"]) == 0
    assert (out / "index.md").read_text().startswith("# anydevice compatibility matrix")
    assert main(["render", str(results), "--out", str(out)]) == 0  # a page render wrote is replaced freely
    assert [p.name for p in out.iterdir() if p.name.startswith(".")] == []  # no temporaries left


def test_a_fifo_where_the_page_goes_is_refused_without_hanging(tmp_path: Path) -> None:
    out = tmp_path / "site"
    out.mkdir()
    os.mkfifo(out / "index.html")
    proc = anydevice_cli("matrix", "render", str(_results(tmp_path)), "--out", str(out), timeout=120)
    assert proc.returncode == 1 and "it is a FIFO (named pipe)" in proc.stderr
    assert stat.S_ISFIFO((out / "index.html").lstat().st_mode)


def test_a_result_file_replaces_only_an_earlier_result_file(tmp_path: Path) -> None:
    notes = tmp_path / "notes.json"
    notes.write_text('{"my": "notes"}\n')
    proc = anydevice_cli("matrix", "probe", "--out", str(notes), "--only", "matmul", env={"ANYDEVICE": "cpu"}, timeout=300)
    assert proc.returncode == 2 and f"Cannot write {notes}: a file anydevice did not write is there" in proc.stderr
    assert "pass --force" in proc.stderr and notes.read_text() == '{"my": "notes"}\n'
    with pytest.raises(FileAccessError, match="did not write"):
        dump_run(run([result("sanity", shim="sanity")]), notes)
    earlier = _results(tmp_path)
    dump_run(run([result("sanity", shim="sanity")]), earlier)  # an earlier result file: replaced
    assert [r.probe for r in load_run(earlier).results] == ["sanity"]


def test_a_lane_record_replaces_only_an_earlier_record(tmp_path: Path) -> None:
    hand = tmp_path / "lane.json"
    hand.write_text("[1, 2, 3]\n")
    record = ["-m", "anydevice.compat_matrix.versions_table", "record", "--lane", "main", "--devices", "cpu", "--exit-code", "0"]
    proc = python(*record, "--out", str(hand))
    assert proc.returncode == 1 and f"Cannot write {hand}: a file anydevice did not write is there" in proc.stderr
    assert hand.read_text() == "[1, 2, 3]\n"
    fresh = tmp_path / "lanes" / "main.json"
    for _ in range(2):  # written, then replaced
        proc = python(*record, "--out", str(fresh))
        assert proc.returncode == 0, proc.stderr
    assert json.loads(fresh.read_text())["lane"] == "main"


def test_the_report_writer_for_other_modules_names_the_file_and_the_cause(tmp_path: Path) -> None:
    blocker = tmp_path / "blocker"
    blocker.write_text("a file")
    with pytest.raises(FileAccessError, match=r"Cannot write .*blocker/report\.json: a part of the path is not a directory"):
        write_json(blocker / "report.json", {"device": "cpu", "calls": []}, ours_keys=("device", "calls"))
    report = tmp_path / "report.json"
    write_json(report, {"device": "cpu", "calls": []}, ours_keys=("device", "calls"))
    write_json(report, {"device": "tpu", "calls": []}, ours_keys=("device", "calls"))
    assert json.loads(report.read_text())["device"] == "tpu"


@needs_root
def test_another_users_result_file_in_a_shared_directory_is_not_replaced(tmp_path: Path, shared: Path) -> None:
    theirs = shared / "cpu.json"
    theirs_text = json.dumps({"schema_version": 1, "run_id": "theirs", "results": []})
    theirs.write_text(theirs_text)
    os.chown(theirs, OTHER, OTHER)  # a result file of theirs, in a directory both of us write to
    with pytest.raises(FileAccessError, match=r"belongs to another user \(uid 65534\)"):
        dump_run(run([result("sanity", shim="sanity")]), theirs)
    assert theirs.read_text() == theirs_text
