"""A rank that ends (status 0) before ad.distributed.init() is named at once by the ranks waiting for it (issue 35).

It used to leave them waiting silently in the rendezvous until the process group's timeout (30 minutes).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.distributed.helpers import anydevice_run

SCRIPT = """
import os, sys
import anydevice as ad
if os.environ["RANK"] == "1":
    if sys.argv[1:] == ["exit"]:
        raise SystemExit(0)
else:
    ad.distributed.init()
    print("joined", flush=True)
"""


@pytest.mark.parametrize("how", ["return", "exit"])
def test_the_waiting_rank_names_the_rank_that_left(tmp_path: Path, how: str) -> None:
    script = tmp_path / "early.py"
    script.write_text(SCRIPT)
    result = anydevice_run("-n", "2", script, *(["exit"] if how == "exit" else []), timeout=120)
    assert result.returncode == 1 and "joined" not in result.stdout
    assert "Rank 1 ended (exit status 0) without calling ad.distributed.init(), so the process group of 2 ranks" in result.stderr
    assert "anydevice run: rank 0 failed (exit code 1)" in result.stderr
