"""Sharded checkpoints across ranks (real `anydevice run`, gloo on CPU): FSDP2 saved by 2 ranks reshards on load.

The main job's FSDP2 run, SIGKILLed after step 10, resumes from its DCP checkpoint of step 8 and
trains steps 9-12 to the same losses and the same parameters, bit for bit, as an uninterrupted run;
the same checkpoint then resumes a 1-rank run.
"""

from __future__ import annotations

import pytest

from tests.distributed.helpers import TRAIN, WORKERS, anydevice_run, python

pytestmark = pytest.mark.torch_version_sensitive  # docs/architecture.md, "Which tests the core lanes run"

WORKER = WORKERS / "dcp_checkpoint.py"
ARGS = ["--steps", "12", "--d-model", "32", "--layers", "1", "--batch-size", "8", "--seq-len", "32", "--log-every", "0"]
FSDP = [*ARGS, "--parallel", "fsdp"]


def main_row(rows: list[dict]) -> dict:
    return next(row for row in rows if row.get("rank", 0) == 0)


@pytest.mark.slow
def test_fsdp_checkpoint_of_2_ranks_loads_into_1_process_and_into_2_ranks(tmp_path):
    saved = anydevice_run("-n", "2", WORKER, "save", tmp_path / "ckpt", "fsdp", timeout=300)
    assert saved.returncode == 0, saved.stderr
    reference = saved.by_rank()[0]
    assert sorted(p.name for p in (tmp_path / "ckpt").iterdir()) == [
        ".anydevice-checkpoint",
        ".metadata",
        "__0_0.distcp",
        "__1_0.distcp",
    ]
    assert [p.name for p in tmp_path.iterdir()] == ["ckpt"]  # no temporary directory left

    single = python(WORKER, "load", tmp_path / "ckpt", "none", timeout=300)  # no launcher, no process group
    assert single.returncode == 0, single.stderr
    row = single.json_lines()[0]
    assert (row["step"], row["note"]) == (3, "three steps")
    assert row["digest"] == reference["digest"]  # every parameter, resharded from 2 shards into 1 tensor
    assert row["digest_after_step"] == pytest.approx(reference["digest_after_step"], rel=1e-9)  # optimizer state too

    again = anydevice_run("-n", "2", WORKER, "load", tmp_path / "ckpt", "fsdp", timeout=300)
    assert again.returncode == 0, again.stderr
    assert {r: (row["digest"], row["step"]) for r, row in again.by_rank().items()} == {
        r: (reference["digest"], 3) for r in (0, 1)
    }


@pytest.mark.slow
def test_killed_fsdp_run_resumes_from_its_dcp_checkpoint_to_the_same_losses(tmp_path):
    reference = anydevice_run("-n", "2", TRAIN, *FSDP, timeout=300)
    assert reference.returncode == 0, reference.stderr
    full = main_row(reference.json_lines())

    ckpt = ["--checkpoint-dir", tmp_path, "--checkpoint-every", "4"]
    killed = anydevice_run("-n", "2", TRAIN, *FSDP, *ckpt, "--crash-at-step", "10", timeout=300)
    assert killed.returncode != 0 and "injected crash after step 10" in killed.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["step-4", "step-8"]  # complete DCP directories only

    resumed = anydevice_run("-n", "2", TRAIN, *FSDP, *ckpt, "--crash-at-step", "10", timeout=300)
    assert resumed.returncode == 0, resumed.stderr
    row = main_row(resumed.json_lines())
    assert row["resumed_from"].endswith("step-8")
    assert row["trained_steps"] == 4  # steps 9..12
    assert row["losses"] == full["losses"][8:]  # step for step, bit for bit
    assert row["param_checksum"] == full["param_checksum"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["step-12", "step-4", "step-8"]

    one = python(TRAIN, *FSDP, "--steps", "14", *ckpt, timeout=300)  # the same checkpoints, 1 rank, no launcher
    assert one.returncode == 0, one.stderr
    row = main_row(one.json_lines())
    assert row["resumed_from"].endswith("step-12") and row["trained_steps"] == 2
    assert row["losses"][0] < full["losses"][0] - 0.5  # it continues the trained model, not a fresh one


@pytest.mark.slow
def test_resume_skips_broken_and_foreign_checkpoints_and_says_why(tmp_path):
    ckpt = ["--checkpoint-dir", tmp_path, "--checkpoint-every", "4", "--steps", "8"]
    first = python(TRAIN, *ARGS, *ckpt, timeout=300)
    assert first.returncode == 0, first.stderr
    good = (tmp_path / "step-8.pt").read_bytes()
    (tmp_path / "step-12.pt").write_bytes(good[: len(good) // 2])  # truncated newest
    (tmp_path / "step-11.pt").write_bytes(b"\x00garbage" * 100)
    (tmp_path / "step-10.pt").touch()  # empty
    (tmp_path / "step-final.pt").write_bytes(good)  # not ours: ignored, not int('final')
    (tmp_path / "notes.txt").write_text("hello")
    (tmp_path / "step-9").mkdir()  # a sharded checkpoint's name: not this (unsharded) job's format

    resumed = python(TRAIN, *ARGS, *ckpt[:-2], "--steps", "10", timeout=300)
    assert resumed.returncode == 0, resumed.stderr
    row = main_row(resumed.json_lines())
    assert row["resumed_from"].endswith("step-8.pt") and row["trained_steps"] == 2
    skipped = [line for line in resumed.stderr.splitlines() if line.startswith("resume: skipped")]
    assert skipped == [
        f"resume: skipped {tmp_path / 'step-12.pt'}: Checkpoint {tmp_path / 'step-12.pt'} is corrupt or truncated "
        "(truncated: the end of the archive is missing).",
        f"resume: skipped {tmp_path / 'step-11.pt'}: Checkpoint {tmp_path / 'step-11.pt'} is corrupt or truncated "
        "(UnpicklingError: not a torch.save archive).",
        f"resume: skipped {tmp_path / 'step-10.pt'}: Checkpoint {tmp_path / 'step-10.pt'} is empty (0 bytes): "
        "it was never written completely.",
    ]


@pytest.mark.slow
def test_a_target_rank_0_refuses_is_an_error_on_every_rank_and_is_left_untouched(tmp_path):
    ckpt = tmp_path / "ckpt"
    ckpt.mkdir()
    (ckpt / "notes.txt").write_text("my notes")
    run = anydevice_run("-n", "2", WORKERS / "dcp_save_refused.py", ckpt, timeout=180)
    assert run.returncode == 0, run.stderr
    refusal = f"Cannot save checkpoint {ckpt}: it holds notes.txt, which a checkpoint does not; nothing in it was touched."
    assert run.by_rank() == {
        0: {"rank": 0, "error": f"CheckpointError: {refusal}"},
        1: {"rank": 1, "error": f"CheckpointError: Rank 0 could not start the checkpoint save: {refusal}"},
    }
    assert [p.name for p in ckpt.iterdir()] == ["notes.txt"] and [p.name for p in tmp_path.iterdir()] == ["ckpt"]
