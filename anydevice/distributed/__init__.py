"""Distributed training the device's way: process groups, collectives, wrapping, meshes.

Everything works in a single process without a launcher: the collectives do the obvious thing
for a world of one without making a process group, and :func:`init`, :func:`wrap` and
:func:`mesh` make a world-of-one group on an in-memory store (no port, no environment
changes). The same script therefore runs under ``python``, ``anydevice run`` and Ray Train.
"""

from __future__ import annotations

import gc
import math
import weakref
from collections.abc import Callable, Iterable, Mapping
from typing import TYPE_CHECKING, Any

from anydevice import settings
from anydevice.distributed import joining
from anydevice.distributed import slurm as slurm_env
from anydevice.errors import DistributedError, UnsupportedFeatureError
from anydevice.runtime.backend import current

if TYPE_CHECKING:
    import torch

_LAUNCH = (settings.RANK, settings.WORLD_SIZE, settings.LOCAL_RANK, settings.MASTER_ADDR, settings.MASTER_PORT)
_NEEDED = (settings.RANK, settings.WORLD_SIZE, settings.MASTER_ADDR, settings.MASTER_PORT)
_REDUCE_OPS = {"sum": "SUM", "avg": "AVG", "mean": "AVG", "max": "MAX", "min": "MIN", "product": "PRODUCT"}
_owned_group = False
_meshes: weakref.WeakKeyDictionary[Any, Any] = weakref.WeakKeyDictionary()
"""Each model :func:`parallelize` split, and its mesh (for ``wrap(model, "fsdp")`` and :func:`mesh_of`)."""


def _dist() -> Any:
    import torch.distributed as dist

    if not dist.is_available():
        raise DistributedError("This torch build has no torch.distributed.", "Install a torch build with distributed support.")
    return dist


def is_initialized() -> bool:
    """True once a process group exists (made by :func:`init` or by a launcher such as Ray)."""
    import torch.distributed as dist

    return bool(dist.is_available() and dist.is_initialized())


def launched() -> bool:
    """True when a launcher set this process's rendezvous environment; raise when it is half set."""
    present = [s.name for s in _LAUNCH if s.get() is not None]
    if not present:
        return slurm_env.srun_task() is not None  # srun: SLURM's variables stand for torchrun's
    missing = [s.name for s in _NEEDED if s.get() is None]
    if missing:
        raise DistributedError(
            f"The launch environment is half set: {', '.join(present)} present but {', '.join(missing)} missing.",
            "Launch with `anydevice run -n N script.py` (or torchrun), or unset the stray variables to run one process.",
        )
    return True


def _from_launch(setting: settings.Setting, read: Callable[[], int]) -> int:
    """``read()`` (torchrun's variable), or in an srun task without torchrun's variables, SLURM's value for ``setting``."""
    if setting.get() is None and (task := slurm_env.srun_task()) is not None:
        return int(task.torchrun_env()[setting.name])
    return read()


def _env_store(dist: Any, rank: int, world: int, timeout: Any) -> dict[str, Any]:
    """``env://`` rendezvous; under torch elastic, its store keyed by the restart attempt.

    torch elastic keeps one store for the whole run, so after ``--max-restarts`` a new group could
    read the previous attempt's (dead) peer addresses; a per-attempt key prefix prevents that.
    """
    attempt = settings.TORCHELASTIC_RESTART_COUNT.get()
    if attempt is None:
        return {"init_method": "env://"}
    extra = {"timeout": timeout} if timeout is not None else {}
    store, _, _ = next(dist.rendezvous("env://", rank=rank, world_size=world, **extra))
    prefixed = dist.PrefixStore(f"anydevice/attempt-{attempt}/", store)
    seconds = timeout.total_seconds() if timeout is not None else 1800.0  # torch's default process-group timeout
    joining.wait_for_peers(prefixed, rank, world, seconds)  # a peer that ended without joining is said at once
    return {"store": prefixed}


def launch_world() -> tuple[int, int]:
    """``RANK`` and ``WORLD_SIZE`` as a launcher set them, refused at once when they cannot name a rank of the world
    (a rank past the world waited in the rendezvous until its timeout)."""
    rank, world = settings.rank(), settings.world_size()
    fix = "Unset RANK and WORLD_SIZE (anydevice run sets them), or give 0 <= RANK < WORLD_SIZE."
    if world < 1:
        raise DistributedError(f"WORLD_SIZE={world} must be at least 1.", fix)
    if not 0 <= rank < world:
        raise DistributedError(f"RANK={rank} is outside 0..{world - 1} (WORLD_SIZE={world}).", fix)
    return rank, world


def init(timeout_s: float | None = None) -> None:
    """Create the process group with the selected device's backend; safe to call twice.

    Binds this process to its local rank's device; adopts a group a launcher (Ray) already made.
    Under a launcher it rendezvouses through ``env://``; without one it makes a world of one.
    A half-set launch environment raises :class:`~anydevice.errors.DistributedError`.
    """
    global _owned_group
    dist = _dist()
    backend = current()
    collectives, placement = backend.shims.collectives, backend.shims.placement
    if placement.device_count() > 0:
        placement.set_device(placement.device(backend.index).index or 0)
    if dist.is_initialized():
        return
    kwargs: dict[str, Any] = {"backend": collectives.backend}
    if timeout_s is not None:
        from datetime import timedelta

        kwargs["timeout"] = timedelta(seconds=timeout_s)
    if launched():
        slurm_env.adopt()  # an srun task: torchrun's variables from SLURM's, for the rendezvous
        if collectives.init_method == "env://":
            kwargs.update(zip(("rank", "world_size"), launch_world()))
            kwargs.update(_env_store(dist, kwargs["rank"], kwargs["world_size"], kwargs.get("timeout")))
        else:
            kwargs["init_method"] = collectives.init_method
    elif collectives.init_method == "env://":
        kwargs.update(store=dist.HashStore(), rank=0, world_size=1)  # a world of one, no port
    else:
        kwargs["init_method"] = collectives.init_method  # e.g. xla:// finds its own world
    try:
        dist.init_process_group(**kwargs)
    except (RuntimeError, ValueError) as exc:
        raise DistributedError(
            f"Creating the '{collectives.backend}' process group failed: {exc}",
            "Check that every rank was started by the same launcher and can reach MASTER_ADDR:MASTER_PORT.",
        ) from exc
    _owned_group = True


def rank() -> int:
    """Global rank (0 without a process group or launcher)."""
    if is_initialized():
        return int(_dist().get_rank())
    return _from_launch(settings.RANK, settings.rank)


def world_size() -> int:
    """Number of processes (1 without a process group or launcher)."""
    if is_initialized():
        return int(_dist().get_world_size())
    return _from_launch(settings.WORLD_SIZE, settings.world_size)


def local_rank() -> int:
    """Rank on this node (``LOCAL_RANK``; 0 without a launcher)."""
    return _from_launch(settings.LOCAL_RANK, settings.local_rank)


def is_main() -> bool:
    """True on global rank 0."""
    return rank() == 0


def _op(op: str) -> Any:
    try:
        return getattr(_dist().ReduceOp, _REDUCE_OPS[op.lower()])
    except KeyError:
        raise DistributedError(f"Unknown reduce op '{op}'.", f"Use one of: {', '.join(_REDUCE_OPS)}.") from None


def _emulated_avg(op: str) -> bool:
    """True when ``op`` is an average the device's process group lacks (``Collectives.lacking_reduce_ops``):
    it is then summed and divided by the world size. Any other lacking op raises."""
    name = _REDUCE_OPS[op.lower()]
    collectives = current().shims.collectives
    if name not in collectives.lacking_reduce_ops:
        return False
    if name == "AVG":
        return True
    raise UnsupportedFeatureError(
        f"The '{collectives.backend}' process group has no {name} reduction.",
        f"Use one of: {', '.join(k for k, v in _REDUCE_OPS.items() if v not in collectives.lacking_reduce_ops)}.",
    )


def _alone() -> bool:
    """True for a single process without a group: collectives are local identities."""
    if is_initialized():
        return False
    if world_size() > 1:
        init()  # launched but not initialised yet: join the group now
        return False
    return True


def barrier() -> None:
    """Wait until every rank reaches this point (returns at once in a single process)."""
    if not _alone():
        _dist().barrier()


def all_reduce(tensor: torch.Tensor, op: str = "sum") -> torch.Tensor:
    """Reduce ``tensor`` across ranks in place (``sum``, ``avg``, ``max``, ``min``, ``product``) and return it."""
    reduce_op = _op(op)
    if _alone():
        return tensor
    dist = _dist()
    if _emulated_avg(op):
        dist.all_reduce(tensor, op=dist.ReduceOp.SUM)
        return tensor.div_(dist.get_world_size())
    dist.all_reduce(tensor, op=reduce_op)
    return tensor


def all_gather(tensor: torch.Tensor) -> torch.Tensor:
    """Every rank's ``tensor`` (same shape everywhere) stacked along a new leading dim: ``[world, *shape]``."""
    import torch

    if _alone():
        return tensor.unsqueeze(0).clone()
    parts = [torch.empty_like(tensor) for _ in range(world_size())]
    _dist().all_gather(parts, tensor.contiguous())
    return torch.stack(parts)


def broadcast(tensor: torch.Tensor, src: int = 0) -> torch.Tensor:
    """Overwrite ``tensor`` on every rank with rank ``src``'s value, and return it."""
    if not 0 <= src < world_size():
        raise DistributedError(f"broadcast src={src} is not a rank of this world (size {world_size()}).")
    if not _alone():
        _dist().broadcast(tensor, src=src)
    return tensor


def reduce_scatter(tensor: torch.Tensor, op: str = "sum") -> torch.Tensor:
    """Reduce ``tensor`` across ranks and return this rank's equal slice of dim 0."""
    import torch

    reduce_op = _op(op)
    n = world_size()
    if tensor.dim() == 0 or tensor.shape[0] % n:
        raise DistributedError(
            f"reduce_scatter needs dim 0 of the tensor divisible by the world size ({n}); got shape {tuple(tensor.shape)}."
        )
    if _alone():
        return tensor.clone()
    dist = _dist()
    out = torch.empty((tensor.shape[0] // n, *tensor.shape[1:]), dtype=tensor.dtype, device=tensor.device)
    single = getattr(dist, "reduce_scatter_single", None) or dist.reduce_scatter_tensor  # renamed in torch 2.13
    if _emulated_avg(op):
        single(out, tensor.contiguous(), op=dist.ReduceOp.SUM)
        return out.div_(n)
    single(out, tensor.contiguous(), op=reduce_op)
    return out


def wrap(model: Any, strategy: str = "ddp", *, units: Iterable[type | str] | None = None, **options: Any) -> Any:
    """Wrap ``model`` for data parallelism: ``"ddp"`` or ``"fsdp"`` (FSDP2 ``fully_shard`` where supported).

    FSDP shards per transformer block: the classes named in ``units=``, else a Hugging Face model's
    ``_no_split_modules``, else the repeated children of a ``ModuleList``; tied parameters stay in
    one unit and the rest in the root. The choice is logged once on stderr.
    """
    if strategy not in ("ddp", "fsdp"):
        raise DistributedError(f"Unknown wrapping strategy '{strategy}'.", "Use 'ddp' or 'fsdp'.")
    if units is not None:
        if strategy != "fsdp":
            raise DistributedError(
                "units= chooses FSDP units; DDP keeps the whole model on every rank.", "Drop units= or use 'fsdp'."
            )
        options["units"] = list(units)
    split = _meshes.get(model)
    if split is not None:
        options.update(_wrap_split(model, strategy, split))
    init()
    return current().shims.collectives.wrap(model, strategy, **options)


def _wrap_split(model: Any, strategy: str, split: Any) -> dict[str, Any]:
    """What ``wrap`` adds for a model :func:`parallelize` split: FSDP over the mesh's ``dp`` axis; DDP is refused."""
    lowering = _lowering()
    if strategy == "fsdp":
        return {"mesh": lowering.fsdp_mesh(split)}
    raise DistributedError(
        f"wrap({type(model).__name__}, 'ddp') after parallelize: DDP cannot replicate tensor-parallel (sharded) parameters.",
        "Use wrap(model, 'fsdp') for data parallelism on the mesh's 'dp' axis (FSDP x TP); under an SPMD lowering the "
        "'dp' axis already is data parallelism (ad.distributed.shard_batch).",
    )


def _lowering() -> Any:
    """The device's tensor-parallel lowering (``Collectives.tensor_parallelism``: DTensor or XLA SPMD)."""
    return current().shims.collectives.tensor_parallelism()


def parallelize(model: Any, plan: Mapping[str, str] | str = "auto", mesh: Any = None) -> Any:
    """Split ``model`` over the ``tp`` axis of ``mesh`` by ``plan`` and return it (moved to the device).

    ``plan`` is ``{glob: style}`` in transformers' vocabulary (``colwise``, ``rowwise``,
    ``sequence_parallel``, ``replicated``, ``colwise_rep``, ``rowwise_split_input``, ...) or ``"auto"``:
    the model's own plan (a ``tp_plan`` its class declares, or a transformers model's
    ``base_model_tp_plan``). ``mesh`` defaults to ``mesh({"tp": -1})``. The device's
    ``Collectives.tensor_parallel`` picks the lowering: DTensor ``parallelize_module`` (one process per
    rank) or torch_xla SPMD ``mark_sharding`` (one process, every device). The plan, the degrees and
    the split dimensions are checked before any process group or compile.

    Tied weights (one Parameter in two modules, ``tie_word_embeddings=True``) stay one Parameter:
    an explicit plan must split every owner on the same dimension (else the pair is named and
    refused); ``"auto"`` leaves a tied pair whose entries disagree replicated.
    """
    lowering = _lowering()
    rules = lowering.expand(model, plan)
    degrees = lowering.default_degrees() if mesh is None else lowering.degrees(mesh)
    lowering.check(model, rules, degrees)
    if mesh is None:
        mesh = _named_mesh(lowering, degrees)
    model = current().shims.placement.move(model)  # keeps every Parameter object: tied weights stay tied
    model = lowering.parallelize(model, rules, mesh)
    _meshes[model] = mesh
    return model


def mesh_of(model: Any) -> Any:
    """The mesh :func:`parallelize` split ``model`` over (None when it did not)."""
    return _meshes.get(model)


def mesh_degrees(mesh: Any) -> dict[str, int]:
    """``{axis: size}`` of a mesh from :func:`mesh` (a ``DeviceMesh`` or an XLA SPMD mesh)."""
    return dict(_lowering().degrees(mesh))


def shard_batch(batch: torch.Tensor, mesh: Any) -> torch.Tensor:
    """The part of the global ``batch`` this process feeds: its ``dp`` slice of dim 0 (one process per rank),
    or on XLA SPMD the whole batch on the device, sharded on ``dp``."""
    sharded: torch.Tensor = _lowering().shard_batch(batch, mesh)
    return sharded


def _named_mesh(lowering: Any, degrees: dict[str, int]) -> Any:
    if lowering.kind == "dtensor":
        init()
    return lowering.mesh(degrees)


def mesh(shape: tuple[int, ...] | int | Mapping[str, int], names: tuple[str, ...] | None = None) -> Any:
    """A mesh over every rank: ``mesh({"dp": -1, "tp": 2})`` by named degrees (-1: what is left), or by shape.

    Named: a ``DeviceMesh`` over the ranks, or on XLA SPMD devices (``Collectives.tensor_parallel ==
    "spmd"``) an ``xs.Mesh`` over the host's devices in this one process. Positional (``mesh((2, 2),
    ("dp", "tp"))``): a ``DeviceMesh`` of the device's mesh type; ``shape`` must multiply to the world size.
    """
    from torch.distributed.device_mesh import init_device_mesh

    if isinstance(shape, Mapping):
        if names is not None:
            raise DistributedError("A mesh by named degrees takes its names from the dict; drop names=.")
        lowering = _lowering()
        return _named_mesh(lowering, lowering.resolve(shape))
    dims = (shape,) if isinstance(shape, int) else tuple(shape)
    init()
    if math.prod(dims) != world_size():
        raise DistributedError(f"A mesh of shape {dims} needs {math.prod(dims)} ranks, but the world has {world_size()}.")
    if names is not None and len(names) != len(dims):
        raise DistributedError(f"The mesh has {len(dims)} dimension(s) but {len(names)} name(s) were given: {names}.")
    return init_device_mesh(current().shims.collectives.mesh_device_type, dims, mesh_dim_names=names)


def shutdown() -> None:
    """Destroy the process group if anydevice made it (a launcher's group, e.g. Ray's, is left alone)."""
    global _owned_group
    if is_initialized() and _owned_group:
        # DDP/FSDP wrappers sit in reference cycles: collect the dropped ones while the group is alive.
        # Otherwise they die at interpreter exit, after the group, and torch 2.13 (gloo) may abort there.
        gc.collect()
        _dist().destroy_process_group()
    _owned_group = False


def local_shard(tensor: torch.Tensor) -> torch.Tensor:
    """This rank's part of ``tensor``: its local shard when ``wrap(model, "fsdp")`` sharded it, else ``tensor`` itself.

    For per-rank reductions without gathering the whole tensor (a checksum, a norm): reduce the
    local parts, then combine them with :func:`all_reduce`.
    """
    to_local = getattr(tensor, "to_local", None)  # a DTensor (FSDP2's sharded parameters)
    return to_local() if callable(to_local) else tensor
