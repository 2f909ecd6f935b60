"""Print what the launcher gave this rank."""

import json
import os
import sys

keys = ("ANYDEVICE", "RANK", "LOCAL_RANK", "WORLD_SIZE", "TORCHELASTIC_RESTART_COUNT", "TORCH_DEVICE_BACKEND_AUTOLOAD")
keys += ("PER_RANK", "OMP_NUM_THREADS")
print(
    json.dumps(
        {
            "rank": int(os.environ.get("RANK", "0")),
            "argv": sys.argv,
            "env": {k: os.environ.get(k) for k in keys},
            "torch_tpu_imported": "torch_tpu" in sys.modules,
        }
    ),
    flush=True,
)
