"""Both ranks call ``ad.save(PATH)`` where rank 0 cannot write; each prints the error it got as JSON.

Before ad.save broadcast rank 0's outcome, rank 1 returned at once (or, waiting for the file, forever).
"""

import json
import sys

import anydevice as ad

ad.distributed.init(timeout_s=60)
try:
    ad.save({"x": 1}, sys.argv[1])
    error = None
except Exception as exc:  # reported, not handled
    error = f"{type(exc).__name__}: {str(exc).splitlines()[0]}"
print(json.dumps({"rank": ad.distributed.rank(), "error": error}), flush=True)
ad.distributed.shutdown()
