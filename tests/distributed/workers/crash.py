"""Rank 1 raises after joining the group; rank 0 waits in a barrier that would never end."""

import anydevice as ad

ad.distributed.init(timeout_s=300)  # longer than the test allows: only the launcher can end rank 0
if ad.distributed.rank() == 1:
    raise RuntimeError("injected failure on rank 1")
ad.distributed.barrier()
print("rank 0 passed the barrier: the crash was not detected")
