"""SLURM jobs through submitit: a script or function on nodes x tasks, the device's resources, requeued on preemption.

    pip install submitit

    from anydevice.integrations.slurm import submit

    job = submit("examples/train.py", "--steps", "1000", nodes=2, tasks_per_node=4, device="cuda",
                 checkpoint_dir="ckpt", folder="slurm-logs", timeout_min=240, slurm_partition="gpu")
    job.wait()

Every task runs with ``ANYDEVICE`` set to the device resolved here (by its name alone, as for Ray:
a login node without the device can submit) and joins one process group: ``ad.distributed.init()``
in the script finds rank, world size, local rank and a rendezvous on the first node (port derived
from the job id). The job asks for the device's resources (its plugin's declared Ray resource):
``--gpus-per-task=1`` for a GPU (cuda), the resource as a generic one (``--gres=tpu:T``) otherwise,
nothing for cpu.
On preemption or timeout (submitit's signal) the job is requeued with the same command and the same
``checkpoint_dir``, so a script that resumes from its newest checkpoint there (``examples/train.py
--checkpoint-dir``) continues where the last checkpoint left it. ``cluster="local"`` runs the same
job on this machine with submitit's local executor (several tasks, no SLURM).
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from anydevice import settings
from anydevice.distributed.slurm import PORT_BASE, PORT_SPAN
from anydevice.errors import DistributedError, UnsupportedFeatureError
from anydevice.runtime.script_main import run_as_main

if TYPE_CHECKING:
    import submitit

CHECKPOINT_FLAG = "--checkpoint-dir"
"""How a script is told its checkpoint directory (``examples/train.py``'s flag); ``checkpoint_flag=`` changes it."""


def _submitit() -> Any:
    try:
        import submitit
    except ImportError as exc:
        raise UnsupportedFeatureError(f"submitit is not installed ({exc}).", "pip install submitit") from exc
    return submitit


def device_resources(device: str, tasks_per_node: int) -> dict[str, Any]:
    """submitit's ``AutoExecutor`` parameters asking SLURM for ``device`` on every task (none for cpu)."""
    from anydevice.integrations.ray import worker_resource

    resource = worker_resource(device)
    if resource == "GPU":  # what Ray calls GPU, SLURM binds per task
        return {"slurm_gpus_per_task": 1}
    if resource is None:
        return {}
    return {"slurm_gres": f"{resource.lower()}:{tasks_per_node}"}


def rendezvous_env(job: Any) -> dict[str, str]:
    """torchrun's variables for this task of a submitit job (``submitit.JobEnvironment``): one world over its tasks."""
    digits = "".join(ch for ch in str(job.job_id) if ch.isdigit()) or "0"
    master = "127.0.0.1" if job.num_nodes == 1 else job.hostnames[0]
    return {
        settings.RANK.name: str(job.global_rank),
        settings.WORLD_SIZE.name: str(job.num_tasks),
        settings.LOCAL_RANK.name: str(job.local_rank),
        settings.LOCAL_WORLD_SIZE.name: str(job.num_tasks // max(job.num_nodes, 1)),
        settings.MASTER_ADDR.name: master,
        settings.MASTER_PORT.name: str(PORT_BASE + int(digits) % PORT_SPAN),
    }


class Task:
    """One task of the job (what submitit pickles); requeued as itself on preemption (``checkpoint``)."""

    def __init__(
        self,
        target: str | Callable[..., Any],
        args: Sequence[Any],
        env: Mapping[str, str],
        checkpoint_dir: Path | None,
        checkpoint_flag: str | None,
    ) -> None:
        self.target, self.args, self.env = target, tuple(args), dict(env)
        self.checkpoint_dir, self.checkpoint_flag = checkpoint_dir, checkpoint_flag

    def __call__(self) -> Any:
        os.environ.update(self.env)
        os.environ.update(rendezvous_env(_submitit().JobEnvironment()))
        if callable(self.target):
            extra = {"checkpoint_dir": self.checkpoint_dir} if self.checkpoint_dir is not None else {}
            return self.target(*self.args, **extra)
        return self._run_script(str(self.target))

    def _run_script(self, script: str) -> None:
        argv = [script, *map(str, self.args)]
        if self.checkpoint_dir is not None and self.checkpoint_flag:
            argv += [self.checkpoint_flag, str(self.checkpoint_dir)]
        sys.argv = argv
        sys.path.insert(0, str(Path(script).resolve().parent))
        try:
            run_as_main(script)  # its objects live on as ``__main__``, as under ``python SCRIPT``
        except SystemExit as exc:
            if exc.code not in (0, None):
                raise  # a failed task (or submitit's requeue exit) ends the process with its status
        return None

    def checkpoint(self, *args: Any, **kwargs: Any) -> Any:
        """Called by submitit on preemption/timeout: requeue this same task (it resumes from ``checkpoint_dir``)."""
        return _submitit().helpers.DelayedSubmission(self, *args, **kwargs)


def executor(
    folder: str | Path,
    *,
    nodes: int = 1,
    tasks_per_node: int = 1,
    device: str | None = None,
    cluster: str | None = None,
    timeout_min: int = 60,
    **parameters: Any,
) -> submitit.AutoExecutor:
    """A submitit ``AutoExecutor`` for ``nodes`` x ``tasks_per_node`` tasks with the device's resources.

    ``cluster`` is submitit's (``"slurm"``, ``"local"``, None for SLURM when ``sbatch`` is here);
    ``parameters`` go to ``update_parameters`` (``slurm_partition=``, ``slurm_account=``, ...).
    """
    from anydevice.integrations.ray import resolve_device

    for name, value in (("nodes", nodes), ("tasks_per_node", tasks_per_node), ("timeout_min", timeout_min)):
        if value < 1:
            raise DistributedError(f"{name} must be at least 1, got {value}.")
    if cluster == "local" and nodes != 1:
        raise DistributedError(f"The local executor runs one node; nodes={nodes} was asked for.", "Pass nodes=1 with 'local'.")
    ex: submitit.AutoExecutor = _submitit().AutoExecutor(folder=str(folder), cluster=cluster)
    resources = device_resources(resolve_device(device), tasks_per_node)
    ex.update_parameters(nodes=nodes, tasks_per_node=tasks_per_node, timeout_min=timeout_min, **{**resources, **parameters})
    return ex


def submit(
    target: str | Path | Callable[..., Any],
    *args: Any,
    nodes: int = 1,
    tasks_per_node: int = 1,
    device: str | None = None,
    checkpoint_dir: str | Path | None = None,
    checkpoint_flag: str | None = CHECKPOINT_FLAG,
    folder: str | Path = "slurm-logs",
    cluster: str | None = None,
    timeout_min: int = 60,
    **parameters: Any,
) -> submitit.Job[Any]:
    """Submit a script (run as ``__main__`` with ``args``) or a function (called with ``args``) as one distributed job.

    With ``checkpoint_dir``, a script gets ``checkpoint_flag DIR`` appended to its arguments and a
    function gets ``checkpoint_dir=DIR``; on preemption the job is requeued with the same directory.
    Returns submitit's ``Job`` (``job.results()[0]`` is rank 0's return value).
    """
    from anydevice.integrations.ray import resolve_device, worker_env

    if not callable(target) and not Path(target).is_file():
        raise DistributedError(f"No script at {target}.", "Pass the path of a Python file, or a function.")
    ckpt = Path(checkpoint_dir).resolve() if checkpoint_dir is not None else None
    if ckpt is not None:
        ckpt.mkdir(parents=True, exist_ok=True)
    device = resolve_device(device)
    ex = executor(
        folder, nodes=nodes, tasks_per_node=tasks_per_node, device=device, cluster=cluster, timeout_min=timeout_min, **parameters
    )
    script = target if callable(target) else str(Path(target).resolve())
    job: submitit.Job[Any] = ex.submit(Task(script, args, worker_env(device), ckpt, checkpoint_flag))
    return job


__all__ = ["CHECKPOINT_FLAG", "Task", "device_resources", "executor", "rendezvous_env", "submit"]
