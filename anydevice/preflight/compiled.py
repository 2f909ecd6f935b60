"""The compiled half of ``anydevice check --target DEVICE:<slice>``: which loss, then one compile per slice, and
the findings the compiler's answer gives. The compiling itself is the plugin's ``CheckFacts.slice_compiler``
(for tpu, ``anydevice.shims.tpu_aot``: libtpu through JAX, which it imports only when a slice is named).
"""

from __future__ import annotations

import weakref
from collections.abc import Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from anydevice.errors import AnyDeviceError
from anydevice.preflight.schema import CompiledStep, Finding, OptimizerUse, Verdict

if TYPE_CHECKING:
    from anydevice.contract.check_facts import SliceCompiler
    from anydevice.runtime.registry import Registry

CROSS_ENTROPY_OPS = frozenset({"aten::nll_loss_forward", "aten::nll_loss2d_forward", "aten::cross_entropy_loss"})
MSE_OPS = frozenset({"aten::mse_loss"})


def split_target(target: str) -> tuple[str, str | None]:
    """``"tpu:v5e-8"`` -> ``("tpu", "v5e-8")``: a device and a slice its compiler names; ``"tpu"``, ``"cuda:1"`` -> (it, None)."""
    from anydevice.runtime.selection import split_ref

    name, _, variant = split_ref(target.strip())  # the one grammar (anydevice.runtime.selection)
    return (name, variant) if variant is not None else (target.strip(), None)


def slice_compiler(device: str) -> SliceCompiler | None:
    """The compiler a device's plugin declares for its slices (``CheckFacts.slice_compiler``), or None.

    The plugin's function is called once per registry, through the registry's guard (a plugin that raises is a
    :class:`~anydevice.errors.PluginError` naming it); ``reset_registry()`` forgets it with the registry.
    """
    from anydevice.errors import PluginError
    from anydevice.runtime import guard
    from anydevice.runtime.registry import get_registry

    registry = get_registry()
    known = _compilers.setdefault(registry, {})
    if device not in known:
        entry = registry.get(device)
        factory = entry.spec.check.slice_compiler
        try:
            known[device] = None if factory is None else registry.call(entry.plugin, "slice_compiler", factory)
        except guard.PluginCallError as exc:
            if isinstance(exc.cause, AnyDeviceError):
                raise exc.cause from None
            raise PluginError(exc.plugin, f"{exc.error} (at {exc.stage})") from exc.cause
    return known[device]


_compilers: weakref.WeakKeyDictionary[Registry, dict[str, SliceCompiler | None]] = weakref.WeakKeyDictionary()


def canonical_slice(device: str, name: str) -> str:
    """``"v5litepod-8"`` -> ``"v5e-8"`` by the device's slice compiler; a device without one refuses slice names."""
    compiler = slice_compiler(device)
    if compiler is None:
        raise AnyDeviceError(
            f"--target {device}:{name}: {device} names no slices (no compiler for a slice is declared by its plugin).",
            f"Use --target {device}, or {device}:N for a device index.",
        )
    canonical: str = compiler.parse_slice(name).name
    return canonical


def slice_targets(targets: Iterable[str]) -> list[str]:
    """The targets that name a slice (``"tpu:v5e-8"``), in order."""
    return [t for t in targets if split_target(t)[1] is not None]


def require_compiler(targets: Sequence[str]) -> None:
    """Before anything runs: a slice target whose compiler is not installed is a clear error naming what to install."""
    for target in slice_targets(targets):
        device = split_target(target)[0]
        compiler = slice_compiler(device)
        why = compiler.available() if compiler is not None else "no compiler is declared"
        if why:
            fix = getattr(compiler, "EXTRA_FIX", None) or f"Use --target {device}."
            raise AnyDeviceError(f"{target}: the compiled check needs the vendor's compiler here, and {why}.", fix)


def choose_loss(batch: Any, args: Any, kwargs: Any, ops: Iterable[str]) -> Any:
    """The script's loss as the step's ops show it: cross-entropy or MSE against the batch's tensor that the model
    was not given; else the model's own (a scalar output or ``.loss``), or the summed output (said in the report)."""
    import torch
    from torch.utils._pytree import tree_leaves

    from anydevice.contract.check_facts import StepLoss as Loss

    given = [t for t in tree_leaves((args, kwargs)) if isinstance(t, torch.Tensor)]

    def was_given(t: torch.Tensor) -> bool:  # the model's inputs are kept as copies: recognised by their values
        return any(g.shape == t.shape and g.dtype == t.dtype and torch.equal(g, t) for g in given)

    rest = [t for t in tree_leaves(batch) if isinstance(t, torch.Tensor) and not was_given(t)]
    seen = set(ops)
    if rest and seen & CROSS_ENTROPY_OPS:
        return Loss("cross_entropy", next((t for t in rest if not t.is_floating_point()), rest[0]))
    if rest and seen & MSE_OPS:
        return Loss("mse", rest[0])
    return Loss("sum")


def compile_slices(
    model: Any,
    args: tuple[Any, ...],
    kwargs: Mapping[str, Any],
    optimizer: Any,
    targets: Sequence[str],
    mesh: Mapping[str, int] | None,
    loss: Any,
    parts: Sequence[tuple[Any, tuple[Any, ...], Mapping[str, Any], Any]] = (),
    covered: Sequence[int] | None = None,
) -> dict[str, CompiledStep]:
    """One compile of the step per slice target (``{"tpu:v5e-8": CompiledStep}``); the model may be on meta.

    ``parts``: the script's other models, each with its first training call's inputs and its optimizer, compiled in
    the same program; ``covered``: the indices (in ``observation.optimizers``) of every optimizer the program updates.
    """
    out: dict[str, CompiledStep] = {}
    for target in slice_targets(targets):
        device, name = split_target(target)
        compiler = slice_compiler(device)
        assert compiler is not None and name is not None  # require_compiler ran first
        part = getattr(compiler, "Part", None)
        extra = {"parts": [part(*p) for p in parts]} if part is not None and parts else {}
        fields = compiler.compile_step(model, args, kwargs, optimizer=optimizer, target=name, mesh=mesh, loss=loss, **extra)
        step = CompiledStep.model_validate(fields)
        if covered is not None:
            step.optimizers = list(covered)[: 1 + len(extra.get("parts", []))]
        out[target] = step
    return out


def _gib(n: int | None) -> str:
    return "?" if n is None else f"{n / 2**30:.2f} GiB"


UNKNOWN_CAPACITY_FIX = "compare the bytes per chip with the chip's HBM (`anydevice list`), or update libtpu (tpu-check extra)"


def compiled_memory(step: CompiledStep, findings: list[Finding], optimizers: Sequence[OptimizerUse] = ()) -> list[Verdict]:
    """The compiler's answer as findings: it replaces the CPU estimate's memory verdict for a slice target.

    The compiled step holds one optimizer (the one that updates the observed model). A script that steps more
    (a GAN's two) is answered for that part only: "will not fit" stands (the part alone does not fit), and so does
    a lower bound that adds the other optimizers' parameters and state (resident on the chip, sharded at best by
    the mesh's fsdp and tp degrees) when it exceeds the capacity; otherwise the verdict is "partly checked", never "fits".
    """
    where = f"{step.compiler} for {step.topology} ({step.counting}), mesh " + ", ".join(f"{a}={d}" for a, d in step.mesh.items())
    partial = _partial(step, optimizers)
    if step.ok:
        total, capacity = step.per_chip_bytes.get("total"), step.capacity_bytes
        share = f" ({100 * total / capacity:.0f}%)" if total is not None and capacity else ""
        collectives = ", ".join(f"{n} {name}" for name, n in step.collectives.items()) or "none"
        if step.fits is None:  # no capacity stated: the compiler's bytes are an answer, "fits" is not
            unknown = f"compiled by {where}: {_gib(total)} per chip; the compiler stated no capacity, so fitting is unknown"
            findings.append(Finding(check="memory", severity="warning", message=unknown, fix=UNKNOWN_CAPACITY_FIX))
            return ["partly checked"]
        said = "fits" if partial is None else "the compiled part fits"
        if partial is None and step.optimizers is not None and len(step.optimizers) > 1:
            said += f" (all {len(step.optimizers)} optimizers the script steps are in the program, each with its model)"
        message = (
            f"compiled by {where}: {_gib(total)} per chip of {_gib(capacity)}{share}, {said}; "
            f"collectives {collectives}; {step.seconds:g} s (compiled, not run)"
        )
        findings.append(Finding(check="memory", severity="info", message=message))
        if partial is None:
            return []
        message, outside = partial
        at_least = (total or 0) + outside
        if capacity and at_least > capacity:
            findings.append(
                Finding(
                    check="memory",
                    severity="error",
                    message=f"will not fit: {message}; with their parameters and state the step needs at least "
                    f"{_gib(at_least)} per chip of {_gib(capacity)}",
                    fix="shard parameters and optimizer state over the slice (--mesh fsdp=-1), or a chip with more HBM",
                )
            )
            return ["will not fit"]
        findings.append(Finding(check="memory", severity="error", message=f"partly checked: {message}", fix=PARTIAL_FIX))
        return ["partly checked"]
    if partial is not None:
        findings.append(Finding(check="memory", severity="warning", message=f"partly checked: {partial[0]}"))
    if step.fits is False:
        need = f"needs {_gib(step.required_bytes)} per chip of {_gib(step.capacity_bytes)}: " if step.required_bytes else ""
        fix = (
            "shard parameters and optimizer state over the slice (--mesh fsdp=-1), a larger slice or a chip with more HBM, "
            "or a smaller batch"
            if "fsdp" not in step.mesh
            else "a larger slice or a chip with more HBM, a smaller batch, or activation checkpointing"
        )
        findings.append(Finding(check="memory", severity="error", message=f"will not fit ({where}): {need}{step.error}", fix=fix))
        return ["will not fit"]
    findings.append(
        Finding(
            check="ops",
            severity="error",
            message=f"does not compile ({where}): {step.error}",
            line=step.error_line,
            fix="change the op at that line to one the TPU lowers (static shapes, no float64), or report it to anydevice",
        )
    )
    return ["will not compile"]


PARTIAL_FIX = (
    "check each model's step on its own (ad.check(model, inputs, target=..., optimizer=its optimizer)); "
    "the compiled check builds one model's step with one optimizer"
)


def _partial(step: CompiledStep, optimizers: Sequence[OptimizerUse]) -> tuple[str, int] | None:
    """Which part of the script's step the compiled one covers, and the per-chip bytes (a lower bound) of the
    other optimizers' parameters and state outside it; None when the script steps at most one optimizer."""
    if len(optimizers) < 2:
        return None
    first = next((i for i, o in enumerate(optimizers) if o.updates_model), 0)
    held = set(step.optimizers) if step.optimizers is not None else {first}
    if held >= set(range(len(optimizers))):
        return None  # every optimizer the script steps is in the program
    compiled = optimizers[first]
    others = [o for i, o in enumerate(optimizers) if i not in held]
    outside = [o for o in others if not o.updates_model]  # parameters the compiled model does not have
    shards = step.mesh.get("fsdp", 1) * step.mesh.get("tp", 1)
    per_chip = max(step.devices // step.chips, 1) if step.chips else 1
    outside_bytes = sum(o.parameter_bytes + o.state_bytes for o in outside) // shards * per_chip
    where = f" at {compiled.line}" if compiled.line else ""
    listed = "; ".join(
        f"{o.name} of {o.parameters:,} parameters ({_mb(o.parameter_bytes + o.state_bytes)} with its state)"
        + (f" at {o.line}" if o.line else "")
        + (", made but not stepped in the steps run (its state estimated from its kind)" if not o.steps else "")
        + ("" if not o.updates_model else ", updating the same model: its rule is not in the program")
        for o in others
    )
    message = (
        f"this script steps {len(optimizers)} optimizers; the compiled answer covers {_count(len(held))} (the {compiled.name} "
        f"stepped{where}, updating the model called first{', and others' if len(held) > 1 else ''}); not in it: {listed}"
    )
    return message, outside_bytes


def _count(n: int) -> str:
    return {1: "one", 2: "two", 3: "three"}.get(n, str(n))


def _mb(n: int) -> str:
    return f"{n / 1e6:.1f} MB"


def stopped_step(target: str, why: str) -> CompiledStep:
    """A slice whose compile did not end (out of time or host memory): what is known, and that the answer is not."""
    device, name = split_target(target)
    compiler = slice_compiler(device)
    assert compiler is not None and name is not None
    slice_ = compiler.parse_slice(name)
    return CompiledStep(
        compiler="stopped before it answered",
        target=target,
        topology=slice_.topology,
        counting=slice_.counting,
        chips=slice_.chips,
        devices=0,
        device_kind="unknown",
        mesh={},
        program="not finished",
        ok=False,
        error=why,
        seconds=0.0,
    )


def compiled_lines(step: CompiledStep) -> list[str]:
    """The compiled answer for the text report: what was compiled, by what, and the per-chip bytes."""
    lines = [f"  compiled ({step.compiler}; {step.topology}, {step.counting}, {step.devices} devices of {step.device_kind}):"]
    lines.append(f"    program: {step.program}")
    if step.ok:
        parts = ", ".join(f"{k} {_gib(v)}" for k, v in step.per_chip_bytes.items())
        lines.append(f"    per chip: {parts}; capacity {_gib(step.capacity_bytes)} (as the compiler states it)")
        lines.append(
            f"    collectives: {', '.join(f'{k} {v}' for k, v in step.collectives.items()) or 'none'}; {step.seconds:g} s"
        )
    else:
        lines.append(f"    not compiled: {step.error}" + (f"  ({step.error_line})" if step.error_line else ""))
    lines += [f"    assumes: {a}" for a in step.assumptions]
    return lines
