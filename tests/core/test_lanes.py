"""scripts/test's lane table, the requirements files and the README's lanes table say the same thing."""

from __future__ import annotations

import re
import shlex
import subprocess

from tests.utils import REPO


def lane_table() -> dict[str, str]:
    """Lane name -> its table line, read from scripts/test."""
    text = (REPO / "scripts" / "test").read_text().split("LANE_TABLE=")[1].split("EOF\n)")[0]
    return {line.split()[0]: line for line in text.splitlines()[2:] if line.strip()}


def test_every_lane_has_pinned_requirements_and_a_readme_row() -> None:
    lanes = lane_table()
    assert {"main", "core-torch2.9", "core-torch2.15", "xla", "tpu", "titan", "serve"} <= set(lanes)
    readme = (REPO / "README.md").read_text().split("## Tests and lanes")[1].split("\n## ")[0]
    rows = set(re.findall(r"^\| ([a-z0-9.-]+) \|", readme, re.M)) - {"lane"}
    assert rows == set(lanes)
    for lane in set(lanes) - {"serve"}:  # serve's file comes with the serving work; the lane skips without it
        pins = [line for line in (REPO / "requirements" / f"{lane}.txt").read_text().splitlines() if line and line[0] != "#"]
        assert pins and all("==" in pin for pin in pins), (lane, pins)


def test_the_core_lanes_run_the_oldest_and_newest_claimed_torch() -> None:
    for lane, torch in (("core-torch2.9", "2.9.0"), ("core-torch2.15", "2.15.0")):
        assert f"torch=={torch}\n" in (REPO / "requirements" / f"{lane}.txt").read_text()
    assert "torch==2.15.0\n" in (REPO / "requirements" / "tpu.txt").read_text()  # torch_tpu 0.2.0 allows up to 2.15


def test_an_unknown_lane_is_refused_before_anything_runs() -> None:
    proc = subprocess.run(
        ["scripts/test"], env={"LANES": "nope", "PATH": "/usr/bin:/bin"}, cwd=REPO, capture_output=True, text=True
    )
    assert proc.returncode == 2 and "no such lane: nope" in proc.stderr and "core-torch2.15" in proc.stderr


def test_a_lane_selected_by_one_mark_collects_the_folders_that_hold_every_test_with_it() -> None:
    """Such a lane names its folders (its pytest imports no other test module): a test with its mark elsewhere would
    silently never run, so each file that applies the mark must lie under one of them."""
    checked = set()
    for lane, line in lane_table().items():
        args = shlex.split(line.split(None, 5)[5])
        if args[:1] != ["-m"] or not re.fullmatch(r"\w+", args[1]):
            continue  # main and the core lanes select by an expression: they collect their folders whole
        mark, folders = args[1], [REPO / arg for arg in args[2:] if not arg.startswith("-")]
        marked = {path for path in (REPO / "tests").rglob("*.py") if re.search(rf"mark\.{mark}\b", path.read_text())}
        assert marked, f"no test file applies the mark {mark} of lane {lane}"
        outside = [str(p.relative_to(REPO)) for p in marked if not any(p == f or f in p.parents for f in folders)]
        assert not outside, f"lane {lane} collects {args[2:]} only; these files mark tests {mark} elsewhere: {outside}"
        checked.add(lane)
    assert {"xla", "tpu-check", "serve", "litert", "tpu", "titan", "verl"} <= checked
