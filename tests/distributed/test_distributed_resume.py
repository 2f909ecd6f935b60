"""Resumable training: a run SIGKILLed mid-way and rerun ends exactly where an uninterrupted run ends.

Compared, on CPU with seed 0 and one thread: the final loss (absolute tolerance 1e-6, in practice
bit-identical), the per-step losses of the steps both runs trained after the checkpoint (same
tolerance) and the parameter checksum (exact: every parameter bit for bit).
"""

from __future__ import annotations

import pytest

from tests.distributed.helpers import TRAIN, python

ARGS = ["--steps", "30", "--d-model", "32", "--layers", "1", "--batch-size", "8", "--seq-len", "32", "--log-every", "0"]


@pytest.mark.slow
def test_killed_run_resumes_to_the_same_final_loss(tmp_path):
    reference = python(TRAIN, *ARGS, timeout=180)
    assert reference.returncode == 0, reference.stderr
    full = reference.json_lines()[-1]

    ckpt = ["--checkpoint-dir", tmp_path, "--checkpoint-every", "10"]
    killed = python(TRAIN, *ARGS, *ckpt, "--crash-at-step", "25", timeout=180)
    assert killed.returncode == -9  # really killed (SIGKILL) after step 25, no clean shutdown
    assert killed.json_lines() == []
    assert sorted(p.name for p in tmp_path.glob("step-*.pt")) == ["step-10.pt", "step-20.pt"]  # steps 21-25 are lost
    assert not list(tmp_path.glob(".*.tmp"))  # atomic saves leave no partial files behind

    resumed = python(TRAIN, *ARGS, *ckpt, "--crash-at-step", "25", timeout=180)  # same command: resumes, no crash
    assert resumed.returncode == 0, resumed.stderr
    row = resumed.json_lines()[-1]
    assert row["resumed_from"].endswith("step-20.pt")
    assert row["trained_steps"] == 10  # steps 21..30
    assert row["last_loss"] == pytest.approx(full["last_loss"], abs=1e-6)
    assert row["losses"] == pytest.approx(full["losses"][20:], abs=1e-6)
    assert row["param_checksum"] == full["param_checksum"]
    assert full["last_loss"] < full["first_loss"]
