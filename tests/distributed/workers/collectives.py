"""Every collective of ad.distributed on this rank; prints one JSON line with the results, and what the launcher gave
the rank (its environment and arguments, read before anything is imported: the same fields as env.py)."""

import json
import os
import sys

ENV_KEYS = ("ANYDEVICE", "RANK", "LOCAL_RANK", "WORLD_SIZE", "TORCHELASTIC_RESTART_COUNT", "TORCH_DEVICE_BACKEND_AUTOLOAD")
given = {"argv": sys.argv, "env": {k: os.environ.get(k) for k in (*ENV_KEYS, "PER_RANK", "OMP_NUM_THREADS")}}

import torch  # noqa: E402

import anydevice as ad  # noqa: E402

ad.distributed.init(timeout_s=60)
ad.distributed.init(timeout_s=60)  # safe to call twice
rank, world = ad.distributed.rank(), ad.distributed.world_size()
r = float(rank + 1)  # rank 0 -> 1.0, rank 1 -> 2.0
out = {
    "rank": rank,
    "world_size": world,
    "local_rank": ad.distributed.local_rank(),
    "is_main": ad.distributed.is_main(),
    "sum": ad.distributed.all_reduce(torch.tensor([r, 10 * r]), "sum").tolist(),
    "avg": ad.distributed.all_reduce(torch.tensor([r, 10 * r]), "avg").tolist(),
    "max": ad.distributed.all_reduce(torch.tensor([r, -r]), "max").tolist(),
    "min": ad.distributed.all_reduce(torch.tensor([r, -r]), "min").tolist(),
    "all_gather": ad.distributed.all_gather(torch.tensor([r, r * r])).tolist(),
    "broadcast": ad.distributed.broadcast(torch.tensor([r, r]), src=1).tolist(),
    "reduce_scatter": ad.distributed.reduce_scatter(torch.arange(4, dtype=torch.float32) * r, "sum").tolist(),
}
ad.distributed.barrier()
out["after_barrier"] = True
mesh = ad.distributed.mesh((world,), ("dp",))
out["mesh"] = {"shape": list(mesh.shape), "names": list(mesh.mesh_dim_names or ())}
ad.distributed.shutdown()
ad.distributed.shutdown()  # safe twice too
out["initialized_after_shutdown"] = ad.distributed.is_initialized()
out.update(given, torch_tpu_imported="torch_tpu" in sys.modules)
print(json.dumps(out), flush=True)
