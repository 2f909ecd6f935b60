"""Compiles the observed training step for a TPU slice with libtpu's own compiler, on this host, with no chip.

The model is lowered to JAX by torchax (JAX/XLA's lowering of the PyTorch program, not TorchTPU's own,
which needs a chip), the step (forward, the script's loss, backward, the real optimizer's update) is
jitted with the mesh's shardings over the slice's compile-only devices
(``jax.experimental.topologies``), and ``.lower(shapes).compile()`` runs libtpu. Nothing is allocated:
parameters are shapes, so a model on the meta device is compiled as well as a real one. The answer is
the compiler's: per-device bytes (``memory_analysis``), the collectives in the compiled HLO, or its own
error (``RESOURCE_EXHAUSTED ... exceeds available HBM``). Compiled, never run.

Needs the ``tpu-check`` extra (``jax[tpu]`` and ``torchax``): ``pip install "anydevice[tpu-check]"``.
"""

from __future__ import annotations

import contextlib
import math
import os
import re
import resource
import sys
import time
import traceback
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path
from typing import Any

from anydevice.contract.check_facts import StepLoss
from anydevice.errors import AnyDeviceError
from anydevice.shims.tpu_slices import EXAMPLE, Slice, parse_slice, valid_names

__all__ = ["EXAMPLE", "EXTRA_FIX", "available", "compile_step", "parse_slice", "valid_names"]

EXTRA_FIX = 'pip install "anydevice[tpu-check]" (jax[tpu] and torchax: libtpu\'s compiler, no chip needed)'
COLLECTIVES = ("all-reduce", "reduce-scatter", "all-gather", "all-to-all", "collective-permute")
DATA_AXES = ("dp", "fsdp")
ASSUMPTIONS = (
    "parameters and optimizer state are donated (updated in place, as torch's optimizers do)",
    "gradients are temporaries of the step (zero_grad(set_to_none=True), torch's default)",
    "each data-parallel replica takes the script's batch",
    "lowered by torchax (JAX/XLA's lowering of the PyTorch program, not TorchTPU's own): compiled, not run",
)
_OOM = re.compile(r"\(([\d.]+)([KMGT])\) exceeds available HBM \(([\d.]+)([KMGT])\)")
_UNITS = {"K": 2**10, "M": 2**20, "G": 2**30, "T": 2**40}


Loss = StepLoss
"""The loss the step takes the gradient of (:class:`~anydevice.contract.check_facts.StepLoss`)."""


@dataclass(frozen=True)
class Part:
    """One model of the step with its first training call's inputs, the optimizer that updates it and its loss."""

    model: Any
    args: tuple[Any, ...]
    kwargs: Mapping[str, Any]
    optimizer: Any
    loss: Loss = field(default_factory=Loss)


def prepare_environment(slice_: Slice | None = None) -> None:
    """Point JAX at the CPU and libtpu at compile-only topologies, before JAX loads (no chip is opened).

    ``TPU_ACCELERATOR_TYPE`` is the compiled slice's own (``v6e-8``; read when libtpu loads, so the first slice a
    process compiles names it; the topology asked for wins for every compile).

    ``ALLOW_MULTIPLE_LIBTPU_LOAD``: libtpu takes ``/tmp/libtpu_lockfile`` and a second process that loads it
    would abort; a compile-only process never touches a chip, so several may load it knowingly.
    """
    if "jax" not in sys.modules:
        os.environ.setdefault("JAX_PLATFORMS", "cpu")
    os.environ.setdefault("TPU_SKIP_MDS_QUERY", "1")
    os.environ.setdefault("TPU_WORKER_HOSTNAMES", "localhost")
    os.environ.setdefault("TPU_ACCELERATOR_TYPE", (slice_ or parse_slice(EXAMPLE)).accelerator_type)
    os.environ.setdefault("ALLOW_MULTIPLE_LIBTPU_LOAD", "1")


def available() -> str | None:
    """None when the compiled check can run here; else why not (the extra is missing)."""
    from importlib.util import find_spec

    missing = [name for name in PACKAGES if find_spec(name) is None]
    return f"{', '.join(missing)} not installed" if missing else None


@cache
def _torchax() -> Any:
    """torchax, imported with the named-tensor overloads torch 2.13+ removed tolerated (torchax 0.0.13 names them)."""
    with _tolerate_removed_overloads():
        import torchax
        import torchax.interop

        torchax.default_env()
    return sys.modules["torchax"]


@contextlib.contextmanager
def _tolerate_removed_overloads() -> Iterator[None]:
    """A missing ``aten.X.<Dimname overload>`` reads as a placeholder that no table matches, instead of raising."""
    import torch._ops as ops

    packet: Any = ops.OpOverloadPacket  # its __getattr__ is replaced for the duration, then restored
    original = packet.__getattr__

    def lookup(self: Any, key: str) -> Any:
        try:
            return original(self, key)
        except AttributeError:
            if "dimname" in key.lower() or key.startswith("names") or "_names" in key:
                return _RemovedOverload(f"{self._qualified_op_name}.{key}")
            raise

    packet.__getattr__ = lookup
    try:
        yield
    finally:
        packet.__getattr__ = original


class _RemovedOverload:
    def __init__(self, name: str) -> None:
        self.name = name

    def __repr__(self) -> str:
        return f"<overload {self.name} removed from torch>"


PACKAGES = ("libtpu", "jax", "torchax")
"""The distributions that make the compiled answer (their versions go in every answer and result file)."""


def compiler_name() -> str:
    """``"libtpu 0.0.42.1 via JAX 0.10.2, lowered by torchax 0.0.13"``."""
    from importlib.metadata import version

    return f"libtpu {version('libtpu')} via JAX {version('jax')}, lowered by torchax {version('torchax')}"


@cache
def capacity_bytes(topology: str) -> int | None:
    """Usable HBM per device as libtpu states it: the limit in its answer to a program that cannot fit."""
    import jax
    import jax.numpy as jnp
    import numpy as np
    from jax.experimental import topologies
    from jax.sharding import Mesh, NamedSharding, PartitionSpec

    devices = topologies.get_topology_desc(topology_name=topology, platform="tpu").devices
    too_big = NamedSharding(Mesh(np.array(devices[:1]), ("one",)), PartitionSpec())
    try:
        jax.jit(lambda: jnp.zeros((2**40 // 4,), jnp.float32), out_shardings=too_big).lower().compile()
    except Exception as exc:  # the compiler's out-of-memory answer carries the capacity
        found = _OOM.search(str(exc))
        return int(float(found.group(3)) * _UNITS[found.group(4)]) if found else None
    return None


def compile_step(
    model: Any,
    args: tuple[Any, ...],
    kwargs: Mapping[str, Any] | None,
    *,
    optimizer: Any,
    target: str | Slice,
    mesh: Mapping[str, int] | None = None,
    loss: Loss | None = None,
    plan: Any = "auto",
    parts: Sequence[Part] = (),
    costs: bool = False,
) -> dict[str, Any]:
    """Compile one training step of ``model`` on ``args``/``kwargs`` for the TPU slice ``target`` (``"v5e-8"``).

    ``mesh``: axis -> degree over the slice's devices (``dp`` replicates parameters and optimizer state,
    ``fsdp`` shards them, ``tp`` follows ``plan``; -1 is what is left; default: ``dp`` over every device).
    ``parts``: the script's other models, each with its first training call's inputs and the optimizer that
    updates it (a GAN's discriminator): in the same program, each with its parameters, state, summed-output loss
    and update (``program`` says so).
    ``costs``: also return the compiled program's ``cost`` (its ``cost_analysis()`` per chip: flops, bytes accessed,
    optimal_seconds) and ``collective_bytes`` (per collective kind, the bytes its operands' HLO shapes name, per chip):
    for ``anydevice plan``; not part of ``CompiledStep``.
    Never raises for what the compiler says (an error is in the result); raises ``AnyDeviceError`` for input
    anydevice refuses (the extra missing, a float64 tensor, an unknown optimizer, a mesh that does not fit).
    Returns the fields of ``anydevice.preflight.schema.CompiledStep`` (docs/check.md).
    """
    slice_ = parse_slice(target) if isinstance(target, str) else target
    why = available()
    if why:
        raise AnyDeviceError(f"A compiled check for tpu:{slice_.name} needs libtpu's compiler here: {why}.", EXTRA_FIX)
    _refuse_float64(model, args, kwargs or {})
    for part in parts:
        _refuse_float64(part.model, part.args, part.kwargs)
    prepare_environment(slice_)
    import jax
    from jax.experimental import topologies

    started = time.perf_counter()
    devices = topologies.get_topology_desc(topology_name=slice_.topology, platform="tpu").devices
    degrees = _degrees(mesh, len(devices))
    main = Part(model, args, dict(kwargs or {}), optimizer, loss or Loss())
    program, described, timings = _program([main, *parts], degrees, devices, plan)
    result: dict[str, Any] = dict(
        compiler=compiler_name(),
        target=f"tpu:{slice_.name}",
        topology=slice_.topology,
        counting=slice_.counting,
        chips=slice_.chips,
        devices=len(devices),
        device_kind=str(devices[0].device_kind),
        mesh=degrees,
        program=described,
        assumptions=list(ASSUMPTIONS),
        ok=False,
        seconds=0.0,
    )
    if parts:  # a GAN's discriminator: its parameters, state and update are in, its coupling to the first model is not
        result["assumptions"].append(
            "the script's other models are stepped on their own first inputs and losses (a summed output where the loss is "
            "not recognised): no gradient flows from one model through another (a generator's through the discriminator)"
        )
    effort = float(jax.config.jax_exec_time_optimization_effort)
    if effort:  # set by the caller (the benchmark's quick schedule): said, since the schedule decides the temporaries
        result["assumptions"].append(f"compiled with JAX's exec_time_optimization_effort={effort:g}, not the default 0")
    per_chip = len(devices) // slice_.chips
    capacity = capacity_bytes(slice_.topology)
    result["capacity_bytes"] = capacity * per_chip if capacity else None
    declared = slice_.chip.hbm_bytes
    result["assumptions"].append(
        f"capacity: {capacity * per_chip / 2**30:.2f} GiB per chip, as libtpu states it usable (the chips catalogue declares "
        f"{declared / 2**30:g} GiB, {slice_.chip.source})"
        if capacity and declared
        else "capacity: libtpu stated none for this slice"
    )
    try:
        compiled = program()
    except Exception as exc:
        result["seconds"] = round(time.perf_counter() - started, 2)
        return _failed(result, exc, per_chip)
    finally:
        result["host_peak_rss_bytes"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    result["seconds"] = round(time.perf_counter() - started, 2)
    result["lower_seconds"] = timings.get("lower_seconds")
    stats = compiled.memory_analysis()
    sizes = {
        "arguments": stats.argument_size_in_bytes,
        "outputs": stats.output_size_in_bytes,
        "aliased": stats.alias_size_in_bytes,
        "temporaries": stats.temp_size_in_bytes,
        "code": stats.generated_code_size_in_bytes,
    }
    sizes["total"] = sizes["arguments"] + sizes["outputs"] - sizes["aliased"] + sizes["temporaries"] + sizes["code"]
    result["per_chip_bytes"] = per_chip_bytes = {k: int(v) * per_chip for k, v in sizes.items()}
    text = compiled.as_text()
    result["collectives"] = {name: n for name in COLLECTIVES if (n := len(re.findall(rf"\b{name}(?:-start)?\(", text)))}
    if costs:
        result["cost"] = _cost(compiled, per_chip)
        result["collective_bytes"] = {k: v * per_chip for k, v in collective_bytes(text).items()}
    result["ok"] = True
    # a capacity the compiler did not state makes the answer unknown (None), never "fits"
    result["fits"] = None if result["capacity_bytes"] is None else per_chip_bytes["total"] <= result["capacity_bytes"]
    return result


def _cost(compiled: Any, per_chip: int) -> dict[str, float]:
    """``cost_analysis()``'s flops, bytes accessed and optimal_seconds, per chip (libtpu's counts are per device)."""
    found = compiled.cost_analysis()
    found = found[0] if isinstance(found, (list, tuple)) and found else found or {}
    out = {k: float(found[k]) * per_chip for k in ("flops", "bytes accessed") if k in found}
    if "optimal_seconds" in found:
        out["optimal_seconds"] = float(found["optimal_seconds"])  # a time: the chip's devices run at once
    return out


_DTYPE_BYTES = {"pred": 1, "s8": 1, "u8": 1, "s16": 2, "u16": 2, "f16": 2, "bf16": 2, "s32": 4, "u32": 4, "f32": 4}
_DTYPE_BYTES |= {"s64": 8, "u64": 8, "f64": 8, "f8e4m3fn": 1, "f8e5m2": 1, "c64": 8}
_COLLECTIVE_LINE = re.compile(r"=\s*(.*?)\s(all-reduce|reduce-scatter|all-gather)(-start)?\(")
_SHAPE = re.compile(r"\b([a-z][a-z0-9]*)\[([\d,]*)\]")


def collective_bytes(hlo: str) -> dict[str, int]:
    """Per kind, the bytes of the results of the HLO's all-reduce, reduce-scatter and all-gather, per device, from the
    shapes the text prints (``%x = f32[1024,64]{1,0} all-reduce(%y)``: 262,144 bytes; an async ``-start``'s tuple: its
    last element, the output). libtpu's HLO prints no operand shapes: for all-reduce the result is the operand; for
    all-gather it is the gathered tensor; for reduce-scatter one shard. A loop's body counts once."""
    out: dict[str, int] = {}
    for line in hlo.splitlines():
        found = _COLLECTIVE_LINE.search(line)
        if found is None:
            continue
        shapes = [(t, d) for t, d in _SHAPE.findall(found.group(1)) if t in _DTYPE_BYTES]
        if found.group(3) and len(shapes) > 1:
            shapes = shapes[-1:]
        size = sum(_DTYPE_BYTES[t] * math.prod(int(n) for n in d.split(",") if n) for t, d in shapes)
        out[found.group(2)] = out.get(found.group(2), 0) + size
    return out


def _failed(result: dict[str, Any], exc: BaseException, per_chip: int) -> dict[str, Any]:
    text = str(exc).strip()
    oom = _OOM.search(text)
    if isinstance(exc, MemoryError):
        result["error"] = "the compile ran out of host memory on this machine (MemoryError); the slice's answer is unknown"
    elif oom:
        line = next((ln for ln in text.splitlines() if "Ran out of memory" in ln or "RESOURCE_EXHAUSTED" in ln), text)
        result["error"] = line.strip()
        result["fits"] = False
        result["required_bytes"] = int(float(oom.group(1)) * _UNITS[oom.group(2)]) * per_chip
        result["capacity_bytes"] = int(float(oom.group(3)) * _UNITS[oom.group(4)]) * per_chip
    else:
        op = re.search(r"(aten::?\.?[\w.]+|aten\.[\w.]+)", text)
        first = text.splitlines()[0] if text else ""
        said = f"{type(exc).__name__}: {first}" if first else type(exc).__name__
        result["error"] = said + (f" (op {op.group(1)})" if op and op.group(1) not in first else "")
        result["error_line"] = _user_line(exc)
    return result


def _user_line(exc: BaseException) -> str | None:
    """``file:line`` of the innermost frame of the user's code in ``exc``'s traceback."""
    import anydevice.errors

    ours = (Path(__file__).resolve().parent, Path(anydevice.errors.__file__).resolve().parent)  # shims/ and anydevice/

    def users(filename: str) -> bool:  # by path components: /work/anydevice_examples/x.py is the user's
        if filename.startswith("<"):
            return False
        path = Path(filename).resolve()
        return not {"site-packages", "dist-packages"} & set(path.parts) and not any(path.is_relative_to(d) for d in ours)

    frames = [f for f in traceback.extract_tb(exc.__traceback__) if users(f.filename)]
    return f"{frames[-1].filename}:{frames[-1].lineno}" if frames else None


def _degrees(mesh: Mapping[str, int] | None, devices: int) -> dict[str, int]:
    from anydevice.shims.tp_plan import degrees

    spec = dict(mesh) if mesh else {"dp": -1}
    unknown = [axis for axis in spec if axis not in (*DATA_AXES, "tp")]
    if unknown:
        raise AnyDeviceError(
            f"Mesh axis {unknown[0]!r} is not one the compiled check knows.",
            "Name axes dp (replicate parameters), fsdp (shard parameters and optimizer state) and tp (the plan's split).",
        )
    try:
        resolved: dict[str, int] = degrees(spec, devices)
    except AnyDeviceError as exc:
        raise AnyDeviceError(f"{exc.message} (the slice has {devices} devices)", exc.hint) from None
    return resolved


def _refuse_float64(model: Any, args: tuple[Any, ...], kwargs: Mapping[str, Any]) -> None:
    """JAX makes float64 float32 silently (x64 off): a float64 tensor is named before lowering, never lost in it."""
    import torch
    from torch.utils._pytree import tree_leaves

    named = [(f"parameter {n}", t) for n, t in model.named_parameters()] + [(f"buffer {n}", t) for n, t in model.named_buffers()]
    named += [(f"input {i}", t) for i, t in enumerate(tree_leaves((args, dict(kwargs))))]
    for name, tensor in named:
        if isinstance(tensor, torch.Tensor) and tensor.dtype in (torch.float64, torch.complex128):
            raise AnyDeviceError(
                f"{name} is {tensor.dtype}: TPUs have no 64-bit floats, and the compiled check will not let JAX turn it "
                "into float32 silently.",
                f"Make it float32 (or bfloat16) in the model: {name.split(' ', 1)[1]}.float().",
            )


def _program(parts: Sequence[Part], degrees: dict[str, int], devices: Any, plan: Any) -> tuple[Any, str, dict[str, float]]:
    """A thunk that lowers and compiles the step of every part for the slice, its description, and its timings once it ran.

    The step's loss is the sum of the parts' losses (each part's gradient is its own loss's: the parts share no
    parameter), and each part's optimizer updates its parameters and state, donated.
    """
    import jax
    import numpy as np
    from jax.sharding import Mesh, NamedSharding, PartitionSpec

    axes = tuple(degrees)
    mesh = Mesh(np.array(devices).reshape(tuple(degrees.values())), axes)
    data_axes = tuple(a for a in axes if a in DATA_AXES)
    data_degree = math.prod(degrees[a] for a in data_axes)
    built = [_Built(part, degrees, mesh, data_degree, plan, first=i == 0) for i, part in enumerate(parts)]
    replicated = NamedSharding(mesh, PartitionSpec())
    batch_sharding = NamedSharding(mesh, PartitionSpec(data_axes or None))

    def step(ps: Any, states: Any, bs: Any, xss: Any, yss: Any) -> Any:
        def total(ps: Any) -> Any:
            values = [b.loss_of(p, buf, xs, ys) for b, p, buf, xs, ys in zip(built, ps, bs, xss, yss)]
            return sum(values[1:], values[0])

        value, grads = jax.value_and_grad(total)(ps)
        updated = [b.opt.update(p, g, s) for b, p, g, s in zip(built, ps, grads, states)]
        return value, [u[0] for u in updated], [u[1] for u in updated]

    param_shardings = [b.param_shardings for b in built]
    state_shardings = [tuple(b.param_shardings for _ in range(b.opt.slots)) for b in built]
    jitted = jax.jit(
        step,
        in_shardings=(
            param_shardings,
            state_shardings,
            [{n: replicated for n in b.buffers} for b in built],
            [[batch_sharding] * len(b.inputs) for b in built],
            [[batch_sharding] * len(b.target) for b in built],
        ),
        out_shardings=(replicated, param_shardings, state_shardings),
        donate_argnums=(0, 1),
    )
    params = [b.params for b in built]
    states = [tuple(b.params for _ in range(b.opt.slots)) for b in built]

    def run() -> Any:
        with _tolerate_removed_overloads():
            started = time.perf_counter()
            lowered = jitted.lower(
                params, states, [b.buffers for b in built], [b.inputs for b in built], [b.target for b in built]
            )  # torchax traces the step to StableHLO
            timings["lower_seconds"] = round(time.perf_counter() - started, 2)
            return lowered.compile()  # libtpu

    timings: dict[str, float] = {}
    mesh_text = ", ".join(f"{a}={d}" for a, d in degrees.items())
    described = f"forward, {LOSS_TEXT[parts[0].loss.kind]}, backward, {built[0].opt.description}"
    if len(built) > 1:
        others = "; ".join(
            f"{type(b.part.model).__name__} of {b.parameters:,} parameters: forward, {LOSS_TEXT[b.part.loss.kind]}, "
            f"backward, {b.opt.description}"
            for b in built[1:]
        )
        described += f"; and the script's {len(built) - 1} other model(s) with their optimizers, in the same program: {others}"
    described += f"; mesh {mesh_text}; batch x{data_degree} over the data axes"
    return run, described, timings


LOSS_TEXT = {
    "model": "the model's own loss",
    "cross_entropy": "cross-entropy against the batch's targets, as the script computes",
    "mse": "mean squared error against the batch's targets, as the script computes",
    "sum": "the summed output (the script's loss was not recognised: a backward through every output)",
}


class _Built:
    """A part as the jitted step takes it: torchax's functional module, the shapes and shardings of its parameters,
    buffers, inputs and targets, its optimizer as JAX code, and its loss as a function of those."""

    def __init__(self, part: Part, degrees: dict[str, int], mesh: Any, data_degree: int, plan: Any, first: bool) -> None:
        import jax
        import torch
        from jax.sharding import NamedSharding, PartitionSpec
        from torch.utils._pytree import tree_flatten

        from anydevice.shims.jax_step import optimizer_program

        torchax = _torchax()
        from torchax.interop import JittableModule
        from torchax.ops.mappings import t2j_dtype

        self.part, self.env = part, torchax.default_env()
        self.opt = optimizer_program(part.optimizer)
        self.jittable = JittableModule(part.model, dedup_parameters=True)  # tied weights stay one parameter
        try:
            split = _tp_dims(part.model, plan, degrees.get("tp", 1))
        except AnyDeviceError:
            if first:
                raise
            split = {}  # another model the plan does not fit: replicated over tp (a lower bound of its split)

        def struct(tensor: torch.Tensor, batch: bool = False) -> Any:
            dtype = torch.int32 if tensor.dtype == torch.int64 else tensor.dtype  # TPUs index in int32
            shape = list(tensor.shape)
            if batch and shape:
                shape[0] *= data_degree
            return jax.ShapeDtypeStruct(tuple(shape), t2j_dtype(dtype))

        def param_spec(name: str, tensor: torch.Tensor) -> Any:
            spec: list[str | None] = [None] * tensor.dim()
            if name in split and split[name] < tensor.dim():
                spec[split[name]] = "tp"
            if degrees.get("fsdp", 1) > 1:
                free = [d for d in range(tensor.dim()) if spec[d] is None and tensor.shape[d] % degrees["fsdp"] == 0]
                if free:
                    spec[max(free, key=lambda d: tensor.shape[d])] = "fsdp"
            return NamedSharding(mesh, PartitionSpec(*spec))

        self.params = {n: struct(t) for n, t in self.jittable.params.items()}
        self.parameters = sum(t.numel() for t in self.jittable.params.values())
        self.buffers = {n: struct(t) for n, t in self.jittable.buffers.items()}
        self.param_shardings = {n: param_spec(n, t) for n, t in self.jittable.params.items()}
        self.leaves, self.spec_tree = tree_flatten((part.args, dict(part.kwargs)))
        self.tensor_at = [i for i, leaf in enumerate(self.leaves) if isinstance(leaf, torch.Tensor)]
        self.inputs = [struct(self.leaves[i], batch=True) for i in self.tensor_at]
        loss = part.loss
        self.target = (
            [struct(loss.target, batch=True)] if loss.target is not None and loss.kind in ("cross_entropy", "mse") else []
        )

    def loss_of(self, p: Any, b: Any, xs: Any, ys: Any) -> Any:
        from torch.utils._pytree import tree_unflatten

        p_t, b_t, xs_t, ys_t = self.env.j2t_iso((p, b, xs, ys))
        filled = list(self.leaves)
        for i, x in zip(self.tensor_at, xs_t):
            filled[i] = x
        call_args, call_kwargs = tree_unflatten(filled, self.spec_tree)
        with self.env:
            out = self.jittable.functional_call("forward", p_t, b_t, *call_args, **call_kwargs)
            value = _loss_value(out, self.part.loss, ys_t)
        return self.env.t2j_iso(value)


def _tp_dims(model: Any, plan: Any, tp: int) -> dict[str, int]:
    """Parameter name -> the dimension the tensor-parallel plan splits (empty without a ``tp`` axis)."""
    if tp <= 1:
        return {}
    from anydevice.shims.tp_plan import check_divisible, expand, split_dim

    rules = expand(model, plan)
    check_divisible(model, rules, tp)
    modules = dict(model.named_modules())
    dims: dict[str, int] = {}
    for rule in rules:
        dim = split_dim(modules[rule.name], rule.spec)
        if dim is None:
            continue
        dims[f"{rule.name}.weight"] = dim
        if dim == 0 and getattr(modules[rule.name], "bias", None) is not None:
            dims[f"{rule.name}.bias"] = 0
    return dims


def _loss_value(out: Any, loss: Loss, targets: Any) -> Any:
    import torch
    import torch.nn.functional as F

    own = getattr(out, "loss", None) if not isinstance(out, torch.Tensor) else None
    if own is not None:
        return own
    tensors = [
        t
        for t in (out.values() if isinstance(out, Mapping) else out if isinstance(out, (tuple, list)) else [out])
        if isinstance(t, torch.Tensor)
    ]
    if loss.kind == "model" or (len(tensors) == 1 and tensors[0].dim() == 0):
        return tensors[0].float()
    first = tensors[0]
    if loss.kind == "cross_entropy" and targets:
        return F.cross_entropy(first.flatten(0, -2).float(), targets[0].flatten().long())
    if loss.kind == "mse" and targets:
        return F.mse_loss(first.float(), targets[0].float())
    return sum(t.float().sum() for t in tensors if t.is_floating_point())
