"""Probes for model parallelism: ``ad.distributed.parallelize`` really splitting a model, against the unsplit run.

Each probe starts :mod:`anydevice.compat_matrix.parallel_job` the way the device's lowering runs
(``Collectives.tensor_parallel``): ``"dtensor"`` under ``anydevice run -n N`` (one process per rank:
2 for tp, 4 for dp=2 x tp=2), ``"spmd"`` as one process over the host's devices (``CPU_NUM_DEVICES=4``
when unset, for PJRT CPU), ``""``: skipped with the plugin's refusal. The probe compares the split
run's logits and losses with the unsplit CPU run's and checks that the weights were split.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

import torch

from anydevice.compat_matrix.execute import ProbeContext
from anydevice.compat_matrix.probe import Probe, Skip
from anydevice.compat_matrix.schema import Stage

JOB = "anydevice.compat_matrix.parallel_job"
SUBPROCESS_TIMEOUT_S = 300
SPMD_DEVICES = "4"
_LAUNCHER_VARS = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT")


def _lowering(ctx: ProbeContext) -> str:
    """The device's declared lowering; a device that refuses tensor parallelism skips the probe."""
    kind = str(ctx.api("backend")().shims.collectives.tensor_parallel)
    if kind not in ("dtensor", "spmd"):
        raise Skip(f"the plugin declares no tensor parallelism here (Collectives.tensor_parallel={kind!r})")
    return kind


def _selection(ctx: ProbeContext) -> str:
    backend = ctx.api("backend")()
    return str(backend.name if backend.index is None else f"{backend.name}:{backend.index}")


def _job(ctx: ProbeContext, args: list[str], ranks: int | None, env: dict[str, str] | None = None) -> list[dict[str, Any]]:
    """Run the job (``ranks``: under ``anydevice run -n ranks``; None: one process); its result rows by rank."""
    run = [sys.executable, "-m", "anydevice", "run", "-n", str(ranks), "-m", JOB] if ranks else [sys.executable, "-m", JOB]
    full_env = {**os.environ, "ANYDEVICE": _selection(ctx), "ANYDEVICE_QUIET": "1", "OMP_NUM_THREADS": "1", **(env or {})}
    full_env.setdefault("CPU_NUM_DEVICES", SPMD_DEVICES)  # PJRT CPU's device count (other devices ignore it)
    full_env.pop("PYTHONUNBUFFERED", None)  # each rank's line leaves in one write
    for name in _LAUNCHER_VARS:
        full_env.pop(name, None)
    out = Path(tempfile.mkdtemp(prefix="job-", dir=ctx.tmp))
    with ctx.stage(Stage.EXECUTE):
        proc = subprocess.run(
            [*run, str(out), *args], capture_output=True, text=True, env=full_env, timeout=SUBPROCESS_TIMEOUT_S, cwd=ctx.tmp
        )
        rows = [json.loads(f.read_text()) for f in sorted(out.glob("rank*.json"))]
        if proc.returncode != 0 or len(rows) != (ranks or 1):
            tail = (proc.stderr.strip().splitlines() or ["(no output)"])[-1]
            raise RuntimeError(f"`{' '.join(run[2:] if ranks else run[1:])} {' '.join(args)}` exited {proc.returncode}: {tail}")
    print(proc.stderr[-2000:])
    return sorted(rows, key=lambda r: int(r["rank"]))


def _check_split(row: dict[str, Any], mode: str) -> None:
    """The mesh is the one asked for (``tp``: every rank or device on tp; else dp x tp=2) and the planned weights
    are split."""
    mesh = row["mesh"]
    wanted = (set(mesh) == {"tp"} and mesh["tp"] >= 2) if mode == "tp" else (mesh.get("dp", 0) >= 2 and mesh.get("tp") == 2)
    if not wanted:
        raise AssertionError(f"mesh {mesh} for {mode}")
    split = row["split"]
    for name in ("blocks.0.up.weight", "blocks.1.down.weight", "head.weight"):
        if not any(mark in split[name] for mark in ("Shard", "devices=")):
            raise AssertionError(f"{name} is not split: {split[name]}")
    print(json.dumps(split, indent=1))


def _train(ctx: ProbeContext, mode: str) -> None:
    lowering = _lowering(ctx)
    ranks = {"tp": 2, "fsdp+tp": 4}[mode] if lowering == "dtensor" else None
    rows = _job(ctx, [mode], ranks)
    for row in rows:
        _check_split(row, mode)
        ctx.compare(torch.tensor(row["logits"]), torch.tensor(row["ref_logits"]), atol=1e-5, rtol=1e-5)
        if row["reference"][-1] == row["reference"][0]:
            raise AssertionError(f"the unsplit run did not train: losses {row['reference']}")
    # SPMD's partitioned float32 matmuls round differently from one CPU matmul: 1e-4 there, as in tests/xla.
    tol = 1e-5 if lowering == "dtensor" else 1e-4
    ctx.compare(torch.tensor([r["losses"] for r in rows]), torch.tensor([r["reference"] for r in rows]), atol=tol, rtol=tol)


def tp(ctx: ProbeContext) -> None:
    _train(ctx, "tp")


def fsdp_tp(ctx: ProbeContext) -> None:
    _train(ctx, "fsdp+tp")


def reshard(ctx: ProbeContext) -> None:
    lowering = _lowering(ctx)
    directory = str(ctx.tmp / "ckpt")
    saved = _job(ctx, ["save", directory], 2 if lowering == "dtensor" else None)
    _check_split(saved[0], "tp")
    (loaded,) = _job(ctx, ["load", directory], None, {"CPU_NUM_DEVICES": "1"})
    if loaded["step"] != 1 or loaded["max_weight_diff"] != 0.0:
        raise AssertionError(f"loaded step {loaded['step']}, weights differ by {loaded['max_weight_diff']} from the saved ones")
    ctx.compare(torch.tensor(loaded["logits"]), torch.tensor(loaded["saved_logits"]), atol=1e-5, rtol=1e-5)


def _p(name: str, fn: Any, what: str) -> Probe:
    return Probe(name, "parallel", fn, description=what)


PROBES = [
    _p(
        "tp",
        tp,
        "parallelize(model, 'auto') over every rank on tp (DTensor: 2 ranks; XLA SPMD: one process, all devices): "
        "logits and 3 AdamW losses equal the unsplit CPU run.",
    ),
    _p(
        "fsdp_tp",
        fsdp_tp,
        "dp=2 x tp=2 (DTensor: 4 ranks, wrap(model, 'fsdp') on dp; XLA SPMD: batch sharded on dp): losses equal the "
        "unsplit CPU run.",
    ),
    _p(
        "reshard",
        reshard,
        "ad.checkpoint.save of a tensor-parallel model (DCP; 2 ranks, or every SPMD device), loaded by one unsplit "
        "process: same weights, same logits.",
    ),
]
