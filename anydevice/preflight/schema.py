"""The JSON schema of ``anydevice check --json`` and ``ad.check()``: pydantic models, validated on output.

``Observation`` is what was seen on the CPU (one run of the script's first steps, or of the model on
its example inputs); ``Report`` adds one ``TargetReport`` per target. docs/check.md documents every field.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

SCHEMA_VERSION = 1
Verdict = Literal["runs", "runs with CPU fallbacks", "will recompile", "will not compile", "will not fit", "will not launch"]
"""Worst first: will not compile > will not fit > will not launch > will recompile > runs with CPU fallbacks > runs."""
Severity = Literal["error", "warning", "info"]
OpStatus = Literal["native", "cpu_fallback", "unsupported", "unknown"]

HOST_READ = "aten::_local_scalar_dense"
"""The op that reads a device value to the host (``.item()``, ``float(t)``, a Python branch on a tensor)."""


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid")


class GraphBreak(_Model):
    """One ``torch._dynamo`` graph break: why, and the user's line."""

    reason: str
    line: str | None = None


class Capture(_Model):
    """``torch._dynamo.explain`` of the model's forward on the first batch."""

    graph_count: int | None = None
    graph_break_count: int | None = None
    breaks: list[GraphBreak] = Field(default_factory=list)
    error: str | None = None


class Signature(_Model):
    """One distinct input signature (shapes and dtypes of the batch's tensors) and how many batches had it."""

    signature: str
    batches: int


class OpUse(_Model):
    """An ATen op the training step ran on the CPU: calls in that step and the user's line of the first call."""

    op: str
    calls: int
    line: str | None = None
    before_step: int = 0
    """Of ``calls``, those before the optimizer step (the rest ran after it, e.g. a loss read for logging)."""
    example: Any = None
    """The first call's arguments (``[args, {"kwargs": ...}]``, tensors as shape and dtype), for a lowering probe."""


class Memory(_Model):
    """Bytes per replica after one step on the CPU (optimizer state from the real optimizer)."""

    parameters: int
    gradients: int
    optimizer_state: int
    activations: int
    optimizer: str | None = None

    @property
    def total(self) -> int:
        return self.parameters + self.gradients + self.optimizer_state + self.activations


class CollectiveUse(_Model):
    """A collective the step ran (a ``c10d::`` op): its reduction, calls in the first step and the user's line."""

    op: str
    reduce_op: str | None = None
    """The ``ReduceOp`` name (``SUM``, ``AVG``, ``MAX``, ...) of a reducing collective, else None."""
    calls: int
    line: str | None = None
    via_anydevice: bool = False
    """Called through ``ad.distributed`` (which emulates ``AVG`` where a process group lacks it)."""


class CudaCall(_Model):
    """One distinct CUDA call the script made, from cuda-compat's migration report of the steps run on the CPU."""

    call: str
    kind: Literal["redirected", "answered neutrally", "refused"]
    outcome: str
    line: str | None = None
    """``file:line`` of its first occurrence in user code (the first frame outside torch and anydevice)."""


class Observation(_Model):
    """What the CPU run saw, independent of any target."""

    steps: int
    signatures: list[Signature]
    sequence: list[int] = Field(default_factory=list)
    """For each batch drawn, in order, the index of its signature in ``signatures``."""
    capture: Capture
    ops: list[OpUse]
    core_aten: list[str] = Field(default_factory=list)
    core_examples: dict[str, Any] = Field(default_factory=dict)
    """For core-ATen ops: the first node's arguments (as ``OpUse.example``), for a lowering probe of ops the step never ran."""
    export_error: str | None = None
    dtypes: dict[str, str | None] = Field(default_factory=dict)
    data_dependent: list[OpUse] = Field(default_factory=list)
    memory: Memory | None = None
    cuda_calls: list[CudaCall] = Field(default_factory=list)
    world_size: int = 1
    mesh: dict[str, int] | None = None
    """The device mesh to check (``--mesh dp=2,tp=4``, or the script's own first mesh; -1: what is left of the world)."""
    mesh_line: str | None = None
    """``file:line`` of the script's mesh call (None for ``--mesh``)."""
    collectives: list[CollectiveUse] = Field(default_factory=list)
    drop_last_fix: bool = False
    versions: dict[str, str] = Field(default_factory=dict)


class Finding(_Model):
    """One thing a target will do with this model: which check, how bad, what, where and the fix."""

    check: Literal["capture", "shapes", "ops", "dtypes", "cuda_calls", "distributed", "memory"]
    severity: Severity
    message: str
    line: str | None = None
    fix: str | None = None


class OpVerdict(_Model):
    """An op of the inventory as the target runs it, and from which source that is known."""

    op: str
    status: OpStatus
    source: str
    in_step: bool = True
    """Run by the training step on the CPU (the ``ops`` of the observation)."""
    core_aten: bool = False
    """In the forward's core-ATen inventory (``torch.export`` then ``run_decompositions``)."""


class TargetReport(_Model):
    """The static analysis for one target device."""

    target: str
    verdict: Verdict
    summary: str
    cpu_fallbacks: int
    predicted_compiles: int | None
    recompiles: int
    graphs_per_step: int | None = None
    """On a static-shape target: graphs each step runs, 1 + host reads + CPU-fallback calls (each cuts the graph)."""
    findings: list[Finding]
    fixes: list[str]
    ops: list[OpVerdict]
    sources: list[str]


class Report(_Model):
    """``anydevice check`` output: static analysis, not a run."""

    schema_version: int = SCHEMA_VERSION
    kind: Literal["static analysis, not a run"] = "static analysis, not a run"
    script: str | None = None
    observation: Observation
    targets: list[TargetReport]
    ok: bool
