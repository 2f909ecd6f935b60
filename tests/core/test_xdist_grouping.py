"""The main lane's scheduler (tests/xdist_grouping.py): a module-scoped fixture runs once under two workers, and the
modules of one ``XDIST_GROUP`` run on one worker."""

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

NAMED = """
import os, time, pytest

XDIST_GROUP = "cluster"

@pytest.mark.parametrize("i", range(3))
def test_uses_the_cluster(i):
    with open(os.environ["CLUSTER"], "a") as f:
        f.write(f"{os.getpid()}\\n")
    time.sleep(0.1)
"""

SPREAD = """
import time, pytest

@pytest.mark.parametrize("i", range(6))
def test_alone(i):
    time.sleep(0.1)
"""


def test_a_module_fixture_runs_once_and_a_named_group_on_one_worker(tmp_path: Path) -> None:
    (tmp_path / "conftest.py").write_text("from tests.xdist_grouping import pytest_xdist_make_scheduler  # noqa: F401\n")
    (tmp_path / "test_shared.py").write_text(SHARED)
    (tmp_path / "test_spread.py").write_text(SPREAD)
    for name in ("test_cluster_a.py", "test_cluster_b.py"):
        (tmp_path / name).write_text(NAMED)
    pids, cluster = tmp_path / "pids", tmp_path / "cluster"
    args = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-n", "2", "--dist", "loadgroup", str(tmp_path)]
    done = run(args, env={"PIDS": str(pids), "CLUSTER": str(cluster), "PYTHONPATH": str(REPO)}, cwd=tmp_path)
    assert done.returncode == 0 and "18 passed" in done.stdout, done.stdout + done.stderr
    assert len(pids.read_text().split()) == 1  # --dist load ran it on each worker that got one of the six tests
    assert len(set(cluster.read_text().split())) == 1  # the two modules' six tests ran in one worker
