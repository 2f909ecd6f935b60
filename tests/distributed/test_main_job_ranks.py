"""The main job under `anydevice run -n 2`: one JSON line for the job, logs on stderr, FSDP2, divergence."""

from __future__ import annotations

import pytest

from tests.distributed.helpers import TRAIN, anydevice_run

SMALL = ["--d-model", "32", "--layers", "1", "--batch-size", "4", "--seq-len", "32"]


@pytest.mark.slow
def test_fsdp_job_prints_one_json_line_and_logs_from_the_main_rank_only():
    result = anydevice_run("-n", "2", TRAIN, "--parallel", "fsdp", "--steps", "20", "--log-every", "5", *SMALL, timeout=240)
    assert result.returncode == 0, result.stderr
    lines = result.stdout.strip().splitlines()
    assert len(lines) == 1, result.stdout  # rank 1 prints nothing on stdout
    row = result.json_lines()[0]
    assert (row["world_size"], row["parallel"], row["model"], row["trained_steps"]) == (2, "fsdp", "tiny", 20)
    assert row["replicas_agree"] is None  # FSDP ranks hold shards: the checksum is the sum of their parts
    assert row["last_loss"] < row["first_loss"]
    assert row["tokens_per_s"] > 0 and row["mfu"] is None  # a CPU has no known peak
    logs = [line for line in result.stderr.splitlines() if line.startswith("step ")]
    assert [line.split()[1] for line in logs] == ["5/20", "10/20", "15/20", "20/20"]  # once per window, one rank
    assert all("steps/s" in line and "left" in line for line in logs)


@pytest.mark.slow
def test_a_diverging_two_rank_job_exits_non_zero_with_one_error_line():
    result = anydevice_run("-n", "2", TRAIN, "--lr", "1e12", "--steps", "4", "--log-every", "2", *SMALL, timeout=240)
    assert result.returncode != 0
    assert result.stdout.strip() == ""  # no result for a failed job
    errors = [line for line in result.stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and "the loss is not finite" in errors[0], result.stderr
