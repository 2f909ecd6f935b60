"""``ad.save``: the object with every tensor on the host, written once (by the main rank), atomically.

The device is asked only how to bring tensors to the host (the optional
:class:`~anydevice.shims.contracts.HostTransfer` capability: one batched transfer on lazy XLA
devices); without it, ``HostTransfer``'s defaults copy each tensor with ``tensor.detach().to("cpu")``. Writing is the
same on every device: :func:`anydevice.files.safe_place.open_place` finds the file without following
untrusted links, :func:`anydevice.files.publish.write_file` publishes it with one rename.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import IO, Any, TypeVar

from anydevice.errors import CheckpointError
from anydevice.runtime.backend import current

T = TypeVar("T")


def save(obj: Any, path: Path) -> None:
    """Write ``obj`` to ``path`` portably; collective with a process group (see :func:`anydevice.save`)."""
    from anydevice.shims.contracts import HostTransfer

    shims = current().shims
    transfer = shims.capability(HostTransfer) or HostTransfer()  # the class itself holds the portable defaults
    if group_rank() is None and not transfer.is_writer():
        return
    on_main_rank(lambda: write_torch_file(transfer.to_host(obj), path), f"save {path}", shims.placement.device())


def write_torch_file(obj: Any, path: Path) -> None:
    """``torch.save(obj)`` to ``path`` safely: no untrusted link followed, one atomic rename, errors naming the file."""
    import torch

    write_safely(path, lambda handle: torch.save(obj, handle))


def write_safely(path: Path, write: Callable[[IO[bytes]], Any], *, accepts: Callable[[bytes], bool] | None = None) -> None:
    """``write(handle)`` to ``path`` the checkpoint way (:func:`anydevice.files.publish.write_file`); ``accepts`` judges
    an existing file's head (default: only an earlier checkpoint is replaced)."""
    from anydevice.files.publish import write_file
    from anydevice.files.safe_place import open_place, save_error

    try:
        place = open_place(path)
    except OSError as exc:
        raise save_error(path, exc) from None
    with place:
        write_file(place, write, accepts=accepts)


def group_rank() -> int | None:
    """This process's rank in the initialised default process group, None without one (``RANK`` alone does not count)."""
    from anydevice import distributed

    return distributed.rank() if distributed.is_initialized() else None


def on_main_rank(action: Callable[[], None], what: str, device: Any = None) -> None:
    """Run ``action`` on the main rank; with a process group, every rank returns only after it finished.

    Without a process group the process always acts (``RANK`` alone does not make a process a
    follower). With one, rank 0 acts and then broadcasts whether it succeeded, so the other ranks
    neither return before the file is in place nor wait forever when rank 0 failed: they raise
    :class:`~anydevice.errors.CheckpointError`. ``device`` holds the status tensor for backends
    that cannot broadcast CPU tensors (the placement's device); gloo always uses the CPU.
    """
    rank = group_rank()
    if rank is None:
        action()
        return
    import torch
    import torch.distributed as dist

    failure: BaseException | None = None
    if rank == 0:
        try:
            action()
        except Exception as exc:  # reported to the other ranks, then re-raised here
            failure = exc
    backend = str(dist.get_backend())
    on = "cpu" if device is None or "gloo" in backend else device
    status = torch.tensor([0 if failure is None else 1], dtype=torch.int32, device=on)
    dist.broadcast(status, src=0)
    if failure is not None:
        raise failure
    if int(status.item()) != 0:
        raise CheckpointError(
            f"Rank 0 failed to {what}, so this rank did not continue.", "Rank 0's error in its output says why."
        )
