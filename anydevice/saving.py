"""``ad.save``: the object with every tensor on the host, written once (by the main rank), atomically.

The device is asked only how to bring tensors to the host (the optional
:class:`~anydevice.shims.contracts.HostTransfer` capability: one batched transfer on lazy XLA
devices); without it each tensor is copied with ``tensor.detach().to("cpu")``. Writing the
file is the same on every device.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, TypeVar

from anydevice.backend import current

T = TypeVar("T")


def save(obj: Any, path: Path) -> None:
    """Write ``obj`` to ``path`` portably; collective with a process group (see :func:`anydevice.save`)."""
    import torch

    from anydevice.shims.contracts import HostTransfer
    from anydevice.shims.saving import atomic_write, group_rank, on_main_rank

    placement = current().shims.placement
    transfer = placement if isinstance(placement, HostTransfer) else None
    if group_rank() is None and transfer is not None and not transfer.is_writer():
        return

    def write() -> None:
        host = transfer.to_host(obj) if transfer is not None else host_copy(obj)
        atomic_write(path, lambda handle: torch.save(host, handle))

    on_main_rank(write, f"save {path}", placement.device())


def host_copy(obj: T) -> T:
    """A CPU copy of every tensor in ``obj``; modules are copied, so the caller's stay where they are."""
    from anydevice.shims.common import to_cpu

    return to_cpu(obj)
