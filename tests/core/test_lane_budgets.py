"""scripts/test's time rules, run for real on a copy of the script with a tiny lane table.

The copy keeps every line of scripts/test and scripts/venv but the lane table (two small lanes over
planted tests) and the per-test ceiling (1 s); each lane's "venv" is this interpreter behind a
ready-made venv folder, keyed as scripts/venv keys it, so nothing is built or installed.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import subprocess
import sys
from pathlib import Path

from anydevice.compat_matrix.lane_time import CaseTime, junit_times, over_budget, over_ceiling, slowest
from tests.utils import REPO

PLANTED = """\
import time
import pytest

def test_quick():
    pass

def test_planted_slow():
    time.sleep(1.5)

@pytest.mark.long("sleeps to stand for a test that launches ranks")
def test_marked_long():
    time.sleep(1.5)
"""


def _fake_repo(tmp_path: Path, table: str) -> tuple[Path, dict[str, str]]:
    """A copy of scripts/test with ``table`` as its lane table and a 1 s ceiling; the lanes' venvs ready."""
    repo = tmp_path / "repo"
    (repo / "scripts").mkdir(parents=True)
    script = (REPO / "scripts" / "test").read_text()
    script, n = re.subn(r"(?s)(LANE_TABLE=\$\(\n  cat <<EOF\n).*?(\nEOF\n\))", lambda m: m[1] + table + m[2], script)
    script, m = re.subn(r"\nTEST_CEILING=\d+\n", "\nTEST_CEILING=1\n", script)
    assert n == m == 1, "scripts/test's lane table or TEST_CEILING moved: update this test"
    (repo / "scripts" / "test").write_text(script)
    (repo / "scripts" / "venv").write_text((REPO / "scripts" / "venv").read_text())
    for name in ("test", "venv"):
        (repo / "scripts" / name).chmod(0o755)
    (repo / "tests").mkdir()
    (repo / "tests" / "test_planted.py").write_text(PLANTED)
    (repo / "tests" / "test_fast.py").write_text("def test_fast():\n    pass\n")
    home = tmp_path / "venvs"
    for line in table.splitlines():
        lane = line.split()[0]
        req = repo / "requirements" / f"{lane}.txt"
        req.parent.mkdir(exist_ok=True)
        req.write_text("pytest\n")
        key = hashlib.sha256(req.read_bytes() + f"{sys.version}\n".encode()).hexdigest()[:12]
        venv = home / f"{lane}-{key}"
        (venv / "bin").mkdir(parents=True)
        (venv / "bin" / "python").write_text(f'#!/bin/sh\nexec {sys.executable} "$@"\n')
        (venv / "bin" / "python").chmod(0o755)
        (venv / ".complete").touch()
    env = {
        "PATH": os.environ["PATH"],
        "HOME": str(tmp_path),
        "ANYDEVICE_VENV_HOME": str(home),
        "ANYDEVICE_PYTHON": sys.executable,
        "ANYDEVICE_SKIP_EDITABLE": "1",
        "PYTHONPATH": str(REPO),  # the lanes' pytest loads tests.long_marker, as tests/conftest.py does
    }
    return repo, env


def _run(repo: Path, env: dict[str, str], lanes: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["scripts/test"], cwd=repo, env={**env, "LANES": lanes}, capture_output=True, text=True, timeout=240)


LANES = (
    "fast   main  60  -  cpu  tests/test_fast.py -p tests.long_marker -p no:cacheprovider\n"
    "tight  main  1   -  cpu  tests/test_planted.py -p tests.long_marker -p no:cacheprovider"
)


def test_a_lane_within_its_budget_passes_and_its_record_holds_time_and_slowest_tests(tmp_path: Path) -> None:
    repo, env = _fake_repo(tmp_path, LANES)
    proc = _run(repo, env, "fast")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    record = json.loads((repo / "compat_matrix" / "lanes" / "fast.json").read_text())
    assert record["counts"]["passed"] == 1 and record["budget"] == 60 and record["over"] == []
    assert 0 <= record["seconds"] <= 60
    assert [t["test"] for t in record["slowest"]] == ["tests/test_fast.py::test_fast"]
    table = proc.stdout.split("=== lanes\n")[1]
    assert table.splitlines()[0].split()[:5] == ["lane", "outcome", "tests", "time", "budget"]
    assert re.search(r"^fast +passed +1 .* tests/test_fast.py::test_fast", table, re.M)


def test_a_lane_over_its_budget_and_a_test_over_the_ceiling_fail_naming_lane_time_and_tests(tmp_path: Path) -> None:
    repo, env = _fake_repo(tmp_path, LANES)
    proc = _run(repo, env, "fast tight")
    out = proc.stdout + proc.stderr
    assert proc.returncode == 1, out
    assert "=== FAILED: tight" in proc.stdout and "fast: passed" in proc.stdout and "tight: over time" in proc.stdout
    # the lane: its name, its time against its budget, its slowest tests
    assert re.search(r"lane tight took \d+ s, over its budget of 1 s; slowest: tests/test_planted.py::test_\w+ 1\.\d s", out)
    # the planted test over the ceiling is named; the one marked long with its reason is not
    assert "tests/test_planted.py::test_planted_slow took 1." in out and "over the per-test ceiling of 1 s" in out
    assert "test_marked_long took" not in out
    record = json.loads((repo / "compat_matrix" / "lanes" / "tight.json").read_text())
    assert record["outcome"] == "passed" and len(record["over"]) == 2  # pytest passed; the time rules did not
    marked = [t for t in record["slowest"] if t["test"].endswith("test_marked_long")]
    assert marked and marked[0]["long"] == "sleeps to stand for a test that launches ranks"
    assert re.search(r"^tight +passed +3 ", proc.stdout.split("=== lanes\n")[1], re.M)


def test_every_side_lane_runs_once_when_both_queues_take_them(tmp_path: Path) -> None:
    """The side queue starts at once; the main queue, once done, takes the side lanes it has not started."""
    fast = "tests/test_fast.py -p tests.long_marker -p no:cacheprovider"
    sides = [f"side{n}" for n in range(5)]
    table = "\n".join([f"fast main 60 - cpu {fast}", *(f"{name} side 60 - cpu {fast}" for name in sides)])
    repo, env = _fake_repo(tmp_path, table)
    proc = _run(repo, env, " ".join(["fast", *sides]))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    for lane in ["fast", *sides]:
        assert proc.stdout.count(f"=== lane: {lane} ") == 1, proc.stdout  # each lane's output printed once
        assert json.loads((repo / "compat_matrix" / "lanes" / f"{lane}.json").read_text())["counts"]["passed"] == 1
    # each lane's CPU time, and the run's, from the shells' ended children
    assert len(re.findall(r"lane \w+: passed in \d+ s \(\d+ CPU-s in its tests\)", proc.stdout + proc.stderr)) == 6
    assert re.search(r"=== all lanes passed \(\d+ s, \d+ CPU-s\)", proc.stdout)


def test_a_long_mark_without_a_reason_is_refused(tmp_path: Path) -> None:
    (tmp_path / "test_x.py").write_text("import pytest\n@pytest.mark.long\ndef test_a():\n    pass\n")
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "tests.long_marker", "test_x.py"],
        cwd=tmp_path,
        env={**os.environ, "PYTHONPATH": str(REPO)},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode != 0 and "@pytest.mark.long needs its reason" in proc.stdout + proc.stderr


def test_the_rules_read_from_junit() -> None:
    times = [CaseTime("a", 3.0), CaseTime("b", 0.5), CaseTime("c", 9.0, long="four ranks")]
    assert [t["test"] for t in slowest(times, 2)] == ["c", "a"] and slowest(times)[0]["long"] == "four ranks"
    assert over_ceiling(times, 2.0) == [
        'a took 3.0 s, over the per-test ceiling of 2 s: make it faster or mark it @pytest.mark.long("why it takes this long")'
    ]
    assert over_ceiling(times, None) == [] and over_budget("x", 10, None, []) is None and over_budget("x", 10, 10, []) is None
    expected = "lane x took 11 s, over its budget of 10 s; slowest: c 9.0 s; a 3.0 s; b 0.5 s"
    assert over_budget("x", 11, 10, slowest(times)) == expected
    assert junit_times(Path("/nonexistent.xml")) == []


def test_quick_list_writes_the_tests_over_the_limit_from_a_junit_file(tmp_path: Path) -> None:
    """What a full main-lane run ends with (scripts/test): the tests over the limit, by node id, for --quick."""
    repo = tmp_path / "repo"
    (repo / "scripts").mkdir(parents=True)
    (repo / "scripts" / "quick-list").write_text((REPO / "scripts" / "quick-list").read_text())
    (repo / "tests").mkdir()
    (repo / "tests" / "test_planted.py").write_text(PLANTED)
    junit = tmp_path / "main.xml"
    run = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-q",
            "-p",
            "no:cacheprovider",
            "-p",
            "tests.long_marker",
            f"--junitxml={junit}",
            "tests",
        ],
        cwd=repo,
        env={**os.environ, "PYTHONPATH": str(REPO)},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert run.returncode == 0, run.stdout + run.stderr
    listed = subprocess.run(
        [sys.executable, "scripts/quick-list", str(junit), "1"], cwd=repo, capture_output=True, text=True, timeout=60
    )
    assert listed.returncode == 0, listed.stderr
    assert (repo / "tests" / "quick_excluded.txt").read_text().splitlines() == [
        "# Written by scripts/quick-list from a full main-lane run: 2 tests over 1 s; --quick skips them.",
        "tests/test_planted.py::test_marked_long",
        "tests/test_planted.py::test_planted_slow",
    ]
