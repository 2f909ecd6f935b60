"""What one training step on the CPU shows, independent of any target: ops, dtypes, shapes, memory, capture.

:class:`Observer` is fed by the script hooks (:mod:`anydevice.preflight.runner`) or by ``ad.check()``:
batches as they are drawn, the model call of the first step (recorded under :class:`OpRecorder` and a
saved-tensors hook for the activation estimate), and the optimizer after its first step.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Iterator, Sequence
from typing import Any

import torch
from torch.utils._python_dispatch import TorchDispatchMode

from anydevice.preflight.schema import (
    DATA_DEPENDENT,
    MASKED,
    Capture,
    CollectiveUse,
    CudaCall,
    GraphBreak,
    Memory,
    Observation,
    OptimizerUse,
    OpUse,
    ShortLastBatch,
    Signature,
)
from anydevice.runtime.strict import user_line

MASK_INDEX = "aten::index.Tensor"


def _has_mask(args: Any) -> bool:
    """Whether an ``aten::index.Tensor`` call indexes by a boolean (or byte) mask."""
    indices = args[1] if len(args) > 1 else ()
    return any(isinstance(i, torch.Tensor) and i.dtype in (torch.bool, torch.uint8) for i in indices or ())


def _tensors(value: Any) -> list[torch.Tensor]:
    """The tensors among an op's arguments (nested lists, tuples and dicts; one level of nesting is enough for ATen)."""
    if isinstance(value, torch.Tensor):
        return [value]
    if isinstance(value, dict):
        value = list(value.values())
    if isinstance(value, (list, tuple)):
        return [t for v in value for t in ((v,) if isinstance(v, torch.Tensor) else v if isinstance(v, (list, tuple)) else ())]
    return []


class OpRecorder(TorchDispatchMode):  # type: ignore[no-untyped-call]  # torch's TorchDispatchMode is untyped
    """Counts every ATen op the step runs, with the user's line of its first call, and the dtypes it produces."""

    def __init__(self) -> None:
        super().__init__()  # type: ignore[no-untyped-call]  # TorchDispatchMode.__init__ is untyped
        self.ops: dict[str, list[Any]] = {}  # name -> [calls, line, first call's arguments, calls before the optimizer step]
        self.dtypes: dict[str, str | None] = {}
        self.collectives: dict[tuple[str, str | None, bool], CollectiveUse] = {}
        self.host_reads_in_optimizer = 0
        self.in_optimizer = False  # set around optimizer.step(): its step counters are host scalars by design
        self.stepped = False  # set after the optimizer step: what follows (logging reads) is after the step's graph
        self.paused = False  # set while the loader makes the next batch (host-side data work)
        self.masks: dict[str, list[Any]] = {}  # boolean-mask indexing (x[mask]): [calls, line, calls before the step]

    def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        out = func(*args, **(kwargs or {}))
        if self.paused:
            return out
        name = func.name()
        if name.startswith("c10d::"):
            self._collective(name, args)
            return out
        if self.in_optimizer and name in DATA_DEPENDENT:
            self.host_reads_in_optimizer += 1
            return out
        entry = self.ops.get(name)
        if entry is None:
            self.ops[name] = [1, user_line(), describe([list(args), dict(kwargs or {})]), int(not self.stepped)]
        else:
            entry[0] += 1
            entry[3] += int(not self.stepped)
        if name == MASK_INDEX and _has_mask(args):
            mask = self.masks.setdefault(name, [0, user_line(), 0])
            mask[0] += 1
            mask[2] += int(not self.stepped)
        # the dtypes produced and consumed: a float64 buffer only read through .float() is still a float64 tensor there
        for value in (*(out if isinstance(out, (tuple, list)) else (out,)), *_tensors(args), *_tensors(kwargs)):
            if isinstance(value, torch.Tensor):
                dtype = str(value.dtype).removeprefix("torch.")
                if dtype not in self.dtypes:
                    self.dtypes[dtype] = user_line()
        return out

    def _collective(self, name: str, args: Any) -> None:
        key = (name, reduce_op_of(args), _via_anydevice())
        use = self.collectives.get(key)
        if use is None:
            self.collectives[key] = CollectiveUse(op=name, reduce_op=key[1], calls=1, line=user_line(), via_anydevice=key[2])
        else:
            use.calls += 1


def reduce_op_of(args: Any) -> str | None:
    """The ``ReduceOp`` name among a ``c10d::`` op's arguments (a TorchScript ``ReduceOp`` object), or None."""
    import torch.distributed as dist

    names = {v.value: n for n, v in dist.ReduceOp.RedOpType.__members__.items()}
    for arg in args:
        if isinstance(arg, torch.ScriptObject) and "ReduceOp" in str(arg._type()):
            code = int(getattr(arg, "op")())  # noqa: B009  # a TorchScript method: mypy cannot see it
            return names.get(code, str(code))
    return None


def _via_anydevice() -> bool:
    """Whether ``anydevice.distributed`` is on the stack (its ``AVG`` is emulated where a process group lacks it)."""
    import sys

    frame = sys._getframe(2)
    while frame is not None:
        if frame.f_globals.get("__name__") == "anydevice.distributed":
            return True
        frame = frame.f_back  # type: ignore[assignment]  # f_back may be None; the loop stops there
    return False


class _Opaque(Exception):
    """An argument :func:`describe` cannot put in JSON (the op is then not probed)."""


def describe(value: Any) -> Any:
    """A JSON form of an op's arguments, enough to call it again on another device; None when something is opaque."""
    try:
        return _describe(value)
    except _Opaque:
        return None


def _describe(value: Any) -> Any:
    if isinstance(value, torch.Tensor):
        if not all(isinstance(size, int) for size in value.shape):
            raise _Opaque("a symbolic shape (a traced data-dependent size)")
        return {"tensor": list(value.shape), "dtype": str(value.dtype).removeprefix("torch.")}
    if isinstance(value, torch.dtype):
        return {"dtype": str(value).removeprefix("torch.")}
    if isinstance(value, torch.device):
        return {"device": True}
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    if isinstance(value, (list, tuple)):
        return [_describe(v) for v in value]
    if isinstance(value, dict):
        return {
            "kwargs": {str(k): _describe(v) for k, v in value.items() if not isinstance(v, (torch.layout, torch.memory_format))}
        }
    raise _Opaque(type(value).__name__)


def rebuild(value: Any, device: Any) -> Any:
    """The arguments :func:`describe` gave, as real values on ``device`` (tensors of ones; integers as zeros)."""
    if isinstance(value, dict):
        if "tensor" in value:
            dtype = getattr(torch, value["dtype"])
            make = torch.zeros if not (dtype.is_floating_point or dtype.is_complex) else torch.ones
            return make(value["tensor"], dtype=dtype).to(device)
        if "dtype" in value:
            return getattr(torch, value["dtype"])
        if "device" in value:
            return device
        return {k: rebuild(v, device) for k, v in value["kwargs"].items()}
    if isinstance(value, list):
        return [rebuild(v, device) for v in value]
    return value


def signature(batch: Any) -> str:
    """The shapes and dtypes of every tensor in ``batch`` (nested tuples, lists, dicts), as one string."""
    parts: list[str] = []

    def walk(value: Any) -> None:
        if isinstance(value, torch.Tensor):
            parts.append(f"{tuple(value.shape)}:{str(value.dtype).removeprefix('torch.')}")
        elif isinstance(value, dict):
            for key in sorted(value, key=str):
                walk(value[key])
        elif isinstance(value, (tuple, list)):
            for item in value:
                walk(item)

    walk(batch)
    return ", ".join(parts) or "(no tensors)"


def _bytes(tensors: Any) -> int:
    seen: set[int] = set()
    total = 0
    for t in tensors:
        if isinstance(t, torch.Tensor) and id(t) not in seen:
            seen.add(id(t))
            total += t.numel() * t.element_size()
    return total


class _WeightIndex:
    """The model's parameters and buffers, recognised again when autograd saves them (or a view of them, such as
    ``weight.t()``) for backward: by storage on a real device, by the view's base on meta (no storage there)."""

    def __init__(self, model: torch.nn.Module) -> None:
        tensors = [*model.parameters(), *model.buffers()]
        self.ids = {id(t) for t in tensors}
        self.storages = {_storage_key(t) for t in tensors} - {None}

    def holds(self, tensor: torch.Tensor) -> bool:
        """Whether ``tensor`` is one of the weights or a view of one."""
        key = _storage_key(tensor)
        if key is not None:
            return key in self.storages
        base: torch.Tensor | None = tensor
        while base is not None:
            if id(base) in self.ids:
                return True
            base = base._base
        return False


def _storage_key(tensor: torch.Tensor) -> tuple[str, int] | None:
    """Where a tensor's data lives; ``None`` where there is no data to compare (meta, empty, wrapper tensors)."""
    try:
        pointer = tensor.untyped_storage().data_ptr()
    except (RuntimeError, NotImplementedError):
        return None
    return (str(tensor.device), pointer) if pointer else None


def unwrap(model: torch.nn.Module) -> torch.nn.Module:
    """The user's module inside ``torch.compile`` and DDP/FSDP-style wrappers."""
    for _ in range(4):
        inner = getattr(model, "_orig_mod", None) or getattr(model, "module", None)
        if not isinstance(inner, torch.nn.Module):
            break
        model = inner
    return model


class Observer:
    """Collects an :class:`Observation` from batches, the first step's model call and the optimizer."""

    def __init__(self, steps: int, world_size: int = 1, mesh: dict[str, int] | None = None) -> None:
        self.steps = steps
        self.world_size = world_size
        self.mesh = mesh
        self.mesh_line: str | None = None
        self.batches: list[str] = []
        self.recorder = OpRecorder()
        self.model: torch.nn.Module | None = None
        self.args: tuple[Any, ...] = ()
        self.kwargs: dict[str, Any] = {}
        self.activations = 0
        self.memory: Memory | None = None
        self.steps_done = 0
        self.short_last: ShortLastBatch | None = None
        self.script_mesh: dict[str, int] | None = None
        self.script_mesh_line: str | None = None
        self.optimizer_uses: dict[int, list[Any]] = {}  # id -> [optimizer, steps, line of its first step]
        self.optimizers: list[OptimizerUse] = []
        self.other_activations = 0
        """Bytes saved for backward by the other models' first training calls (a GAN's discriminator)."""

    def caller(self) -> str | None:
        """``file:line`` of the user's code calling in now (the first frame outside torch and anydevice)."""
        return user_line()

    def batch(self, batch: Any) -> None:
        """A batch the loader yielded (only the first ``steps`` count)."""
        if len(self.batches) < self.steps:
            self.batches.append(signature(batch))

    @contextlib.contextmanager
    def first_call(self, model: torch.nn.Module, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Iterator[None]:
        """Around the model's first call: remember it and measure the tensors saved for backward."""
        self.model, self.args, self.kwargs = model, detached(args), detached(kwargs)
        saved: list[torch.Tensor] = []
        weights = _WeightIndex(model)

        def pack(tensor: torch.Tensor) -> torch.Tensor:
            if not weights.holds(tensor):  # a weight saved for backward is counted as a parameter already
                saved.append(tensor)
            return tensor

        with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
            yield
        self.activations = _bytes(saved)

    @contextlib.contextmanager
    def other_call(self, model: torch.nn.Module) -> Iterator[None]:
        """Around another model's first training call (a GAN's discriminator): its tensors saved for backward add to
        the activation estimate."""
        saved: list[torch.Tensor] = []
        weights = _WeightIndex(model)

        def pack(tensor: torch.Tensor) -> torch.Tensor:
            if not weights.holds(tensor):
                saved.append(tensor)
            return tensor

        with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
            yield
        self.other_activations += _bytes(saved)

    def optimizer_step(self, optimizer: torch.optim.Optimizer) -> None:
        """An optimizer stepped: counted, with the user's line of its first step."""
        use = self.optimizer_uses.get(id(optimizer))
        if use is None:
            self.optimizer_uses[id(optimizer)] = [optimizer, 1, self.caller()]
        else:
            use[1] += 1

    def optimizer_stepped(
        self,
        optimizers: Sequence[torch.optim.Optimizer],
        model: torch.nn.Module | None = None,
        unstepped: Sequence[tuple[torch.optim.Optimizer, str | None]] = (),
    ) -> None:
        """After the steps: parameters, gradients and every optimizer's real state (a GAN's two optimizers, both).

        ``unstepped``: optimizers the script made (with the line) that did not step in the steps run: listed with
        ``steps=0``, their state estimated from their kind (as on meta), their parameters counted."""
        params: list[torch.Tensor] = [
            p for opt in [*optimizers, *(o for o, _ in unstepped)] for group in opt.param_groups for p in group["params"]
        ]
        held = {id(p) for p in params}
        model_ids = {id(p) for p in model.parameters()} if model is not None else set()
        if model is not None:
            params += [p for p in model.parameters() if id(p) not in held]  # a model no optimizer updates still holds them
        grads = [p.grad if p.grad is not None else p for p in params if p.requires_grad]
        self.optimizers = []
        for opt in optimizers:
            own = [p for group in opt.param_groups for p in group["params"]]
            _, steps, line = self.optimizer_uses.get(id(opt), (opt, 1, None))
            self.optimizers.append(
                OptimizerUse(
                    name=type(opt).__name__,
                    parameters=sum(p.numel() for p in {id(p): p for p in own}.values()),
                    parameter_bytes=_bytes(own),
                    state_bytes=_bytes(_state_tensors(opt)),
                    steps=steps,
                    line=line,
                    updates_model=any(id(p) in model_ids for p in own),
                )
            )
        for opt, line in unstepped:
            own = [p for group in opt.param_groups for p in group["params"]]
            self.optimizers.append(
                OptimizerUse(
                    name=type(opt).__name__,
                    parameters=sum(p.numel() for p in {id(p): p for p in own}.values()),
                    parameter_bytes=_bytes(own),
                    state_bytes=optimizer_state_bytes(opt, _bytes(own)),
                    steps=0,
                    line=line,
                    updates_model=any(id(p) in model_ids for p in own),
                )
            )
        self.memory = Memory(
            parameters=_bytes(params),
            gradients=_bytes(grads),
            optimizer_state=sum(use.state_bytes for use in self.optimizers),
            activations=self.activations + self.other_activations,
            optimizer=" + ".join(use.name for use in self.optimizers) or None,
            optimizers=len(self.optimizers),
        )

    def finish(self, cuda_calls: list[CudaCall] | None = None, inventory: bool = True) -> Observation:
        """Run the capture and export analyses on the remembered call and assemble the observation."""
        counts: dict[str, int] = {}
        for sig in self.batches:
            counts[sig] = counts.get(sig, 0) + 1
        ops = [
            OpUse(op=name, calls=calls, line=line, example=ex, before_step=before)
            for name, (calls, line, ex, before) in sorted(self.recorder.ops.items())
        ]
        capture, export_error = Capture(error="the model was never called"), None
        core: dict[str, Any] = {}
        if self.model is not None:
            capture = explain(self.model, self.args, self.kwargs)
            if inventory:
                core, export_error = core_aten(self.model, self.args, self.kwargs)
        return Observation(
            steps=self.steps_done,
            signatures=[Signature(signature=s, batches=n) for s, n in counts.items()],
            sequence=[list(counts).index(s) for s in self.batches],
            capture=capture,
            ops=ops,
            core_aten=sorted(core),
            core_examples={op: example for op, example in sorted(core.items()) if example is not None},
            export_error=export_error,
            dtypes=dict(self.recorder.dtypes),
            data_dependent=[op for op in ops if op.op in DATA_DEPENDENT]
            + [OpUse(op=MASKED, calls=c, line=line, before_step=before) for c, line, before in self.recorder.masks.values()],
            memory=self.memory,
            optimizers=self.optimizers,
            cuda_calls=cuda_calls or [],
            world_size=self.world_size,
            mesh=self.mesh,
            mesh_line=self.mesh_line,
            script_mesh=self.script_mesh,
            script_mesh_line=self.script_mesh_line,
            collectives=list(self.recorder.collectives.values()),
            drop_last_fix=_short_last(self.batches),
            short_last_batch=self.short_last,
            versions={"torch": torch.__version__},
        )


def _state_tensors(optimizer: torch.optim.Optimizer) -> list[torch.Tensor]:
    """The tensors of an optimizer's state (AdamW's moments and step counters; LBFGS's direction history, in lists)."""
    from torch.utils._pytree import tree_leaves

    return [v for v in tree_leaves([dict(s) for s in optimizer.state.values()]) if isinstance(v, torch.Tensor)]


def _short_last(batches: list[str]) -> bool:
    """True when only the last batch differs from the others (a partial batch: ``drop_last=True`` fixes it)."""
    return len(batches) > 2 and len(set(batches[:-1])) == 1 and batches[-1] != batches[0]


def detached(value: Any) -> Any:
    """A copy of ``value`` with every tensor detached and cloned (the inputs of a call, kept past the step)."""
    if isinstance(value, torch.Tensor):
        return value.detach().clone()
    if isinstance(value, dict):
        return {k: detached(v) for k, v in value.items()}
    if isinstance(value, (tuple, list)):
        return type(value)(detached(v) for v in value)
    return value


def _first_line(text: str) -> str:
    return next((line.strip() for line in str(text).splitlines() if line.strip()), "")[:300]


def explain(model: torch.nn.Module, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Capture:
    """``torch._dynamo.explain`` of the forward: graphs, breaks with reasons and the user's lines."""
    import torch._dynamo

    torch._dynamo.reset()
    try:
        out = torch._dynamo.explain(unwrap(model))(*args, **kwargs)
    except Exception as exc:
        return Capture(error=f"{type(exc).__name__}: {_first_line(str(exc))}")
    finally:
        torch._dynamo.reset()
    breaks = []
    for reason in out.break_reasons:
        stack = reason.user_stack or []
        line = f"{stack[-1].filename}:{stack[-1].lineno}" if stack else None
        breaks.append(GraphBreak(reason=_first_line(reason.reason), line=line))
    return Capture(graph_count=int(out.graph_count), graph_break_count=int(out.graph_break_count), breaks=breaks)


def core_aten(model: torch.nn.Module, args: tuple[Any, ...], kwargs: dict[str, Any]) -> tuple[dict[str, Any], str | None]:
    """The core-ATen op inventory of the forward (``torch.export`` then ``run_decompositions``), or why it failed.

    Each op maps to its first node's arguments as :func:`describe` gives them (tensors as the shapes and dtypes
    export traced), or None when one is opaque: enough for a lowering probe of an op the step itself never called.
    """
    quiet = logging.getLogger("torch")
    level = quiet.level
    quiet.setLevel(logging.ERROR)  # export logs its failed guards at length; the report keeps the first line
    try:
        program = torch.export.export(unwrap(model), tuple(args), kwargs or None, strict=False).run_decompositions()
    except Exception as exc:
        return {}, f"{type(exc).__name__}: {_first_line(str(exc))}"
    finally:
        quiet.setLevel(level)
    found: dict[str, Any] = {}
    for node in program.graph.nodes:
        if node.op == "call_function" and hasattr(node.target, "name") and node.target.name() not in found:
            traced = torch.fx.node.map_aggregate((node.args, node.kwargs), _traced_value)
            found[node.target.name()] = describe([list(traced[0]), dict(traced[1])])
    return found, None


def _traced_value(value: Any) -> Any:
    """A graph node's traced value (a fake tensor: its shape and dtype are what :func:`describe` keeps)."""
    return value.meta.get("val") if isinstance(value, torch.fx.Node) else value


STATE_COPIES = {"Adam": 2, "AdamW": 2, "Adamax": 2, "NAdam": 2, "RAdam": 2, "Adagrad": 1, "Adadelta": 2, "Rprop": 2, "ASGD": 2}
"""Tensors of the parameters' size each optimizer keeps per parameter (SGD and RMSprop: see :func:`optimizer_state_bytes`)."""


def optimizer_state_bytes(optimizer: torch.optim.Optimizer, parameter_bytes: int) -> int:
    """The optimizer's state in bytes, from its kind and hyper-parameters (for a model whose step cannot run)."""
    kind = type(optimizer).__name__
    group = optimizer.param_groups[0] if optimizer.param_groups else {}
    if kind == "SGD":
        copies = int(bool(group.get("momentum")))
    elif kind == "RMSprop":
        copies = 1 + int(bool(group.get("momentum"))) + int(bool(group.get("centered")))
    else:
        copies = STATE_COPIES.get(kind, 2)  # unknown kind: as Adam, the common case
    return copies * parameter_bytes
