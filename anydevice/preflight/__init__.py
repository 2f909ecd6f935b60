""" "Will it run on X?": ``anydevice check`` and ``ad.check()``: the first steps run on the CPU, judged per target.

Runs the model (or the user's script, in a child process) for a few steps on the CPU, then judges, per
target device, what its plugin declares (:class:`~anydevice.contract.check_facts.CheckFacts`) against what was
seen: graph breaks, input signatures (compiles on static-shape targets), the op inventory (native / CPU
fallback / unsupported), dtypes, CUDA-only calls, world size against whole slices, and memory against
the chip's. The target is never needed here. Schema: :mod:`anydevice.preflight.schema`; docs/check.md.
"""

from __future__ import annotations

import copy
import itertools
from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING, Any

from anydevice.errors import AnyDeviceError

if TYPE_CHECKING:
    import torch

    from anydevice.preflight.schema import Observation, Report


def targets_of(target: str | Sequence[str]) -> list[str]:
    """Canonical device names for ``target`` (``"tpu,neuron"`` or a list); an unknown name raises ``UnknownDeviceError``."""
    from anydevice.preflight.compiled import canonical_slice
    from anydevice.runtime.registry import get_registry
    from anydevice.runtime.selection import parse_ref

    names = [t.strip() for t in (target.split(",") if isinstance(target, str) else target) if t.strip()]
    if not names:
        raise AnyDeviceError("No target given.", "Name one or more devices: --target tpu,neuron,xla (see `anydevice list`).")
    registry = get_registry()
    out = []
    for name in names:
        ref = parse_ref(name, registry)  # "tpu:v5e-8": the plugin's facts and a step compiled for that slice
        slice_name = ref.slice_name or (ref.chip.name if ref.chip is not None else None)
        out.append(f"{ref.name}:{canonical_slice(ref.name, slice_name)}" if slice_name else ref.name)
    return list(dict.fromkeys(out))


def report(observation: Observation, targets: Sequence[str], script: str | None = None) -> Report:
    """Judge ``observation`` for every target (canonical names) and validate the result against the schema."""
    from anydevice.preflight.compiled import slice_compiler, split_target
    from anydevice.preflight.judge import judge
    from anydevice.preflight.schema import Finding, Report
    from anydevice.runtime.registry import get_registry

    registry = get_registry()
    reports = []
    for t in targets:
        entry = registry.get(split_target(t)[0])
        r = judge(t, entry.spec.check, observation, entry.plugin)
        r.compile = observation.compiled.get(t)
        compiler = slice_compiler(t) if split_target(t)[1] is None else None
        if compiler is not None:  # the estimate's finding says where the compiler's answer is
            hint = f"; a slice target (--target {t}:{compiler.EXAMPLE}) gets the compiler's answer"
            memory = next((f for f in r.findings if f.check == "memory"), None)
            if memory is not None:
                memory.message += hint
            else:
                r.findings.append(Finding(check="memory", severity="info", message=hint.removeprefix("; ")))
        reports.append(r)
    from anydevice.contract.detect import version_of

    observation.versions.setdefault("anydevice", version_of("anydevice") or "unknown")
    result = Report(script=script, observation=observation, targets=reports, ok=all(r.verdict == "runs" for r in reports))
    return Report.model_validate(result.model_dump())  # a round trip through the schema: what is printed is valid


def check(
    model: torch.nn.Module,
    example_inputs: Any,
    *,
    target: str | Sequence[str],
    loader: Iterable[Any] | None = None,
    optimizer: torch.optim.Optimizer | None = None,
    steps: int = 4,
    world_size: int = 1,
    mesh: dict[str, int] | None = None,
) -> Report:
    """Will ``model`` run on ``target``? One step on the CPU (or traced from shapes on meta), judged per target.

    A slice target (``"tpu:v5e-8"``) also compiles the step with the vendor's compiler for that slice (for tpu,
    libtpu: the ``tpu-check`` extra); ``mesh`` then spans the slice's devices (``{"fsdp": -1}``).

    ``example_inputs`` (a tuple of positional arguments, or one tensor) is called on a CPU copy of the model:
    forward, a backward of the summed output and, with ``optimizer``, one step of a copy of it on the model's
    copy (the caller's model and optimizer are untouched). A model on the meta device (or example inputs on
    meta, or given as ``torch.Size`` shapes: float32) is checked from shapes alone: the same step runs on meta
    tensors (ops and dtypes from meta kernels, memory from shapes and the optimizer's kind), nothing materialized.
    ``loader``: the input signatures come from its first ``steps`` batches instead of the example. ``world_size`` and ``mesh``
    (``{"dp": -1, "tp": 4}``) are checked against each target's topology. Returns a
    :class:`~anydevice.preflight.schema.Report`; ``report.ok`` is True when every target "runs".
    """
    import torch

    from anydevice.preflight.compiled import compile_slices, require_compiler
    from anydevice.preflight.observe import Observer, optimizer_state_bytes
    from anydevice.preflight.schema import FROM_SHAPES

    names = targets_of(target)
    require_compiler(names)
    refuse_closure_optimizer(optimizer)
    args = (
        example_inputs if isinstance(example_inputs, tuple) and not isinstance(example_inputs, torch.Size) else (example_inputs,)
    )
    meta = any(p.is_meta for p in itertools.chain(model.parameters(), model.buffers()))
    meta = meta or any(isinstance(a, torch.Size) or (isinstance(a, torch.Tensor) and a.is_meta) for a in args)
    work, opt = copy.deepcopy((model, optimizer))  # one memo: the copied optimizer holds the copied parameters
    device = "meta" if meta else "cpu"  # meta: shapes only, nothing materialized (a model too large for this host)
    work = work.to(device).train()
    args = tuple(_example(a, device) for a in args)
    observer = Observer(steps, world_size, mesh)
    batches = list(itertools.islice(loader, steps)) if loader is not None else [args]
    for batch in batches:
        observer.batch(batch)
    with observer.recorder:
        with observer.first_call(work, args, {}):
            out = work(*args)
        loss = _scalar(out)
        if loss is not None:
            torch.autograd.backward(loss)
        stepped = opt is None
        if opt is not None:
            observer.recorder.in_optimizer = True
            try:
                opt.step()
                stepped = True
            except Exception:
                if not meta:
                    raise
            observer.recorder.in_optimizer = False
    observer.steps_done = 1
    observer.optimizer_stepped([opt] if opt is not None else [], work)
    if meta and observer.memory is not None:
        observer.memory.estimated_from = "meta shapes"
        if not stepped and opt is not None:  # its step has no meta kernel here: the state from the optimizer's kind
            observer.memory.optimizer_state = optimizer_state_bytes(opt, observer.memory.parameters)
    observation = observer.finish()
    observation.compiled = compile_slices(work, args, {}, opt, names, mesh, None, covered=[0] if opt is not None else [])
    result = report(observation, names)
    if meta:
        result.kind = FROM_SHAPES
    return result


def refuse_closure_optimizer(optimizer: torch.optim.Optimizer | None) -> None:
    """An optimizer whose ``step`` needs a closure (LBFGS) is refused by name: ``ad.check`` steps it once, without one."""
    import inspect

    if optimizer is None:
        return
    try:
        closure = inspect.signature(type(optimizer).step).parameters.get("closure")
    except (TypeError, ValueError):
        return  # a step without a readable signature: stepped as any other
    if closure is not None and closure.default is inspect.Parameter.empty:
        kind = type(optimizer).__name__
        raise AnyDeviceError(
            f"ad.check cannot step {kind}: its step needs a closure that recomputes the loss "
            f"({kind}.step(closure)), and ad.check steps the optimizer once, without one.",
            f"Check the script that steps it (`anydevice check train.py`, which runs its own {kind}.step(closure)), "
            "or pass an optimizer with the same state (Adam, SGD) to ad.check.",
        )


def _example(value: Any, device: str) -> Any:
    """An example input on ``device``; a ``torch.Size`` is a float32 tensor of that shape (on meta: no memory)."""
    import torch

    if isinstance(value, torch.Size):
        return torch.empty(value, device=device)
    return value.to(device) if isinstance(value, torch.Tensor) else value


def _scalar(out: Any) -> torch.Tensor | None:
    import torch

    tensors = [t for t in (out if isinstance(out, (tuple, list)) else [out]) if isinstance(t, torch.Tensor)]
    floats = [t.float().sum() for t in tensors if t.requires_grad and t.is_floating_point()]
    return torch.stack(floats).sum() if floats else None
