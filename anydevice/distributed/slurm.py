"""SLURM tasks as one process group: what ``srun`` sets, read as a launcher's rendezvous environment.

A script started by ``srun`` has ``SLURM_STEP_ID``, ``SLURM_PROCID``, ``SLURM_NTASKS``, ``SLURM_LOCALID``,
``SLURM_NODELIST`` and ``SLURM_JOB_ID`` but none of torchrun's variables. The batch script itself (``sbatch``
without ``srun``) has ``SLURM_PROCID=0`` and the job's ``SLURM_NTASKS`` but no ``SLURM_STEP_ID``: it is not a task,
and a process there is a world of one. :func:`srun_task` reads
them into an :class:`SrunTask` (rank, world size, local rank, the first node of the node list as the
master address, a port derived from the job id); :mod:`anydevice.distributed` and ``anydevice run``
use it when no launcher set ``RANK``/``WORLD_SIZE``/``LOCAL_RANK``. ``MASTER_ADDR``/``MASTER_PORT``
set by the job script win over the derived ones. Bad values are one :class:`DistributedError`.
"""

from __future__ import annotations

import argparse
import os
import re
from dataclasses import dataclass

from anydevice import settings
from anydevice.errors import DistributedError

PORT_BASE, PORT_SPAN = 15000, 15000
"""The derived port is ``PORT_BASE + job_id % PORT_SPAN``: below Linux's ephemeral range, the same on every task."""
_TORCHRUN = (settings.RANK, settings.WORLD_SIZE, settings.LOCAL_RANK)
_RANGE = re.compile(r"(\d+)(?:-(\d+))?")
MAX_NODES = 1_000_000
"""A node list naming more hosts than this is refused (the largest machines have about 160,000 nodes)."""
_FIX = "Start the tasks with srun inside an allocation (sbatch/salloc), or unset the stray SLURM_* variables."


@dataclass(frozen=True)
class SrunTask:
    """One ``srun`` task's place in the job."""

    rank: int
    world_size: int
    local_rank: int
    job_id: str
    nodes: tuple[str, ...]
    master_addr: str
    master_port: int
    local_world_size: int | None = None
    """Tasks on this node, when SLURM says (``SLURM_NTASKS_PER_NODE`` or ``SLURM_TASKS_PER_NODE``)."""

    def torchrun_env(self) -> dict[str, str]:
        """The variables torchrun would have set for this task (``env://`` rendezvous reads them)."""
        env = {
            settings.RANK.name: str(self.rank),
            settings.WORLD_SIZE.name: str(self.world_size),
            settings.LOCAL_RANK.name: str(self.local_rank),
            settings.MASTER_ADDR.name: self.master_addr,
            settings.MASTER_PORT.name: str(self.master_port),
        }
        if self.local_world_size is not None:
            env[settings.LOCAL_WORLD_SIZE.name] = str(self.local_world_size)
        return env


def expand_nodelist(text: str) -> list[str]:
    """Host names of a SLURM node list, in SLURM's order: ``node[01-04,07]``, ``a[1-3,5],b7``, ``r[1-2]n[1-2]``.

    Zero padding is kept (the width of a range's first bound). A malformed list raises
    :class:`~anydevice.errors.DistributedError`.
    """
    hosts: list[str] = []
    for entry in _split_top_level(text):
        hosts.extend(_expand_entry(entry, text))
        if len(hosts) > MAX_NODES:
            raise DistributedError(f"SLURM_NODELIST={text!r} names more than the {MAX_NODES} nodes a node list may name.", _FIX)
    if not hosts:
        raise DistributedError(f"SLURM_NODELIST={text!r} names no node.", _FIX)
    return hosts


def _split_top_level(text: str) -> list[str]:
    """``text`` split at the commas outside brackets."""
    parts, depth, start = [], 0, 0
    for i, char in enumerate(text):
        if char == "[":
            depth += 1
        elif char == "]":
            depth -= 1
        if depth not in (0, 1):
            raise DistributedError(f"SLURM_NODELIST={text!r} has unbalanced brackets.", _FIX)
        if char == "," and depth == 0:
            parts.append(text[start:i])
            start = i + 1
    if depth:
        raise DistributedError(f"SLURM_NODELIST={text!r} has an unclosed '['.", _FIX)
    parts.append(text[start:])
    if any(not part.strip() for part in parts):
        raise DistributedError(f"SLURM_NODELIST={text!r} has an empty entry.", _FIX)
    return [part.strip() for part in parts]


def _expand_entry(entry: str, text: str) -> list[str]:
    """One node-list entry (literals and bracket groups, any number of each) as host names."""
    names = [""]
    for literal, group in re.findall(r"([^\[\]]*)(?:\[([^\]]*)\])?", entry):
        if not literal and not group:
            continue
        options = [literal + n for n in _expand_group(group, text)] if group else [literal]
        if len(names) * len(options) > MAX_NODES:
            raise DistributedError(
                f"SLURM_NODELIST={text!r}: {entry} names {len(names) * len(options)} or more nodes, more than the "
                f"{MAX_NODES} a node list may name.",
                _FIX,
            )
        names = [name + option for name in names for option in options]
    return names


def _expand_group(group: str, text: str) -> list[str]:
    """The numbers of one bracket group (``01-04,07``), zero padding kept."""
    numbers: list[str] = []
    for part in group.split(","):
        match = _RANGE.fullmatch(part.strip())
        if match is None:
            raise DistributedError(f"SLURM_NODELIST={text!r}: [{group}] holds {part!r}, not a number or a range a-b.", _FIX)
        low, high = match.group(1), match.group(2) or match.group(1)
        if int(high) < int(low):
            raise DistributedError(f"SLURM_NODELIST={text!r}: the range {part} runs backwards.", _FIX)
        width = len(low) if low.startswith("0") else 0
        if int(high) - int(low) + 1 + len(numbers) > MAX_NODES:
            raise DistributedError(
                f"SLURM_NODELIST={text!r}: the range {part.strip()} names {int(high) - int(low) + 1} nodes, more than the "
                f"{MAX_NODES} a node list may name.",
                _FIX,
            )
        numbers.extend(str(n).zfill(width) for n in range(int(low), int(high) + 1))
    return numbers


def _int(setting: settings.Setting, low: int = 0) -> int:
    value = setting.get()
    if value is None:
        raise DistributedError(f"{setting.name} is not set, but SLURM_PROCID is: this is not a complete srun task.", _FIX)
    if not (value.isascii() and value.isdigit()) or int(value) < low:
        raise DistributedError(f"{setting.name}={value!r} is not a whole number of at least {low}.", _FIX)
    return int(value)


def _local_world_size(node_count: int) -> int | None:
    """Tasks on this node, from ``SLURM_TASKS_PER_NODE`` (``2(x3),1``) and ``SLURM_NODEID``, else ``SLURM_NTASKS_PER_NODE``;
    None when SLURM says neither."""
    per_node: list[int] = []
    for part in (settings.SLURM_TASKS_PER_NODE.get() or "").split(","):
        match = re.fullmatch(r"(\d+)(?:\(x(\d+)\))?", part.strip())
        if match is None:
            per_node = []
            break
        per_node += [int(match.group(1))] * int(match.group(2) or 1)
    node = settings.SLURM_NODEID.get() or ""
    if node.isdigit() and int(node) < len(per_node) == node_count:
        return per_node[int(node)]
    fixed = settings.SLURM_NTASKS_PER_NODE.get() or ""
    return int(fixed) if fixed.isascii() and fixed.isdigit() and int(fixed) > 0 else None


def in_batch_step() -> bool:
    """Inside a SLURM job but not in an srun step: the batch script itself (``SLURM_PROCID`` without ``SLURM_STEP_ID``)."""
    return settings.SLURM_PROCID.get() is not None and settings.SLURM_STEP_ID.get() is None


def srun_task() -> SrunTask | None:
    """This process's :class:`SrunTask`, or None when it is not an srun task (the batch script: no ``SLURM_STEP_ID``)
    or a launcher already set torchrun's variables.

    Raises :class:`~anydevice.errors.DistributedError` naming the variable for a bad SLURM value.
    """
    if settings.SLURM_PROCID.get() is None or in_batch_step() or any(s.get() is not None for s in _TORCHRUN):
        return None
    rank, world, local = _int(settings.SLURM_PROCID), _int(settings.SLURM_NTASKS, 1), _int(settings.SLURM_LOCALID)
    if rank >= world:
        raise DistributedError(f"SLURM_PROCID={rank} is not below SLURM_NTASKS={world}.", _FIX)
    nodelist = settings.SLURM_NODELIST.get()
    if not nodelist:
        raise DistributedError("SLURM_NODELIST is not set, but SLURM_PROCID is: the master node is unknown.", _FIX)
    nodes = tuple(expand_nodelist(nodelist))
    job_id = settings.SLURM_JOB_ID.get() or ""
    port_text = settings.MASTER_PORT.get()
    if port_text is None:
        port = PORT_BASE + _int(settings.SLURM_JOB_ID) % PORT_SPAN
    elif not (port_text.isdigit() and 1 <= int(port_text) <= 65535):
        raise DistributedError(f"MASTER_PORT={port_text!r} is not a port from 1 to 65535.", "Fix or unset it.")
    else:
        port = int(port_text)
    return SrunTask(
        rank=rank,
        world_size=world,
        local_rank=local,
        job_id=job_id,
        nodes=nodes,
        master_addr=settings.MASTER_ADDR.get() or nodes[0],
        master_port=port,
        local_world_size=_local_world_size(len(nodes)),
    )


def adopt() -> SrunTask | None:
    """Under srun (and no torchrun variables), set torchrun's variables from SLURM's; return the task (None otherwise).

    What ``ad.distributed.init()`` calls before it reads the launch environment.
    """
    task = srun_task()
    if task is not None:
        os.environ.update(task.torchrun_env())
    return task


def local_ranks(task: SrunTask, nproc: int) -> tuple[int, int]:
    """``(first local rank, local world size)`` of the ``nproc`` ranks ``anydevice run`` starts in ``task``.

    Several tasks on one node (``--ntasks-per-node=2``) each start ``nproc`` ranks: task ``SLURM_LOCALID=k``'s count
    their local rank from ``k x nproc``, and the node holds ``tasks on the node x nproc`` (torchrun's meaning of
    ``LOCAL_RANK``/``LOCAL_WORLD_SIZE``; the device index is the local rank modulo the devices the task sees, so
    devices bound per task (``--gpus-per-task``) and devices shared by the node's tasks both come out right).
    """
    tasks_here = task.local_world_size
    if tasks_here is None:
        if task.local_rank == 0:
            return 0, nproc  # one task on this node, as far as SLURM says
        raise DistributedError(
            f"SLURM_LOCALID={task.local_rank} says several srun tasks share this node, but neither SLURM_TASKS_PER_NODE "
            "(with SLURM_NODEID) nor SLURM_NTASKS_PER_NODE says how many: the ranks' local ranks cannot be counted.",
            "Start the tasks with srun (which sets them), or run one task per node (--ntasks-per-node=1).",
        )
    if task.local_rank >= tasks_here:
        raise DistributedError(f"SLURM_LOCALID={task.local_rank} is not below the {tasks_here} task(s) on this node.", _FIX)
    return task.local_rank * nproc, tasks_here * nproc


def srun_launch(args: argparse.Namespace) -> None:
    """``anydevice run`` as an srun task: one rendezvous "node" per task, met at the master node.

    Each task's ranks (``-n``) then join one world of ``SLURM_NTASKS x n``, global ranks offset by the task's
    ``SLURM_PROCID``; ``args.srun_task`` keeps the task for the local ranks (:func:`local_ranks`). Explicit
    ``--nnodes``, ``--node-rank`` or ``--rdzv-endpoint`` win, and a one-task job or ``-- command`` is left alone.
    """
    explicit = args.nnodes != 1 or args.node_rank is not None or args.rdzv_endpoint is not None
    if getattr(args, "command", None) or explicit:
        return
    task = srun_task()
    if task is None or task.world_size == 1:
        return
    args.nnodes, args.node_rank = task.world_size, task.rank
    args.rdzv_endpoint = f"{task.master_addr}:{task.master_port}"
    args.run_id = args.run_id or f"slurm-{task.job_id}"
    args.srun_task = task
