"""anydevice.integrations.slurm on submitit's local executor: the main job with 2 tasks, and a preemption resumed."""

from __future__ import annotations

import json
import os
import signal
import time
from pathlib import Path

import pytest

pytest.importorskip("submitit")

from anydevice.errors import DistributedError
from anydevice.integrations import slurm
from tests.utils import TRAIN

ARGS = ["--d-model", "32", "--layers", "1", "--batch-size", "4", "--seq-len", "32", "--log-every", "0"]


@pytest.fixture(autouse=True)
def _cpu_job(monkeypatch: pytest.MonkeyPatch) -> None:
    """The tasks inherit this environment: cpu, one thread each, no launcher's variables."""
    for name in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT", "SLURM_PROCID"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    monkeypatch.setenv("ANYDEVICE_QUIET", "1")


def _rows(job: object) -> list[dict[str, object]]:
    out = job.stdout() or ""  # type: ignore[attr-defined]
    return [json.loads(line) for line in out.splitlines() if line.startswith("{")]


def test_each_device_asks_slurm_for_its_own_resource() -> None:
    assert slurm.device_resources("cuda:1", 4) == {"slurm_gpus_per_task": 1}
    assert slurm.device_resources("tpu", 4) == {"slurm_gres": "tpu:4"}  # the plugin's declared resource
    assert slurm.device_resources("neuron", 2) == {"slurm_gres": "neuron_cores:2"}
    assert slurm.device_resources("cpu", 8) == {}


def test_bad_requests_are_refused_before_submitting(tmp_path: Path) -> None:
    with pytest.raises(DistributedError, match="No script at"):
        slurm.submit(tmp_path / "missing.py", cluster="local", folder=tmp_path)
    with pytest.raises(DistributedError, match="local executor runs one node"):
        slurm.submit(TRAIN, nodes=2, cluster="local", folder=tmp_path, device="cpu")
    with pytest.raises(DistributedError, match="tasks_per_node must be at least 1"):
        slurm.submit(TRAIN, tasks_per_node=0, cluster="local", folder=tmp_path, device="cpu")


def test_import_anydevice_does_not_import_submitit() -> None:
    import subprocess
    import sys

    code = "import anydevice, sys; print('submitit' in sys.modules)"
    assert subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.strip() == "False"


@pytest.mark.slow
def test_the_main_job_runs_as_one_world_of_two_tasks(tmp_path: Path) -> None:
    job = slurm.submit(TRAIN, "--steps", "8", *ARGS, tasks_per_node=2, device="cpu", cluster="local", folder=tmp_path)
    job.results()
    (row,) = _rows(job)  # rank 0's stdout: the job's one result line
    assert (row["world_size"], row["trained_steps"], row["replicas_agree"]) == (2, 8, True)


def _task_pids(controller: int) -> list[int]:
    children = Path(f"/proc/{controller}/task/{controller}/children")
    return [int(pid) for pid in children.read_text().split()] if children.exists() else []


@pytest.mark.slow
def test_a_preempted_job_is_requeued_and_resumes_to_the_uninterrupted_final_loss(tmp_path: Path) -> None:
    steps = ["--steps", "60", "--checkpoint-every", "10"]
    reference = slurm.submit(TRAIN, *steps, *ARGS, tasks_per_node=2, device="cpu", cluster="local", folder=tmp_path / "a")
    reference.results()
    (full,) = _rows(reference)

    ckpt = tmp_path / "ckpt"
    job = slurm.submit(
        TRAIN, *steps, *ARGS, tasks_per_node=2, device="cpu", cluster="local", folder=tmp_path / "b", checkpoint_dir=ckpt
    )
    deadline = time.monotonic() + 120
    while not (ckpt / "step-10.pt").exists():
        assert time.monotonic() < deadline and not job.done(), job.stderr()
        time.sleep(0.05)
    pids = _task_pids(job._process.pid)  # type: ignore[attr-defined]
    assert len(pids) == 2
    for pid in pids:  # what SLURM does on preemption: the signal to every task
        os.kill(pid, signal.SIGUSR2)
    job.results()
    rows = _rows(job)
    assert len(rows) == 1, job.stdout()  # the first attempt never finished
    row = rows[0]
    assert row["resumed_from"] is not None and Path(str(row["resumed_from"])).parent == ckpt
    assert int(row["trained_steps"]) < 60  # it did not start over
    assert row["last_loss"] == pytest.approx(full["last_loss"], abs=1e-6)
    assert row["param_checksum"] == full["param_checksum"]
    log = job.stderr() or ""  # rank 0's, both attempts
    assert "this job is preempted" in log and log.count("model tiny:") == 2  # caught the signal, started again
