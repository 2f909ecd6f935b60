"""The main lane's scheduler (tests/xdist_grouping.py): a module-scoped fixture runs once under two workers."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from tests.utils import REPO, run

pytest.importorskip("xdist")

SHARED = """
import os, time, pytest

@pytest.fixture(scope="module")
def job():
    with open(os.environ["PIDS"], "a") as f:
        f.write(f"{os.getpid()}\\n")

@pytest.mark.parametrize("i", range(6))
def test_reads_the_job(job, i):
    time.sleep(0.1)
"""

SPREAD = """
import time, pytest

@pytest.mark.parametrize("i", range(6))
def test_alone(i):
    time.sleep(0.1)
"""


def test_a_module_fixture_runs_once_under_two_workers(tmp_path: Path) -> None:
    (tmp_path / "conftest.py").write_text("from tests.xdist_grouping import pytest_xdist_make_scheduler  # noqa: F401\n")
    (tmp_path / "test_shared.py").write_text(SHARED)
    (tmp_path / "test_spread.py").write_text(SPREAD)
    pids = tmp_path / "pids"
    args = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-n", "2", "--dist", "loadgroup", str(tmp_path)]
    done = run(args, env={"PIDS": str(pids), "PYTHONPATH": str(REPO)}, cwd=tmp_path)
    assert done.returncode == 0 and "12 passed" in done.stdout, done.stdout + done.stderr
    assert len(pids.read_text().split()) == 1  # --dist load ran it on each worker that got one of the six tests
