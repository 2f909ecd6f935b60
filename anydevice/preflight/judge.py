"""One target's verdict from an :class:`Observation` and the target plugin's :class:`CheckFacts`.

Nothing here needs the target: each check compares what the CPU run saw with what the plugin declares
(dtypes, static shapes, memory per chip, whole-slice world sizes, op table) or, for a declared dispatch
key whose vendor package is importable here (torch_xla for xla), with the kernels it registers.
"""

from __future__ import annotations

import functools
import importlib
import importlib.util
from collections.abc import Callable, Mapping
from typing import Any, TypeVar

from anydevice.contract.check_facts import CheckFacts
from anydevice.preflight.schema import (
    DATA_DEPENDENT,
    HOST_READ,
    MASKED,
    Finding,
    Observation,
    OpStatus,
    OpVerdict,
    Severity,
    TargetReport,
    Verdict,
)
from anydevice.preflight.topology import collective_findings, mesh_findings, world_findings

T = TypeVar("T")
ORDER: tuple[Verdict, ...] = (
    "runs",
    "runs with CPU fallbacks",
    "partly checked",
    "will recompile",
    "will not launch",
    "will not fit",
    "will not compile",
)
"""Verdicts from the best to the worst."""
CPU_ONLY_MARKERS = ("_for_cpu", "mkldnn", "_cpu_")
"""ATen ops the CPU picks for a portable op (``_scaled_dot_product_flash_attention_for_cpu``): another device picks its own."""
PROBED_ANYWAY = DATA_DEPENDENT - {HOST_READ}
"""Data-dependent ops are probed even with a kernel: torch_xla registers nonzero but runs it on the CPU by default."""
ON_DEVICE_FIX = "keep the value on the device (torch.where, masks) instead of reading or filtering by it"
DROP_LAST_FIX = "drop_last=True on the DataLoader (only the last batch differs)"
BREAK_FIX = "remove the Python branch on tensor data / the data-dependent op (torch.where, masks)"


def _gib(n: int) -> str:
    for unit, size in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if n >= size:
            return f"{n / size:.2f} {unit}"
    return f"{n} B"


def _base(op: str) -> str:
    return op.split(".", 1)[0]


def _plugin_call(owner: str | None, stage: str, fn: Callable[[], T]) -> T:
    """Plugin-declared code (a vendor module to import, a probe) run as every hook call is: through the registry's guard.

    Anything it raises, ``SystemExit`` included, comes back as :class:`~anydevice.runtime.guard.PluginCallError`;
    a third-party plugin's call runs under the registry's deadline.
    """
    from anydevice.runtime import guard

    if owner is None:
        return guard.call(fn, None, "the target's plugin", stage)
    from anydevice.runtime.registry import get_registry

    return get_registry().call(owner, stage, fn)


@functools.cache
def _dispatch_checker(
    dispatch_key: str | None, module_name: str | None, owner: str | None = None
) -> tuple[str, str] | str | None:
    """(dispatch key, the vendor module's version) when the key's kernels can be read here; None when they cannot;
    a string: why importing the declared module failed."""
    from anydevice.runtime.guard import PluginCallError

    if dispatch_key is None:
        return None
    if module_name is not None:
        if importlib.util.find_spec(module_name) is None:
            return None
        try:  # registers the key's kernels; nothing is placed on a device
            module = _plugin_call(owner, f"check: import {module_name}", lambda: importlib.import_module(module_name))
        except PluginCallError as exc:
            return f"importing {module_name} failed: {exc.error}"
        return dispatch_key, f"{module_name} {getattr(module, '__version__', '?')}"
    return dispatch_key, "torch"


NO_TABLE = "no op table for this device is shipped (no vendor table published in anydevice's sources)"


def op_status(
    op: str, facts: CheckFacts, example: Any = None, matrix: Mapping[str, str] | None = None, owner: str | None = None
) -> tuple[OpStatus, str]:
    """How the target runs ``op`` and the source that says so (``owner``: the plugin whose code is called, guarded).

    In order: the plugin's shipped table (``OpTable.ops``), the project's matrix results for the device
    (``matrix``: op -> the real run that counted it as a CPU fallback), the plugin's "never falls back",
    then the dispatch key's kernels and a lowering probe (``example``: the op's first call's arguments).
    """
    table = facts.op_table
    if any(marker in op for marker in CPU_ONLY_MARKERS):
        return "native", "the CPU's own kernel for a portable op (the target picks its own)"
    declared = (table.ops.get(op) or table.ops.get(_base(op))) if table is not None else None
    if table is not None and declared in ("native", "cpu_fallback", "unsupported"):
        status: OpStatus = "native" if declared == "native" else "cpu_fallback" if declared == "cpu_fallback" else "unsupported"
        return status, f"{table.source} {table.version} ({table.date})"
    seen = _in_matrix(op, matrix or {})
    if seen is not None:
        return "cpu_fallback", seen
    if facts.fallback == "never":
        return "native", "the plugin declares that the device runs every op or raises (no CPU fallback)"
    if table is None:
        return "unknown", f"{NO_TABLE}, and no real matrix run of the device counted the op as a CPU fallback"
    checker = _dispatch_checker(table.dispatch_key, table.module, owner)
    if isinstance(checker, str):
        return "unknown", f"{table.source}: {checker}"
    if checker is None:
        module = table.module or "the vendor package"
        return "unknown", f"{table.source}: {module} is not importable here"
    import torch

    key, version = checker
    has = torch._C._dispatch_has_kernel_for_dispatch_key
    if (has(op, key) or has(op, "CompositeImplicitAutograd")) and op not in PROBED_ANYWAY:
        return "native", f"{key} kernels registered by {version}"
    if table.probe is None or example is None:
        return "unknown", f"no {key} kernel registered by {version}, and no probe could run it"
    return _probed(op, example, table.probe, version, owner)


def _in_matrix(op: str, matrix: Mapping[str, str]) -> str | None:
    """The matrix run that saw ``op`` (or another overload of it) fall back, or None."""
    if op in matrix:
        return matrix[op]
    return next((source for name, source in matrix.items() if _base(name) == _base(op)), None)


def _probed(op: str, example: Any, probe: str, version: str, owner: str | None = None) -> tuple[OpStatus, str]:
    """Run ``op`` once on the device through the plugin's probe (guarded): native when nothing fell back."""
    import torch

    from anydevice.preflight.observe import rebuild
    from anydevice.runtime.guard import PluginCallError

    module_name, _, function = probe.partition(":")
    try:
        run_probe: Any = _plugin_call(
            owner,
            f"check: import {probe}",
            lambda: functools.reduce(getattr, function.split("."), importlib.import_module(module_name)),
        )
    except PluginCallError as exc:
        return "unknown", f"the lowering probe {probe} could not be loaded: {exc.error}"
    name, _, overload = op.removeprefix("aten::").partition(".")
    packet = getattr(torch.ops.aten, name, None)
    func = getattr(packet, overload or "default", None) if packet is not None else None
    if func is None:
        return "unknown", f"{op} is not in torch.ops.aten here"
    args, kwargs = example

    def run(device: Any) -> object:
        return func(*rebuild(args, device), **rebuild(kwargs, device))

    try:
        fell_back = _plugin_call(owner, f"check: probe {op}", lambda: run_probe(run))
    except PluginCallError as exc:
        return "unknown", f"the lowering probe could not run it ({type(exc.cause).__name__}) with {version}"
    if fell_back:
        return "cpu_fallback", f"ran on the CPU as {', '.join(fell_back)} in a lowering probe with {version}"
    return "native", f"lowered in a probe with {version}"


def judge(target: str, facts: CheckFacts, obs: Observation, owner: str | None = None) -> TargetReport:
    """The report for ``target``: findings from every check, the verdict and the top fixes (``owner``: its plugin)."""
    findings: list[Finding] = []
    ops = judge_ops(target, facts, obs, owner)
    lines = {u.op: u.line for u in obs.ops}
    verdicts: list[Verdict] = ["runs"]
    fallbacks = [v for v in ops if v.status == "cpu_fallback" and v.in_step]  # what the step's own dispatch runs
    verdicts += _op_findings(ops, lines, findings)
    unknown = [v.op for v in ops if v.status == "unknown"]
    if unknown:
        source = next(v.source for v in ops if v.status == "unknown")
        findings.append(Finding(check="ops", severity="info", message=f"{len(unknown)} op(s) not verified: {source}"))
    verdicts += _dtypes(facts, obs, findings)
    recompiles, compiles, dynamic = _shapes(facts, obs, findings, {v.op for v in ops if v.status == "cpu_fallback"})
    if recompiles:
        verdicts.append("will recompile")
    if dynamic:
        verdicts.append("will not compile")
    _capture(facts, obs, findings)
    for distributed in (world_findings, mesh_findings, collective_findings):
        verdicts += distributed(target, facts, obs, findings)
    if obs.script_mesh is not None and obs.mesh is not None:
        script_mesh = ",".join(f"{a}={n}" for a, n in obs.script_mesh.items())
        message = f"the script makes its own mesh {script_mesh}; the mesh checked is the one given, " + ",".join(
            f"{a}={n}" for a, n in obs.mesh.items()
        )
        findings.append(Finding(check="distributed", severity="info", message=message, line=obs.script_mesh_line))
    verdicts += _memory(facts, obs, findings, target)
    _cuda_calls(facts, obs, findings)
    _refused_calls(facts, obs, findings)
    verdict = max(verdicts, key=ORDER.index)
    calls = {u.op: u.calls for u in obs.ops}
    cuts = sum(u.before_step for u in obs.data_dependent if u.op == HOST_READ) + sum(calls[v.op] for v in fallbacks)
    summary = {
        "runs": "runs",
        "runs with CPU fallbacks": f"runs with {len(fallbacks)} CPU fallback(s)",
        "will recompile": f"will recompile {recompiles} time(s)",
        "partly checked": f"partly checked (the compiled step covers {_covered(obs, target)} of "
        f"{len(obs.optimizers)} optimizers)",
    }.get(verdict, verdict)
    rank = {"error": 0, "warning": 1, "info": 2}
    fixes = list(dict.fromkeys(f.fix for f in sorted(findings, key=lambda f: rank[f.severity]) if f.fix and f.severity != "info"))
    matrix = sorted({v.source.split(":", 1)[0] for v in ops if v.source.startswith("compat matrix ")})
    sources = [*facts.sources, *_table_source(facts, owner), *matrix] or ["nothing declared"]
    return TargetReport(
        target=target,
        verdict=verdict,
        summary=summary,
        cpu_fallbacks=len(fallbacks),
        predicted_compiles=compiles,
        recompiles=recompiles,
        graphs_per_step=1 + cuts if facts.static_shapes else None,
        findings=findings,
        fixes=fixes[:5],
        ops=ops,
        sources=sources,
    )


def _covered(obs: Observation, target: str) -> int:
    """How many of the script's optimizers the compiled step for ``target`` updates."""
    step = obs.compiled.get(target)
    return 1 if step is None or step.optimizers is None else len(step.optimizers)


def judge_ops(target: str, facts: CheckFacts, obs: Observation, owner: str | None = None) -> list[OpVerdict]:
    """A mark for every op of the step and of the forward's core-ATen inventory on ``target``, with its source."""
    from anydevice.preflight.matrix_ops import matrix_fallbacks

    matrix = matrix_fallbacks(target)
    core = set(obs.core_aten)
    step = {u.op: u for u in obs.ops}
    verdicts = []
    for op in sorted(step.keys() | core):
        use = step.get(op)
        example = use.example if use is not None and use.example is not None else obs.core_examples.get(op)
        status, source = op_status(op, facts, example, matrix, owner)
        verdicts.append(OpVerdict(op=op, status=status, source=source, in_step=use is not None, core_aten=op in core))
    return verdicts


OP_PROBLEMS: dict[str, tuple[Severity, str, str, Verdict]] = {
    "cpu_fallback": (
        "warning",
        "runs on the CPU",
        "with ops the target lowers, or move it out of the training step",
        "runs with CPU fallbacks",
    ),
    "unsupported": ("error", "is not supported", "with ops the target supports", "will not compile"),
}


def _op_findings(ops: list[OpVerdict], lines: dict[str, str | None], findings: list[Finding]) -> list[Verdict]:
    verdicts: list[Verdict] = []
    for v in ops:
        if v.status in OP_PROBLEMS and not v.in_step:
            what = OP_PROBLEMS[v.status][1]
            message = f"{v.op} {what} ({v.source}); only in the forward's core-ATen decomposition, not run by the step"
            findings.append(Finding(check="ops", severity="info", message=message))
        elif v.status in OP_PROBLEMS:
            severity, what, fix, verdict = OP_PROBLEMS[v.status]
            message = f"{v.op} {what} ({v.source})"
            findings.append(
                Finding(check="ops", severity=severity, message=message, line=lines.get(v.op), fix=f"replace {v.op} {fix}")
            )
            verdicts.append(verdict)
    return verdicts


def _table_source(facts: CheckFacts, owner: str | None = None) -> list[str]:
    table = facts.op_table
    if table is None:
        return []
    checker = _dispatch_checker(table.dispatch_key, table.module, owner)
    parts = [p for p in (table.version, table.date) if p != "unknown"]
    if isinstance(checker, str):
        parts.append(checker)
    else:
        parts.append(checker[1] if checker else f"{table.module} not importable here" if table.module else "")
    return [f"{table.source} ({', '.join(p for p in parts if p)})"]


def _dtypes(facts: CheckFacts, obs: Observation, findings: list[Finding]) -> list[Verdict]:
    if facts.dtypes is None:
        findings.append(Finding(check="dtypes", severity="info", message="the target's dtypes are not declared: not checked"))
        return []
    bad = {d: line for d, line in obs.dtypes.items() if d not in facts.dtypes}
    for dtype, line in bad.items():
        fix = "use float32 or bfloat16 (e.g. register the buffer as float32)" if "64" in dtype else f"avoid {dtype}"
        findings.append(
            Finding(check="dtypes", severity="error", message=f"{dtype} is not supported on the target", line=line, fix=fix)
        )
    return ["will not compile"] if bad else []


def _shapes(facts: CheckFacts, obs: Observation, findings: list[Finding], fallbacks: set[str]) -> tuple[int, int | None, bool]:
    """(recompiles, predicted compiles of the step, a data-dependent shape no static graph holds); (0, None, False) elsewhere.

    On a static-shape target an op whose output size depends on the data (``nonzero``, a boolean-mask index)
    cannot be in a compiled graph: "will not compile", unless the target is known to run it on the CPU
    (``fallbacks``: marked cpu_fallback, as lazy torch_xla does; then it is a CPU fallback that cuts the graph).
    """
    distinct = len(obs.signatures)
    dynamic = False
    for op in obs.data_dependent:
        severity: Severity = "warning" if facts.static_shapes else "info"
        if op.op == HOST_READ:
            what = "reads a tensor value to the host (a sync and a graph cut)"
        else:
            what = (
                "is a boolean-mask index (x[mask]: an implicit nonzero), its output size set by the data"
                if op.op == MASKED
                else "has a data-dependent output shape"
            )
            runs_on_cpu = op.op.split(" ", 1)[0] in fallbacks
            if facts.static_shapes and not runs_on_cpu:
                severity, dynamic = "error", True
                what += ": no static-shape graph holds it, so the step will not compile"
            elif facts.static_shapes:
                what += ": the target runs it on the CPU, cutting the graph"
        message = f"{op.op} {what}, {op.calls}x in the first step"
        findings.append(Finding(check="shapes", severity=severity, message=message, line=op.line, fix=ON_DEVICE_FIX))
    short = obs.short_last_batch
    extra = short is not None and facts.static_shapes and not obs.drop_last_fix  # the short batch was not among those run
    if short is not None:
        findings.append(
            Finding(
                check="shapes",
                severity="warning" if facts.static_shapes else "info",
                message=f"the last batch of every epoch has {short.last} row(s), not {short.batch_size} "
                f"({short.rows} {'items of ' + short.sampler if short.sampler else 'rows'} are not a whole number of batches)"
                + (
                    ": one more compile per epoch on a static-shape target "
                    f"(from the {'sampler' if short.sampler else 'dataset'}'s length)"
                    if extra
                    else ""
                ),
                line=short.line,
                fix=short.fix + " (only the last batch differs)" if facts.static_shapes else None,
            )
        )
    if not facts.static_shapes:
        return 0, None, False
    recompiles = max(distinct - 1, 0)
    if recompiles:
        listed = "; ".join(f"{s.signature} x{s.batches}" for s in obs.signatures[:6])
        fix = DROP_LAST_FIX if obs.drop_last_fix else "pad every batch to one length (or a few buckets) so shapes repeat"
        findings.append(
            Finding(
                check="shapes",
                severity="warning",
                message=f"{distinct} distinct input signatures in the first "
                f"{sum(s.batches for s in obs.signatures)} batches, each a new compile on a static-shape target: {listed}",
                fix=fix,
            )
        )
    return recompiles + int(extra), distinct + int(extra), dynamic


def _capture(facts: CheckFacts, obs: Observation, findings: list[Finding]) -> None:
    compiled = obs.source_calls.get("torch.compile")
    if compiled is not None and obs.run is not None:  # the runner ran the script with dynamo off
        findings.append(
            Finding(
                check="capture",
                severity="info",
                message="the script calls torch.compile: its steps ran here with dynamo off (eagerly, the same math), "
                "so the model's calls and optimizer steps inside the compiled function were seen; the graphs and "
                "breaks reported are dynamo's capture of the model's forward",
                line=compiled,
            )
        )
    cap = obs.capture
    if cap.error:
        findings.append(Finding(check="capture", severity="info", message=f"torch._dynamo.explain failed: {cap.error}"))
        return
    severity: Severity = "warning" if facts.static_shapes else "info"
    for b in cap.breaks:
        findings.append(
            Finding(check="capture", severity=severity, message=f"graph break: {b.reason}", line=b.line, fix=BREAK_FIX)
        )


def _memory(facts: CheckFacts, obs: Observation, findings: list[Finding], target: str = "") -> list[Verdict]:
    if target in obs.compiled:  # a TPU slice: libtpu's own answer replaces the CPU estimate against the table
        from anydevice.preflight.compiled import compiled_memory

        return compiled_memory(obs.compiled[target], findings, obs.optimizers)
    mem = obs.memory
    if mem is None or not facts.memory_per_chip:
        findings.append(
            Finding(check="memory", severity="info", message="memory not checked (no step, or no memory per chip declared)")
        )
        return []
    need = mem.total
    state = f"{mem.optimizers} optimizers' ({mem.optimizer})" if mem.optimizers > 1 else mem.optimizer or "optimizer"
    parts = (
        f"parameters {_gib(mem.parameters)} + gradients {_gib(mem.gradients)} + {state} state "
        f"{_gib(mem.optimizer_state)} + activations ~{_gib(mem.activations)} = {_gib(need)} per replica"
        + (
            " (from meta shapes: activations are what a meta forward saved for backward)"
            if mem.estimated_from == "meta shapes"
            else ""
        )
    )
    short = [chip for chip, size in facts.memory_per_chip.items() if need > size]
    if len(short) == len(facts.memory_per_chip):
        biggest = max(facts.memory_per_chip.items(), key=lambda kv: kv[1])
        findings.append(
            Finding(
                check="memory",
                severity="error",
                message=f"{parts}: more than any chip holds (largest: {biggest[0]} {_gib(biggest[1])})",
                fix="shard parameters and optimizer state (FSDP), a smaller optimizer "
                "state (SGD, 8-bit Adam) or a smaller model/batch",
            )
        )
        return ["will not fit"]
    if short:
        findings.append(Finding(check="memory", severity="warning", message=f"{parts}: does not fit on {', '.join(short)}"))
    else:
        findings.append(Finding(check="memory", severity="info", message=f"{parts}: fits every chip"))
    return []


def _refused_calls(facts: CheckFacts, obs: Observation, findings: list[Finding]) -> None:
    for name, (why, fix) in sorted(facts.refused_calls.items()):
        line = obs.source_calls.get(name)
        if line is not None:
            shown = name.replace("(device=)", "(device=...)")
            findings.append(Finding(check="calls", severity="error", message=f"{shown}: {why}", line=line, fix=fix))


def _cuda_calls(facts: CheckFacts, obs: Observation, findings: list[Finding]) -> None:
    if facts.runs_cuda_calls:
        return
    for call in obs.cuda_calls:
        findings.append(
            Finding(
                check="cuda_calls",
                severity="error" if call.kind == "refused" else "info",
                message=f"CUDA-only call {call.call}: {call.kind}, {call.outcome}",
                line=call.line,
                fix="run with `anydevice run --cuda-compat`, or port the call to anydevice's API",
            )
        )
