"""A spec's start command run here, once per "host", with the variables its engine would set (``--rehearse``).

Every host is this machine (``127.0.0.1``): SkyPilot's ``run`` gets ``SKYPILOT_NODE_RANK``/``SKYPILOT_NODE_IPS``/
``SKYPILOT_NUM_NODES``; the JobSet's container command gets ``JOB_COMPLETION_INDEX`` and its coordinator's DNS name
pointed at loopback (what the headless service resolves to on a cluster); the sbatch script runs under a stand-in
``srun`` that starts one task per node here with ``SLURM_PROCID``/``SLURM_NTASKS``/``SLURM_NODELIST``. Only a cpu
target is rehearsed: the other devices' hosts are not this machine.
"""

from __future__ import annotations

import os
import random
import signal
import socket
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

from anydevice.errors import UsageError
from anydevice.launch_specs import jobset, skypilot, slurm
from anydevice.launch_specs.plan import Plan

LOOPBACK = "127.0.0.1"
FAKE_SRUN = """#!/bin/bash
# srun's stand-in for a rehearsal: one task per node of the job (SLURM_NNODES), all on this machine
while [[ $# -gt 0 && $1 == -* ]]; do shift; done  # srun's own options
nodes=${SLURM_NNODES:-1}
pids=()
for ((i = 0; i < nodes; i++)); do
  SLURM_STEP_ID=0 SLURM_PROCID=$i SLURM_LOCALID=0 SLURM_NODEID=$i SLURM_NTASKS=$nodes "$@" &
  pids+=($!)
done
status=0
for pid in "${pids[@]}"; do wait "$pid" || status=$?; done
exit $status
"""


@dataclass(frozen=True)
class HostRun:
    """One rehearsed host (for SLURM: the whole batch script) and what it printed."""

    host: int
    returncode: int
    stdout: str
    stderr: str


def environment(extra: dict[str, str]) -> dict[str, str]:
    """This process's environment with ``anydevice`` (this interpreter's) first on ``PATH``, plus ``extra``."""
    env = {k: v for k, v in os.environ.items() if k not in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT")}
    env["PATH"] = os.pathsep.join([str(Path(sys.executable).parent), env.get("PATH", "")])
    env.update(extra)
    return env


def require_cpu(plan: Plan) -> None:
    """Refuse to rehearse a target whose hosts are not this machine."""
    if plan.target.device != "cpu":
        raise UsageError(
            f"--rehearse runs every host on this machine, so it takes a cpu target, not {plan.target.text}.",
            f"Rehearse with --target cpu:1x{plan.target.hosts} (the same spec with the cpu device), then write the real one.",
        )


def free_slurm_job_id() -> int:
    """A job id whose derived rendezvous port (``PORT_BASE + id % PORT_SPAN``) is free here now."""
    from anydevice.distributed.slurm import PORT_BASE, PORT_SPAN

    for _ in range(64):
        job_id = random.randrange(1, PORT_SPAN)
        with socket.socket() as sock:
            try:
                sock.bind((LOOPBACK, PORT_BASE + job_id))
            except OSError:
                continue
        return job_id
    raise UsageError("No free port for a SLURM rehearsal's rendezvous.", "Try again when fewer ports are taken.")


def rehearse(engine: str, plan: Plan, timeout: float = 300.0) -> list[HostRun]:
    """Run ``plan``'s spec for ``engine`` here, every host at once; one :class:`HostRun` per host (SLURM: one)."""
    require_cpu(plan)
    if engine == "slurm":
        return [_rehearse_slurm(plan, timeout)]
    hosts = plan.target.hosts
    if engine == "skypilot":
        script = skypilot.run_script(plan)
        envs = [skypilot.rehearsal_env(plan, h, hosts, LOOPBACK) for h in range(hosts)]
    else:
        script = jobset.command(plan)
        envs = [jobset.rehearsal_env(plan, h, hosts, LOOPBACK) for h in range(hosts)]
    children = [
        subprocess.Popen(
            ["bash", "-c", script],
            env=environment({**plan.device_env, **env}),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            stdin=subprocess.DEVNULL,
            text=True,
            start_new_session=True,  # a host and everything it started end together on a timeout
        )
        for env in envs
    ]
    return [_finish(h, child, timeout) for h, child in enumerate(children)]


def _rehearse_slurm(plan: Plan, timeout: float) -> HostRun:
    with tempfile.TemporaryDirectory(prefix="anydevice-rehearsal-") as tmp:
        bin_dir = Path(tmp) / "bin"
        bin_dir.mkdir()
        srun = bin_dir / "srun"
        srun.write_text(FAKE_SRUN)
        srun.chmod(0o755)
        batch = Path(tmp) / "job.sbatch"
        batch.write_text(slurm.script(plan, ""))
        env = environment(slurm.rehearsal_env(plan, plan.target.hosts, free_slurm_job_id()))
        env["PATH"] = os.pathsep.join([str(bin_dir), env["PATH"]])
        child = subprocess.Popen(
            ["bash", str(batch)],
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            stdin=subprocess.DEVNULL,
            text=True,
            start_new_session=True,
        )
        return _finish(0, child, timeout)


def _finish(host: int, child: subprocess.Popen[str], timeout: float) -> HostRun:
    try:
        out, err = child.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(child.pid, signal.SIGKILL)
        out, err = child.communicate()
        err += f"\nanydevice: the rehearsal's host {host} did not end within {timeout:g} s and was stopped."
    return HostRun(host, child.returncode, out, err)
