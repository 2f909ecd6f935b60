"""ad.checkpoint of a tensor-parallel model, resharded on load: TP=2 -> one process, TP=2 -> FSDP=2."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.distributed.helpers import WORKERS, anydevice_run, python

WORKER = WORKERS / "tp_checkpoint.py"


@pytest.fixture(scope="module")
def saved(tmp_path_factory: pytest.TempPathFactory) -> Path:
    directory = tmp_path_factory.mktemp("tp") / "ckpt"
    result = anydevice_run("-n", "2", WORKER, "save", directory, timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    assert {r["mesh"]["tp"] for r in result.json_lines()} == {2}
    return directory


def _assert_loaded(rows: list[dict[str, object]]) -> None:
    assert rows
    for row in rows:
        assert row["step"] == 1 and row["optim_steps"] == [1]
        assert row["max_diff"] == 0.0


@pytest.mark.slow
def test_tp2_checkpoint_loads_into_one_plain_process(saved: Path) -> None:
    result = python(WORKER, "load-plain", saved, timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    _assert_loaded(result.json_lines())


@pytest.mark.slow
def test_tp2_checkpoint_loads_into_fsdp_over_two_ranks(saved: Path) -> None:
    result = anydevice_run("-n", "2", WORKER, "load-fsdp", saved, timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    _assert_loaded(result.json_lines())
