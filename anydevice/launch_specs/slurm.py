"""The SLURM batch script (``sbatch job.sbatch``): one srun task per node, each an ``anydevice run`` of the node's processes.

``anydevice run`` inside an srun task reads the task as a node (:mod:`anydevice.distributed.slurm`): the node count
from ``SLURM_NTASKS``, its rank from ``SLURM_PROCID``, the rendezvous at the node list's first host on a port
derived from ``SLURM_JOB_ID`` (``MASTER_ADDR``/``MASTER_PORT`` exported in the script win). So the script says
nothing about ranks: ``srun anydevice run -n P SCRIPT`` on every node.
"""

from __future__ import annotations

import shlex

from anydevice.launch_specs.plan import Plan


def script(plan: Plan, header: str) -> str:
    """The batch script: ``#SBATCH`` lines from the target, the device variable, the install where missing, srun."""
    target = plan.target
    lines = [
        "#!/bin/bash",
        f"#SBATCH --job-name={plan.name}",
        f"#SBATCH --nodes={target.hosts}",
        "#SBATCH --ntasks-per-node=1",
        "#SBATCH --exclusive",
    ]
    if target.resource is not None and target.resource.endswith("/gpu") and target.chips_per_host:  # SLURM's gpu gres
        lines.append(f"#SBATCH --gpus-per-node={target.chips_per_host}")
    lines += [
        *(line.rstrip() for line in header.splitlines()),
        "set -euo pipefail",
        *(f"export {k}={shlex.quote(v)}" for k, v in plan.device_env.items()),
        f"command -v anydevice >/dev/null 2>&1 || srun --ntasks-per-node=1 {plan.install()}",
        f"srun {plan.start(None)}",
    ]
    return "\n".join(lines) + "\n"


def rehearsal_env(plan: Plan, hosts: int, job_id: int) -> dict[str, str]:
    """What sbatch sets for the batch script of a ``hosts``-node job on this machine."""
    return {
        "SLURM_JOB_ID": str(job_id),
        "SLURM_JOB_NAME": plan.name,
        "SLURM_NNODES": str(hosts),
        "SLURM_JOB_NUM_NODES": str(hosts),
        "SLURM_NTASKS": str(hosts),
        "SLURM_NTASKS_PER_NODE": "1",
        "SLURM_NODELIST": ",".join(["localhost"] * hosts),
        "SLURM_PROCID": "0",
    }
