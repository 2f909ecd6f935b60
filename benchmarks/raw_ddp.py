"""A plain torch DDP training script (no anydevice), started by torchrun or by ``anydevice run``.

    torchrun --nproc-per-node 2 benchmarks/raw_ddp.py --steps 20 --t0 $(date +%s.%N)

Reads the launcher's environment (RANK, WORLD_SIZE, MASTER_ADDR, ...), joins a gloo group, trains
the benchmark workload with DistributedDataParallel and prints one JSON line per rank: when the
interpreter started and when the group was up and the first step done (seconds after ``--t0``,
the launch time), and tokens/s of this rank over the steps after the first.
"""

from __future__ import annotations

import time

T_START = time.time()

import argparse  # noqa: E402 - the interpreter's start is stamped before the imports
import json  # noqa: E402
import os  # noqa: E402
import sys  # noqa: E402
from pathlib import Path  # noqa: E402

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402
from torch.nn.parallel import DistributedDataParallel  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent))
import workload  # noqa: E402


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--steps", type=int, default=20)
    p.add_argument("--t0", type=float, required=True, help="launch time (time.time() of the launching shell)")
    p.add_argument("--threads", type=int, default=1)
    args = p.parse_args()
    torch.set_num_threads(args.threads)
    t_imported = time.time()
    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    t_group = time.time()
    model, opt = workload.new_model()
    ddp = DistributedDataParallel(model)
    loader = workload.batches(args.steps, 16, 64, rank=rank, world=world)
    t_first = t_timed = 0.0
    for i, (x, y) in enumerate(loader):
        loss = ddp(x, y)
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        if i == 0:
            loss.item()
            t_first = t_timed = time.time()
    loss.item()
    t_end = time.time()
    record = {
        "rank": rank,
        "world_size": world,
        "launcher_env": "ANYDEVICE" in os.environ,
        "interpreter_start_s": T_START - args.t0,
        "imports_done_s": t_imported - args.t0,
        "group_up_s": t_group - args.t0,
        "first_step_done_s": t_first - args.t0,
        "tokens_per_s": (args.steps - 1) * 16 * 64 / (t_end - t_timed),
        "last_loss": float(loss),
    }
    # one write: both ranks share the launcher's pipe, and an unbuffered print() (PYTHONUNBUFFERED) writes the
    # newline apart, so two ranks' records could meet on one line
    os.write(1, (json.dumps(record) + "\n").encode())
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
