"""Which rank ``anydevice run`` names when several failed: the one that failed first, to the nanosecond.

torch elastic orders failures by the timestamp in each rank's error file, in whole seconds, and gives a tie to
the lowest rank: on torch 2.9 a rank 0 that failed in a barrier because rank 1 crashed in the same second was
named ("rank 0 failed"). The error files here are torch elastic's own format, read by its own ``ProcessFailure``.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from torch.distributed.elastic.multiprocessing.errors import ProcessFailure

from anydevice.cli.launch import first_failure

pytestmark = pytest.mark.torch_version_sensitive  # torch elastic's ProcessFailure and its error-file format

SECOND = 1_764_900_000


def failure(tmp_path: Path, rank: int, timestamp: int, written_ns: int) -> ProcessFailure:
    """Rank ``rank``'s failure, its error file stamped ``timestamp`` (seconds) and written at ``written_ns``."""
    path = tmp_path / f"error_{rank}.json"
    extra = {"py_callstack": f"Traceback ... rank {rank}", "timestamp": str(timestamp)}
    path.write_text(json.dumps({"message": {"message": f"RuntimeError: rank {rank}", "extraInfo": extra}}))
    os.utime(path, ns=(written_ns, written_ns))
    return ProcessFailure(local_rank=rank, pid=1000 + rank, exitcode=1, error_file=str(path))


def test_a_tie_in_whole_seconds_goes_to_the_rank_whose_error_file_was_written_first(tmp_path: Path) -> None:
    failures = {
        0: failure(tmp_path, 0, SECOND, SECOND * 10**9 + 900_000_000),  # rank 0: failed after rank 1, same second
        1: failure(tmp_path, 1, SECOND, SECOND * 10**9 + 100_000_000),
    }
    assert failures[0].timestamp == failures[1].timestamp == SECOND  # what torch elastic orders by: a tie, rank 0
    assert first_failure(failures) == (1, failures[1])


def test_an_earlier_second_comes_first_whatever_the_files_times(tmp_path: Path) -> None:
    failures = {
        0: failure(tmp_path, 0, SECOND + 1, SECOND * 10**9),
        1: failure(tmp_path, 1, SECOND, (SECOND + 5) * 10**9),
    }
    assert first_failure(failures) == (1, failures[1])


def test_a_failure_without_an_error_file_comes_after_one_with_a_file_in_its_second(tmp_path: Path) -> None:
    signalled = ProcessFailure(local_rank=0, pid=1000, exitcode=-9, error_file=str(tmp_path / "never_written.json"))
    raised = failure(tmp_path, 1, signalled.timestamp, signalled.timestamp * 10**9 + 999_999_999)
    assert first_failure({0: signalled, 1: raised}) == (1, raised)
