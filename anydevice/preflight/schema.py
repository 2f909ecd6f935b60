"""The JSON schema of ``anydevice check --json`` and ``ad.check()``: pydantic models, validated on output.

``Observation`` is what was seen on the CPU (one run of the script's first steps, or of the model on
its example inputs); ``Report`` adds one ``TargetReport`` per target. docs/check.md documents every field.
"""

from __future__ import annotations

from typing import Any, Final, Literal

from pydantic import BaseModel, ConfigDict, Field

SCHEMA_VERSION = 1
Verdict = Literal[
    "runs", "runs with CPU fallbacks", "partly checked", "will recompile", "will not compile", "will not fit", "will not launch"
]
"""Worst first: will not compile > will not fit > will not launch > will recompile > partly checked > runs with CPU
fallbacks > runs. ``partly checked``: an answer covers part of the step only (a compiled step for one of the
script's optimizers), so "fits" or "runs" cannot be said for the whole."""
Severity = Literal["error", "warning", "info"]
OpStatus = Literal["native", "cpu_fallback", "unsupported", "unknown"]

HOST_READ = "aten::_local_scalar_dense"
"""The op that reads a device value to the host (``.item()``, ``float(t)``, a Python branch on a tensor)."""
DATA_DEPENDENT = frozenset(
    {
        "aten::nonzero",
        HOST_READ,
        "aten::masked_select",
        "aten::_unique2",
        "aten::unique_dim",
        "aten::unique_consecutive",
        "aten::repeat_interleave.Tensor",
    }
)
"""Ops whose output shape or Python value depends on tensor data: a host read or a data-dependent shape."""
MASKED = "aten::index.Tensor (boolean mask)"
"""Indexing by a boolean mask (``h[h > 0]``) runs as this op: an implicit ``nonzero``, its output size data-dependent.
Reported in ``data_dependent`` as :data:`MASKED` (the op itself, with other indices, has a static shape)."""


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
    optimizers: int = 1
    """How many optimizers the bytes count (``observation.optimizers`` lists them): every one the script stepped."""
    estimated_from: Literal["cpu run", "meta shapes"] = "cpu run"
    """``meta shapes``: a model on the meta device, nothing materialized: every byte is from shapes and dtypes, the
    activations from the tensors a meta forward saved for backward, the optimizer state from its kind."""

    @property
    def total(self) -> int:
        return self.parameters + self.gradients + self.optimizer_state + self.activations


class OptimizerUse(_Model):
    """An optimizer the script stepped in the steps run: its class, what it updates and the state it keeps."""

    name: str
    """The class (``AdamW``)."""
    parameters: int
    """Elements of the parameters it updates."""
    parameter_bytes: int
    state_bytes: int
    """Its state after its steps (AdamW: two moments per parameter, and the step counters)."""
    steps: int
    """How many times it stepped in the steps run; 0: made by the script but not stepped in them (a WGAN's generator
    past ``--steps``): its state is then estimated from its kind."""
    line: str | None = None
    """``file:line`` of its first step in the user's code (of its construction when it did not step)."""
    updates_model: bool = False
    """It updates the observed model (the first module called for training): the optimizer of the compiled step."""


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


class CompiledStep(_Model):
    """The training step compiled for a TPU slice by libtpu's own compiler on this host: compiled, not run.

    Bytes are per chip (a device's figures times the devices each chip has: two on v4 and v7x).
    ``fits``: the compiler's verdict (``None`` when the compile failed for another reason).
    """

    compiler: str
    """``"libtpu 0.0.42.1 via JAX 0.10.2, lowered by torchax 0.0.13"``."""
    target: str
    topology: str
    counting: str
    """What the slice's size counts: ``"8 chips"`` or ``"8 TensorCores (4 chips)"``."""
    chips: int
    devices: int
    device_kind: str
    mesh: dict[str, int]
    program: str
    """What was compiled: forward, which loss, backward, the optimizer with its hyper-parameters, the mesh."""
    assumptions: list[str] = Field(default_factory=list)
    ok: bool
    fits: bool | None = None
    error: str | None = None
    """The compiler's own words (``RESOURCE_EXHAUSTED: Ran out of memory ...``) or the lowering's error."""
    error_line: str | None = None
    seconds: float
    """From the first call to the compiled program (or the error), lowering included."""
    lower_seconds: float | None = None
    """Of ``seconds``: torchax tracing the step to StableHLO; the rest is libtpu's compile."""
    per_chip_bytes: dict[str, int] = Field(default_factory=dict)
    """``arguments``, ``outputs``, ``aliased``, ``temporaries``, ``code`` and ``total`` (= a + o - aliased + t + c)."""
    required_bytes: int | None = None
    """On an out-of-memory answer: what the compiler said the program needs per chip."""
    capacity_bytes: int | None = None
    """Usable HBM per chip as the compiler states it."""
    collectives: dict[str, int] = Field(default_factory=dict)
    host_peak_rss_bytes: int | None = None
    optimizers: list[int] | None = None
    """Indices in ``observation.optimizers`` of those the program updates, each with its model's parameters, state
    and update (a GAN: both); None: the one that updates the observed model."""


class ShortLastBatch(_Model):
    """The first DataLoader's epoch is not a whole number of batches (and nothing drops the last one)."""

    rows: int
    """Items per epoch: the dataset's length, or what the sampler yields (per rank for a ``DistributedSampler``)."""
    batch_size: int
    last: int
    """Rows in the last batch of each epoch (``rows % batch_size``)."""
    sampler: str | None = None
    """Where ``rows`` comes from when it is not the dataset's length: ``RandomSampler(replacement=True, num_samples=96)``,
    ``DistributedSampler over 4 ranks (padded)``."""
    fix: str = "drop_last=True on the DataLoader"
    """What makes every batch full (``drop_last=True on the BatchSampler`` when the script builds one)."""
    line: str | None = None
    """``file:line`` where the script iterates the loader."""


class CpuRun(_Model):
    """Where the script's first steps ran on the CPU and where the files it wrote went."""

    workdir: str
    """The scratch working directory (removed afterwards): the script's writes went there, never to the user's folders."""
    files: list[str] = Field(default_factory=list)
    """The files the script wrote, as it named them (relative to its working directory, or absolute)."""
    from_loader: bool = True
    """The signatures are the DataLoader's batches; False: the model's inputs (a script without a DataLoader)."""
    containment: str = ""
    """What kept the script from the user's files: ``landlock``, ``namespace``, ``copy`` or ``none`` (--allow-writes)."""
    refused: list[str] = Field(default_factory=list)
    """The writes to the user's files refused while it ran, each ``file:line tried to remove PATH`` (or the command)."""


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
    optimizers: list[OptimizerUse] = Field(default_factory=list)
    """Every optimizer stepped in the steps run, in the order of their first steps (a GAN: two)."""
    cuda_calls: list[CudaCall] = Field(default_factory=list)
    source_calls: dict[str, str] = Field(default_factory=dict)
    """Every ``torch.*`` call in the script's own source (``name``, and ``name(device=)`` when given a device
    keyword) -> ``file:line`` of its first: what a target's ``CheckFacts.refused_calls`` are looked up in."""
    world_size: int = 1
    mesh: dict[str, int] | None = None
    """The device mesh to check (``--mesh dp=2,tp=4``, or the script's own first mesh; -1: what is left of the world)."""
    mesh_line: str | None = None
    """``file:line`` of the script's mesh call (None for ``--mesh``)."""
    script_mesh: dict[str, int] | None = None
    """The script's own first mesh when ``--mesh`` named the one checked (noted, not checked)."""
    script_mesh_line: str | None = None
    collectives: list[CollectiveUse] = Field(default_factory=list)
    drop_last_fix: bool = False
    short_last_batch: ShortLastBatch | None = None
    run: CpuRun | None = None
    """``anydevice check`` of a script: its scratch working directory and the files written there."""
    versions: dict[str, str] = Field(default_factory=dict)
    compiled: dict[str, CompiledStep] = Field(default_factory=dict)
    """Per TPU slice target (``"tpu:v5e-8"``): the step compiled by libtpu (``--target tpu:<slice>``)."""


class Finding(_Model):
    """One thing a target will do with this model: which check, how bad, what, where and the fix."""

    check: Literal["capture", "shapes", "ops", "dtypes", "cuda_calls", "calls", "distributed", "memory"]
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
    compile: CompiledStep | None = None
    """A TPU slice target's step as libtpu compiled it (None for a target named without a slice)."""


RAN_ON_CPU: Final = "first steps run on the CPU, judged per target; not a run on the target"
FROM_SHAPES: Final = "traced from shapes on the meta device, judged per target; nothing run"
Kind = Literal[
    "first steps run on the CPU, judged per target; not a run on the target",
    "traced from shapes on the meta device, judged per target; nothing run",
]


class Report(_Model):
    """``anydevice check`` output: what ran on the CPU (or was traced from shapes), judged per target."""

    schema_version: int = SCHEMA_VERSION
    kind: Kind = RAN_ON_CPU
    script: str | None = None
    observation: Observation
    targets: list[TargetReport]
    ok: bool
