"""Sharded checkpoints on ``torch.distributed.checkpoint`` (DCP): ``ad.checkpoint.save`` / ``load``.

``state`` is a dict. Its values may be modules (plain, DDP- or FSDP2-wrapped), optimizers and
plain values (numbers, strings, tensors, nested containers of them)::

    ad.checkpoint.save({"model": model, "optim": optimizer, "step": 100}, "ckpt/step-100")
    state = ad.checkpoint.load({"model": model, "optim": optimizer, "step": 0}, "ckpt/step-100")
    step = state["step"]

Each rank writes its own shards; DCP's state-dict helpers (``get_state_dict`` /
``set_state_dict``) key everything by parameter name, so a checkpoint reshards on load: saved
by 2 FSDP2 ranks, loaded by 1 plain process (no process group needed), saved on one device
type, loaded on another.

Pairing: each optimizer is saved with the module in ``state`` whose parameters it updates
(found by parameter identity), so an optimizer needs its model in the same dict; an optimizer
whose parameters belong to no module, or to several, is an error.

A save writes into a locked hidden temporary directory beside ``directory`` and swaps it into place
in one step (:mod:`anydevice.files.publish`) once DCP has written its ``.metadata`` on every rank: a
checkpoint directory either is complete or does not exist (:func:`is_complete`), the previous one
survives any crash, and the next save removes what a killed one left.
"""

from __future__ import annotations

import os
import stat
import warnings
from collections.abc import Mapping
from concurrent.futures import Future
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

from anydevice.errors import CheckpointError, UnsupportedFeatureError

if TYPE_CHECKING:
    from torch import nn
    from torch.optim import Optimizer

__all__ = ["is_complete", "load", "save"]

METADATA = ".metadata"


def is_complete(directory: str | Path) -> bool:
    """True when ``directory`` holds a checkpoint that :func:`save` finished (DCP's ``.metadata`` is there)."""
    return (Path(directory) / METADATA).is_file()


def save(state: Mapping[str, Any], directory: str | Path, *, async_save: bool = False) -> Future[Path] | None:
    """Write ``state`` to the checkpoint ``directory``, each rank its own shards; collective.

    Returns once the checkpoint is in place on every rank. With ``async_save=True`` it returns
    after the state is staged in host memory and gives a future resolved with the directory
    when the write finished (on rank 0: once the checkpoint is in place); wait for it before
    the process exits. An earlier checkpoint at ``directory`` is replaced in one atomic step;
    anything else there (a directory holding other files, a file) is an error and is left alone.
    """
    from torch.distributed.checkpoint import state_dict_saver as dcp
    from torch.distributed.checkpoint.api import CheckpointException

    from anydevice.checkpoint.saving import group_rank, on_main_rank

    if async_save and not hasattr(dcp, "async_save"):
        import torch

        raise UnsupportedFeatureError(
            f"torch {torch.__version__} has no torch.distributed.checkpoint.async_save.",
            "Upgrade torch, or call ad.checkpoint.save without async_save=True.",
        )
    _quiet_dcp_noise()
    target = Path(directory)
    state_dict = _state_dict(_Parts(state))
    main = group_rank() in (None, 0)
    begun = _begin(target) if main else None
    tmp = _shared_temp(begun)  # raises on every rank when rank 0 could not begin
    job = begun if isinstance(begun, _Job) else None

    def publish() -> None:
        assert job is not None
        if not is_complete(tmp):
            job.abandon()
            raise CheckpointError(f"The checkpoint written to {tmp} has no {METADATA}; {target} was left as it was.")
        job.publish()

    def failed(exc: BaseException) -> CheckpointError:
        reason = _first_line(exc, tmp)  # before abandoning: the space the failed write filled is still taken
        if job is not None:
            job.abandon()
        return CheckpointError(f"Saving checkpoint {target} failed: {reason}")

    if not async_save:
        try:
            dcp.save(state_dict, checkpoint_id=tmp, no_dist=group_rank() is None)
        except (Exception, CheckpointException) as exc:
            raise failed(exc) from exc
        on_main_rank(publish, f"save checkpoint {target}")
        return None
    state_dict = _host_copies(state_dict)  # DCP's stager copies storages, which lazy (XLA) tensors lack
    response = dcp.async_save(state_dict, checkpoint_id=tmp, no_dist=group_rank() is None)
    written = cast("Future[Any]", getattr(response, "upload_completion", response))  # AsyncSaveResponse in newer torch
    done: Future[Path] = Future()

    def finish(write: Future[Any]) -> None:
        try:
            write.result()
        except (Exception, CheckpointException) as exc:
            done.set_exception(failed(exc))
            return
        try:
            if main:
                publish()
        except Exception as exc:
            done.set_exception(exc)
        else:
            done.set_result(target)

    written.add_done_callback(finish)
    return done


def load(state: Mapping[str, Any], directory: str | Path, *, strict: bool = True) -> dict[str, Any]:
    """Fill ``state``'s modules and optimizers in place from ``directory``; return ``state`` with its plain values loaded.

    Every key of ``state`` must be in the checkpoint (the checkpoint may hold more). Works with
    any number of ranks, and in a single process without a process group. Unlike DCP's own load,
    it runs no code from the checkpoint: ``.metadata`` may name only DCP's metadata classes and
    plain values are read weights-only (:mod:`anydevice.checkpoint.dcp_reading`); anything else is refused.
    ``strict`` as in ``Module.load_state_dict``: a module's entries in the checkpoint that the
    module lacks (unexpected keys) are an error naming them; ``strict=False`` ignores them.
    """
    from torch.distributed.checkpoint import state_dict_loader as dcp
    from torch.distributed.checkpoint.api import CheckpointException

    from anydevice.checkpoint.saving import group_rank

    path = Path(directory)
    if not path.exists():
        raise CheckpointError(f"No checkpoint at {path}.", "Check the path; ad.checkpoint.save writes a directory.")
    if not path.is_dir():
        raise CheckpointError(
            f"{path} is a file, not a checkpoint directory.",
            "ad.checkpoint.load reads what ad.checkpoint.save wrote; a single file from ad.save loads with ad.load.",
        )
    _refuse_odd_metadata(path / METADATA)
    if not is_complete(path):
        raise CheckpointError(
            f"{path} is not a complete checkpoint (it has no {METADATA}).",
            "It was not written by ad.checkpoint.save, or was damaged; load another checkpoint.",
        )
    from anydevice.checkpoint.dcp_reading import SafePlanner, SafeReader

    _quiet_dcp_noise()
    parts = _Parts(state)
    state_dict = _state_dict(parts)
    reader, planner = SafeReader(path), SafePlanner()
    found = reader.read_metadata()  # a refused .metadata raises here, before DCP catches and rewords the error
    if strict:
        _check_unexpected(path, parts, state_dict, found.state_dict_metadata)
    try:
        dcp.load(state_dict, checkpoint_id=path, storage_reader=reader, planner=planner, no_dist=group_rank() is None)
    except (Exception, CheckpointException) as exc:
        refusal = reader.refusal or planner.refusal
        if refusal is not None:
            raise refusal from None
        raise CheckpointError(f"Checkpoint {path} could not be loaded: {_first_line(exc)}") from exc
    _apply(parts, state_dict)
    return {key: state_dict[key] if key in parts.plain else value for key, value in state.items()}


def _refuse_odd_metadata(metadata: Path) -> None:
    """Refuse, by name, a ``.metadata`` that is there but is not a regular file (a FIFO, a link to a device)."""
    try:
        st = os.stat(metadata)
    except OSError:
        return  # missing: not a complete checkpoint, said next
    if not stat.S_ISREG(st.st_mode):
        from anydevice.checkpoint.dcp_reading import not_regular

        raise not_regular(metadata, st)


class _Parts:
    """``state`` split into modules, optimizers (each with the key of its module) and plain values."""

    def __init__(self, state: Mapping[str, Any]) -> None:
        from torch import nn
        from torch.optim import Optimizer

        if not isinstance(state, Mapping):
            raise CheckpointError(f"A checkpoint state must be a dict of named values, not {type(state).__name__}.")
        self.modules: dict[str, nn.Module] = {}
        self.optimizers: dict[str, tuple[Optimizer, str]] = {}
        self.plain: dict[str, Any] = {}
        for key, value in state.items():
            if not isinstance(key, str):
                raise CheckpointError(f"Checkpoint state keys must be strings, not {key!r}.")
            if isinstance(value, nn.Module):
                self.modules[key] = value
            elif not isinstance(value, Optimizer):
                self.plain[key] = value
        for key, value in state.items():
            if isinstance(value, Optimizer):
                self.optimizers[key] = (value, self._owner(key, value))

    def _owner(self, key: str, optimizer: Optimizer) -> str:
        wanted = {id(p) for group in optimizer.param_groups for p in group["params"]}
        owners = [name for name, module in self.modules.items() if wanted <= {id(p) for p in module.parameters()}]
        if len(owners) == 1:
            return owners[0]
        if not owners:
            raise CheckpointError(
                f"Optimizer '{key}' updates parameters of no single module in the checkpoint state.",
                "Put the model it optimises in the same dict (e.g. {'model': model, 'optim': optimizer}).",
            )
        raise CheckpointError(
            f"Optimizer '{key}' updates parameters of several modules in the state ({', '.join(owners)}).",
            "Keep only the module it optimises (not also its wrapper or a parent) in the dict.",
        )


def _state_dict(parts: _Parts) -> dict[str, Any]:
    from torch.distributed.checkpoint.state_dict import get_model_state_dict, get_optimizer_state_dict

    state_dict: dict[str, Any] = {key: get_model_state_dict(module) for key, module in parts.modules.items()}
    for key, (optimizer, owner) in parts.optimizers.items():
        state_dict[key] = get_optimizer_state_dict(parts.modules[owner], optimizer)
    state_dict.update(parts.plain)
    return state_dict


def _check_unexpected(path: Path, parts: _Parts, state_dict: dict[str, Any], stored: Mapping[str, Any]) -> None:
    """Raise when the checkpoint holds entries under a module's key that the module does not have (strict loading)."""
    for key in parts.modules:
        wanted = {f"{key}.{name}" for name in state_dict[key]}
        extra = sorted(fqn[len(key) + 1 :] for fqn in stored if fqn.startswith(f"{key}.") and not _within(fqn, wanted))
        if extra:
            shown = ", ".join(extra[:10]) + (f" and {len(extra) - 10} more" if len(extra) > 10 else "")
            raise CheckpointError(
                f"Checkpoint {path} holds entries for '{key}' that the module does not have (unexpected keys: {shown}).",
                "Load it into the model it was saved from, or pass strict=False to ignore them "
                "(as Module.load_state_dict(strict=False) does).",
            )


def _within(fqn: str, wanted: set[str]) -> bool:
    """True when ``fqn`` is one of ``wanted`` or inside one (a nested value DCP flattened, ``a.b`` under ``a``)."""
    parts = fqn.split(".")
    return any(".".join(parts[:end]) in wanted for end in range(len(parts), 1, -1))


def _apply(parts: _Parts, state_dict: dict[str, Any]) -> None:
    from torch.distributed.checkpoint.state_dict import set_model_state_dict, set_optimizer_state_dict

    for key, module in parts.modules.items():
        set_model_state_dict(module, state_dict[key])
    for key, (optimizer, owner) in parts.optimizers.items():
        set_optimizer_state_dict(parts.modules[owner], optimizer, state_dict[key])


def _host_copies(state_dict: dict[str, Any]) -> dict[str, Any]:
    """``state_dict`` with every plain device tensor copied to the host (sharded DTensors are left to DCP)."""
    import torch
    from torch.distributed.tensor import DTensor
    from torch.utils._pytree import tree_map_only

    def host(t: torch.Tensor) -> torch.Tensor:
        return t if isinstance(t, DTensor) or t.device.type == "cpu" else t.detach().to("cpu")

    return cast("dict[str, Any]", tree_map_only(torch.Tensor, host, state_dict))


class _Job:
    """Rank 0's side of a save: the opened parent directory and the locked temporary checkpoint in it."""

    def __init__(self, target: Path) -> None:
        from anydevice.files.publish import DirectoryWrite, directory_problem, refuse_directory, remove_stale_temps
        from anydevice.files.safe_place import open_place, save_error

        try:
            self.place = open_place(target)
        except OSError as exc:
            raise save_error(target, exc) from None
        try:
            problem = directory_problem(self.place)
            if problem is not None:
                raise refuse_directory(self.place, problem)
            remove_stale_temps(self.place)
            self.write = DirectoryWrite(self.place)
        except BaseException:
            self.place.close()
            raise

    @property
    def path(self) -> Path:
        return Path(self.write.path)

    def publish(self) -> None:
        try:
            self.write.publish()
        finally:
            self.place.close()

    def abandon(self) -> None:
        if self.place.fd >= 0:
            self.write.abandon()
            self.place.close()
            self.place.fd = -1


def _begin(target: Path) -> _Job | BaseException:
    try:
        return _Job(target)
    except Exception as exc:  # given to every rank by _shared_temp, then raised
        return exc


def _shared_temp(job: _Job | BaseException | None) -> Path:
    """The temporary directory every rank writes into: rank 0 makes it, the others learn it (or rank 0's error)."""
    import torch.distributed as dist

    from anydevice.checkpoint.saving import group_rank

    rank = group_rank()
    message = [str(job.path) if isinstance(job, _Job) else "", str(job) if isinstance(job, BaseException) else ""]
    if rank is not None and dist.get_world_size() > 1:
        dist.broadcast_object_list(message, src=0)
    if isinstance(job, BaseException):
        raise job
    if message[1]:
        raise CheckpointError(f"Rank 0 could not start the checkpoint save: {message[1].splitlines()[0]}")
    return Path(message[0])


def _quiet_dcp_noise() -> None:
    """Silence two DCP warnings that are not the user's business, with process-wide filters for those messages.

    "assuming the intent is to save in a single process": without a process group that is the
    point. "TypedStorage is deprecated": torch 2.9's DCP writer calls ``tensor.storage()`` itself.
    Filters, not a ``catch_warnings`` block, because an async save warns from DCP's thread later.
    """
    single = r"torch\.distributed is .*assuming the intent is to (save|load) in a single process"
    warnings.filterwarnings("ignore", message=single, category=UserWarning)
    warnings.filterwarnings("ignore", message="TypedStorage is deprecated", module=r"torch\.distributed\.checkpoint")


def _first_line(exc: BaseException, written: Path | None = None) -> str:
    """One line saying why: for DCP's ``CheckpointException``, the first failing rank's own error.

    ``written``: the directory the save wrote into, checked for free space when torch's writer
    failed without the ``OSError`` that says why (it is lost when DCP gathers a rank's error).
    """
    failures = getattr(exc, "failures", None)
    if isinstance(failures, dict) and failures:
        rank, (error, _) = sorted(failures.items(), key=lambda item: item[0])[0]
        where = f" (rank {rank})" if len(failures) > 1 or rank != 0 else ""
        line = _first_line(error, written)
        kind = "" if _os_error_in(error) is not None or line == _NO_SPACE else f"{type(error).__name__}: "
        return f"{kind}{line}{where}"
    cause = _os_error_in(exc)
    if cause is not None:  # torch reports a failed write as "enforce fail ... unexpected pos"; the OSError says why
        from anydevice.files.safe_place import os_cause

        return os_cause(cause)
    text = str(exc).strip()
    if "inline_container" in text and written is not None and _nearly_full(written):
        return _NO_SPACE
    return text.splitlines()[0] if text else type(exc).__name__


_NO_SPACE = "no space left on the device"


def _nearly_full(directory: Path) -> bool:
    """True when the filesystem holding ``directory`` has less than 1 MiB left for this user."""
    import os

    try:
        found = os.statvfs(directory)
    except OSError:
        return False
    return found.f_bavail * found.f_frsize < 1 << 20


def _os_error_in(exc: BaseException) -> OSError | None:
    """The first ``OSError`` with an errno in ``exc``'s chain of causes and contexts (``exc`` itself included)."""
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        if isinstance(current, OSError) and current.errno:
            return current
        seen.add(id(current))
        current = current.__cause__ or current.__context__
    return None
