"""Both ranks call ``ad.checkpoint.save(PATH)`` where rank 0 must refuse the target; each prints its error as JSON.

Before rank 0 shared its refusal, rank 1 waited in the broadcast of the temporary's name until the
process group's timeout.
"""

import json
import sys

import torch

import anydevice as ad

ad.distributed.init(timeout_s=60)
try:
    ad.checkpoint.save({"model": torch.nn.Linear(4, 4), "step": 1}, sys.argv[1])
    error = None
except Exception as exc:  # reported, not handled
    error = f"{type(exc).__name__}: {str(exc).splitlines()[0]}"
print(json.dumps({"rank": ad.distributed.rank(), "error": error}), flush=True)
ad.distributed.shutdown()
