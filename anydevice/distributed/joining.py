"""A rank that never joins is said at once: under ``anydevice run``, ranks mark in the run's store when they join.

torch elastic keeps one store for the whole run. Each rank marks ``joined/R`` there when it calls
``ad.distributed.init()``, and ``anydevice run``'s rank wrapper marks ``left/R`` when a rank's script
ends with status 0 without having joined. A rank waiting for its peers polls the marks: a peer that
left is one :class:`~anydevice.errors.DistributedError` naming it, where torch would wait silently until
the process group's timeout (30 minutes) for a rank that will never come.
"""

from __future__ import annotations

import time
from typing import Any

from anydevice import settings
from anydevice.errors import DistributedError

POLL_S = 0.1
_joined = False


def prefix() -> str | None:
    """The run's key prefix for this restart attempt (None outside torch elastic)."""
    attempt = settings.TORCHELASTIC_RESTART_COUNT.get()
    return None if attempt is None else f"anydevice/attempt-{attempt}/"


def wait_for_peers(store: Any, rank: int, world: int, timeout_s: float) -> None:
    """Mark this rank joined, then wait until every rank has; a rank that left without joining raises at once."""
    global _joined
    store.set(f"joined/{rank}", "1")
    _joined = True
    waiting = set(range(world)) - {rank}
    deadline = time.monotonic() + timeout_s
    while True:
        waiting = {r for r in waiting if not store.check([f"joined/{r}"])}
        if not waiting:
            return
        gone = sorted(r for r in waiting if store.check([f"left/{r}"]))
        if gone:
            names = ", ".join(map(str, gone))
            raise DistributedError(
                f"Rank {names} ended (exit status 0) without calling ad.distributed.init(), so the process group of "
                f"{world} ranks cannot form; rank {rank} stopped waiting for it.",
                "Call ad.distributed.init() on every rank (or on none), before any rank may finish early.",
            )
        if time.monotonic() > deadline:
            raise DistributedError(
                f"Rank(s) {', '.join(map(str, sorted(waiting)))} did not call ad.distributed.init() within {timeout_s:g} s.",
                "Every rank must call ad.distributed.init(); check their output for where they are.",
            )
        time.sleep(POLL_S)


def mark_left(rank: int, world: int) -> None:
    """``anydevice run``'s rank wrapper, after a script ended with status 0: say so if this rank never joined (best effort)."""
    key = prefix()
    if _joined or world <= 1 or key is None:
        return
    try:
        import importlib

        dist: Any = importlib.import_module("torch.distributed")
        store, _, _ = next(dist.rendezvous("env://", rank=rank, world_size=world))
        dist.PrefixStore(key, store).set(f"left/{rank}", "1")
    except Exception:  # the rank's own exit status is what counts; this is only a courtesy to its peers
        return
