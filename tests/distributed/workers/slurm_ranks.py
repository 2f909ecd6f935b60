"""One rank under `anydevice run` inside an srun task: what the launcher gave it, then a real process group."""

import json
import os

import torch

import anydevice as ad

given = {k: os.environ.get(k) for k in ("RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE")}
ad.distributed.init(timeout_s=60)
rank, world = ad.distributed.rank(), ad.distributed.world_size()
local = ad.distributed.local_rank()
# every rank's (rank, local rank) as the group sees them: the process group formed and the numbers are its own
pairs = ad.distributed.all_gather(torch.tensor([float(rank), float(local)])).reshape(-1, 2).tolist()
print(json.dumps({"rank": rank, "world_size": world, "local_rank": local, "env": given, "pairs": pairs}), flush=True)
ad.distributed.shutdown()
