"""What ``ad.distributed.parallelize`` costs against tensor parallelism written by hand, per training step.

    ANYDEVICE=cpu python benchmarks/parallelize_overhead.py [--steps 5] [--rounds 6]            # gloo, 2 processes
    PJRT_DEVICE=CPU CPU_NUM_DEVICES=4 ANYDEVICE=xla python benchmarks/parallelize_overhead.py   # XLA SPMD, 1 process

The same MLP stack (plan: ``up`` colwise, ``down`` rowwise), data and AdamW, split two ways, each
built and warmed up once and then timed in rotated rounds (benchmarks/rotate.py):

* ``hand``: on one process per rank, ``parallelize_module`` with ``ColwiseParallel`` /
  ``RowwiseParallel`` over ``init_device_mesh``; on XLA SPMD, ``xs.mark_sharding`` per weight;
  ``hand (control)`` is an identical copy, whose ratio is the noise floor;
* ``anydevice``: ``ad.distributed.mesh({"tp": -1})`` and ``ad.distributed.parallelize(model, "auto")``.

Also records each rank's (each device's) parameter bytes against the unsplit model's. On cpu the
script relaunches itself with ``anydevice run -n 2``; rank 0 writes
benchmarks/results/parallelize_overhead-DEVICE.json.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, ClassVar

import torch
from torch import nn

sys.path.insert(0, str(Path(__file__).resolve().parent))
import rotate

import anydevice as ad

WIDTH, DEPTH, BATCH = 256, 4, 32


class Block(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.up = nn.Linear(WIDTH, 4 * WIDTH)
        self.down = nn.Linear(4 * WIDTH, WIDTH)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.down(torch.relu(self.up(x)))


class Stack(nn.Module):
    tp_plan: ClassVar[dict[str, str]] = {"blocks.*.up": "colwise", "blocks.*.down": "rowwise"}

    def __init__(self) -> None:
        super().__init__()
        self.blocks = nn.ModuleList(Block() for _ in range(DEPTH))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for block in self.blocks:
            x = block(x)
        return x


def new_model() -> nn.Module:
    torch.manual_seed(0)
    return Stack()


def by_hand_dtensor(model: nn.Module) -> nn.Module:
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor.parallel import ColwiseParallel, RowwiseParallel, parallelize_module

    mesh = init_device_mesh(ad.device().type, (ad.distributed.world_size(),))
    plan: dict[str, Any] = {}
    for i in range(DEPTH):
        plan[f"blocks.{i}.up"], plan[f"blocks.{i}.down"] = ColwiseParallel(), RowwiseParallel()
    return parallelize_module(model.to(ad.device()), mesh, plan)


def by_hand_spmd(model: nn.Module, mesh: Any) -> nn.Module:
    import torch_xla.distributed.spmd as xs  # noqa: TID251 - the raw torch_xla baseline

    model = model.to(ad.device())
    for block in model.blocks:  # type: ignore[union-attr]
        xs.mark_sharding(block.up.weight, mesh, ("tp", None))
        xs.mark_sharding(block.up.bias, mesh, ("tp",))
        xs.mark_sharding(block.down.weight, mesh, (None, "tp"))
    return model


def timed(model: nn.Module, steps: int) -> Callable[[], float]:
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    x = torch.randn(BATCH, WIDTH, generator=torch.Generator().manual_seed(1)).to(ad.device())

    def run() -> float:
        ad.distributed.barrier()
        start = time.perf_counter()
        for _ in range(steps):
            model(x).pow(2).mean().backward()
            optimizer.step()
            optimizer.zero_grad()
            ad.step()
        ad.synchronize()
        ad.distributed.barrier()
        return (time.perf_counter() - start) / steps

    run()  # warm-up: graphs traced and compiled (XLA), buffers allocated
    return run


def xla_shards(param: torch.Tensor) -> int:
    """How many pieces the XLA sharding spec cuts ``param`` into (1: replicated)."""
    import torch_xla  # noqa: TID251

    spec = torch_xla._XLAC._get_xla_sharding_spec(param)
    found = re.search(r"devices=\[([0-9,]+)\]", spec)
    if not found:
        return 1
    dims = [int(v) for v in found[1].split(",")][: param.dim()]
    count = 1
    for d in dims:
        count *= d
    return count


def param_bytes(model: nn.Module, spmd: bool) -> int:
    """Parameter bytes one rank (one device on SPMD) holds."""
    total = 0
    for p in model.parameters():
        local = ad.distributed.local_shard(p)
        pieces = xla_shards(p) if spmd else 1
        total += local.numel() * local.element_size() // pieces
    return total


def measure(args: argparse.Namespace) -> dict[str, Any]:
    mesh = ad.distributed.mesh({"tp": -1})  # first: on xla, SPMD starts here
    spmd = ad.distributed.world_size() == 1
    hand: Callable[[nn.Module], nn.Module] = (lambda m: by_hand_spmd(m, mesh)) if spmd else by_hand_dtensor
    models = {
        "hand": hand(new_model()),
        "anydevice": ad.distributed.parallelize(new_model(), "auto", mesh=mesh),
        "hand (control)": hand(new_model()),
    }
    variants = {name: timed(model, args.steps) for name, model in models.items()}
    samples = rotate.rotate(variants, args.rounds, log=ad.distributed.is_main(), discard=1)
    unsplit = sum(p.numel() * p.element_size() for p in new_model().parameters())
    return {
        "benchmark": "parallelize_overhead",
        "device": ad.backend().name,
        "lowering": "spmd" if spmd else "dtensor",
        "mesh": ad.distributed.mesh_degrees(mesh),
        "steps_per_round": args.steps,
        "seconds_per_step": {name: rotate.spread(values) for name, values in samples.items()},
        "ratio_to_hand": rotate.ratios(samples, "hand"),
        "param_bytes_per_rank": {name: param_bytes(model, spmd) for name, model in models.items()},
        "param_bytes_unsplit": unsplit,
        "machine": rotate.machine(),
    }


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--steps", type=int, default=5, help="training steps per timed call")
    p.add_argument("--rounds", type=int, default=6, help="timed rounds (after one warm-up round)")
    p.add_argument("-n", type=int, default=2, help="processes on a one-process-per-rank device")
    p.add_argument("--out", type=Path, help="where to write the JSON (default benchmarks/results/...)")
    args = p.parse_args()
    torch.set_num_threads(1)
    if ad.distributed.world_size() == 1 and ad.backend().shims.collectives.tensor_parallel == "dtensor":
        command = [sys.executable, "-m", "anydevice", "run", "-n", str(args.n), __file__, *sys.argv[1:]]
        return subprocess.run(command, env={**os.environ, "OMP_NUM_THREADS": "1"}, check=False).returncode
    result = measure(args)
    if ad.distributed.is_main():
        name = f"parallelize_overhead-{result['device']}"
        print(json.dumps({"ratio_to_hand": result["ratio_to_hand"], "bytes": result["param_bytes_per_rank"]}))
        rotate.write(name, result, args.out)
    ad.distributed.shutdown()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
