"""Each engine's spec started here as its engine would start it: two "hosts" on 127.0.0.1, cpu, the main job.

The test reads the written spec back (a YAML parser, the sbatch file itself) and plays the engine: SkyPilot runs
``run`` on each host with ``SKYPILOT_NODE_RANK``/``SKYPILOT_NODE_IPS``/``SKYPILOT_NUM_NODES``; Kubernetes runs the
container's command in each pod with its ``env`` and ``JOB_COMPLETION_INDEX`` (the coordinator's DNS name is the one
thing loopback cannot give: it is pointed at 127.0.0.1, as the headless service's record would be); sbatch runs the
script once with the job's variables and its ``srun`` is a stand-in that starts one task per node here. Every
engine must train the same two-rank job as ``anydevice run -n 2`` on one host: the same losses and weights.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.utils import REPO, TRAIN, anydevice_cli, child_env, cli_in_process, free_port

yaml = pytest.importorskip("yaml")

TINY = ("--steps", "3", "--d-model", "16", "--layers", "1", "--batch-size", "4", "--seq-len", "16", "--log-every", "0")
HOSTS = 2
FAKE_SRUN = r"""#!/bin/bash
# srun inside a batch job: one task per node of the allocation, here all on this machine
while [[ $1 == -* ]]; do shift; done
pids=()
for ((i = 0; i < SLURM_NNODES; i++)); do
  SLURM_STEP_ID=0 SLURM_PROCID=$i SLURM_LOCALID=0 SLURM_NODEID=$i SLURM_NTASKS=$SLURM_NNODES "$@" &
  pids+=($!)
done
rc=0
for pid in "${pids[@]}"; do wait "$pid" || rc=$?; done
exit $rc
"""


def _spec(engine: str, tmp_path: Path, *extra: str) -> Path:
    out = tmp_path / f"spec.{engine}"
    result = cli_in_process(
        "launch", str(TRAIN), *TINY, "--target", f"cpu:1x{HOSTS}", "--emit", engine, "--out", str(out), *extra
    )
    assert result.returncode == 0, result.stderr
    return out


def _env(extra: dict[str, str]) -> dict[str, str]:
    """A host's environment: anydevice (this interpreter's) on PATH, as the install step leaves it."""
    env = child_env(extra)
    env["PATH"] = os.pathsep.join([str(Path(sys.executable).parent), env["PATH"]])
    return env


def _hosts(script: str, envs: list[dict[str, str]]) -> list[subprocess.CompletedProcess[str]]:
    """``script`` started by bash on every host at once, as the engine does; each host's output."""
    children = [
        subprocess.Popen(
            ["bash", "-c", script], env=_env(env), cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
        )
        for env in envs
    ]
    done = []
    for child in children:
        out, err = child.communicate(timeout=240)
        done.append(subprocess.CompletedProcess(child.args, child.returncode, out, err))
    return done


def _result(runs: list[subprocess.CompletedProcess[str]]) -> dict[str, Any]:
    """The job's one JSON line: printed by the main rank (host 0) only."""
    assert [r.returncode for r in runs] == [0] * len(runs), [r.stderr[-2000:] for r in runs]
    lines = [line for r in runs for line in r.stdout.splitlines() if line.startswith("{")]
    assert len(lines) == 1, [r.stdout for r in runs]
    row: dict[str, Any] = json.loads(lines[0])
    return row


@pytest.fixture(scope="module")
def one_host() -> dict[str, Any]:
    """The same job as two ranks on one host (``anydevice run -n 2``): what every engine's two hosts must train."""
    result = anydevice_cli("run", "-n", "2", str(TRAIN), *TINY, env={"ANYDEVICE": "cpu"}, timeout=240)
    assert result.returncode == 0, result.stderr
    row: dict[str, Any] = json.loads(result.stdout.strip().splitlines()[-1])
    return row


def _same_job(row: dict[str, Any], one_host: dict[str, Any]) -> None:
    assert (row["world_size"], row["trained_steps"], row["replicas_agree"]) == (2, 3, True)
    assert row["losses"] == one_host["losses"]
    assert row["last_loss_by_rank"] == one_host["last_loss_by_rank"]
    assert row["param_checksum"] == one_host["param_checksum"]


@pytest.mark.slow
def test_skypilot_run_trains_across_two_hosts(tmp_path: Path, one_host: dict[str, Any]) -> None:
    task = yaml.safe_load(_spec("skypilot", tmp_path, "--port", str(free_port())).read_text())
    assert task["num_nodes"] == HOSTS
    ips = "\n".join(["127.0.0.1"] * HOSTS)
    envs = [
        {**task["envs"], "SKYPILOT_NODE_RANK": str(h), "SKYPILOT_NODE_IPS": ips, "SKYPILOT_NUM_NODES": str(HOSTS)}
        for h in range(HOSTS)
    ]
    _same_job(_result(_hosts(task["run"], envs)), one_host)


@pytest.mark.slow
def test_jobset_pods_train_across_two_hosts(tmp_path: Path, one_host: dict[str, Any]) -> None:
    spec = yaml.safe_load(_spec("jobset", tmp_path, "--port", str(free_port())).read_text())
    job = spec["spec"]["replicatedJobs"][0]["template"]["spec"]
    (container,) = job["template"]["spec"]["containers"]
    assert container["command"][:2] == ["bash", "-c"]
    pod_env = {e["name"]: e["value"] for e in container["env"]}
    assert pod_env["ANYDEVICE_COORDINATOR"] == f"{spec['metadata']['name']}-workers-0-0.{spec['metadata']['name']}"
    envs = [{**pod_env, "ANYDEVICE_COORDINATOR": "127.0.0.1", "JOB_COMPLETION_INDEX": str(i)} for i in range(job["parallelism"])]
    _same_job(_result(_hosts(container["command"][2], envs)), one_host)


def _slurm_job_id() -> int:
    """A job id whose rendezvous port (anydevice derives 15000 + id % 15000) is free here."""
    for job_id in range(4000 + os.getpid() % 9000, 15000):
        with socket.socket() as sock:
            try:
                sock.bind(("127.0.0.1", 15000 + job_id))
            except OSError:
                continue
            return job_id
    raise AssertionError("no free port from 15000 to 29999")


@pytest.mark.slow
def test_the_sbatch_script_trains_across_two_nodes_under_srun(tmp_path: Path, one_host: dict[str, Any]) -> None:
    batch = _spec("slurm", tmp_path)
    nodes = int(next(line for line in batch.read_text().splitlines() if line.startswith("#SBATCH --nodes=")).split("=")[1])
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "srun").write_text(FAKE_SRUN)
    (bin_dir / "srun").chmod(0o755)
    env = _env(
        {
            "SLURM_JOB_ID": str(_slurm_job_id()),
            "SLURM_NNODES": str(nodes),
            "SLURM_NTASKS": str(nodes),
            "SLURM_NTASKS_PER_NODE": "1",
            "SLURM_NODELIST": ",".join(["localhost"] * nodes),
            "SLURM_PROCID": "0",  # the batch script itself: no SLURM_STEP_ID, so not a task
        }
    )
    env["PATH"] = os.pathsep.join([str(bin_dir), env["PATH"]])
    run = subprocess.run(["bash", str(batch)], env=env, cwd=REPO, capture_output=True, text=True, timeout=240)
    _same_job(_result([run]), one_host)


def test_rehearse_takes_only_a_cpu_target() -> None:
    result = cli_in_process("launch", str(TRAIN), "--target", "cuda:h100x8x2", "--emit", "slurm", "--rehearse")
    assert result.returncode == 2
    assert "--rehearse runs every host on this machine, so it takes a cpu target, not cuda:h100-8x2" in result.stderr
    assert "--target cpu:1x2" in result.stderr


@pytest.mark.slow
def test_rehearse_runs_the_written_spec_here(tmp_path: Path, one_host: dict[str, Any]) -> None:
    """``anydevice launch ... --rehearse``: the user's own rehearsal prints the main rank's line, the same job."""
    out = tmp_path / "job.sbatch"
    result = anydevice_cli(
        "launch", str(TRAIN), *TINY, "--target", "cpu:1x2", "--emit", "slurm", "--out", str(out), "--rehearse", timeout=300
    )
    assert result.returncode == 0, result.stderr
    assert "anydevice: rehearsed slurm on 2 host(s) here: ok" in result.stderr
    _same_job(json.loads(result.stdout.strip().splitlines()[-1]), one_host)
