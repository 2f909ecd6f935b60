"""The result-file schema: one :class:`Run` per probe run, validated with pydantic v2.

A result file is JSON written by ``anydevice matrix probe``. Free text (messages, logs) is
bounded so that a runaway probe cannot produce a huge file; :func:`bounded` truncates text
before it is stored, and validation rejects files whose text exceeds the bounds.
"""

from __future__ import annotations

import json
from datetime import datetime
from enum import Enum
from pathlib import Path
from typing import Final, Literal

from pydantic import AliasChoices, BaseModel, ConfigDict, Field, model_validator

from anydevice.errors import FileAccessError
from anydevice.files.safe_files import json_with, read_bytes, write_bytes

SCHEMA_VERSION: Final = 1
MAX_MESSAGE: Final = 2000
MAX_LOG: Final = 8000
MAX_REASON: Final = 1000
_CUT: Final = "\n[... truncated ...]\n"
MAX_RESULT_FILE: Final = 64 << 20
"""A result file larger than this is refused unread (a real one is well under a megabyte)."""

ParamValue = str | int | float | bool | None


class Status(str, Enum):
    """What a probe observed."""

    PASS = "pass"
    FALLBACK = "pass_cpu_fallback"
    PARTIAL = "partial"
    FAIL = "fail"
    SKIP = "skip"
    HARNESS_ERROR = "harness_error"
    UNTESTED = "untested"
    FAKE = "fake"


# How each status is shown: a symbol and a label (never colour alone), shared by the CLI and the page.
SYMBOL: Final[dict[Status, str]] = {
    Status.PASS: "✔",
    Status.FALLBACK: "◐",
    Status.PARTIAL: "◑",
    Status.FAIL: "✘",
    Status.SKIP: "–",
    Status.HARNESS_ERROR: "⚠",
    Status.UNTESTED: "?",
    Status.FAKE: "◇",
}

LABEL: Final[dict[Status, str]] = {
    Status.PASS: "pass",
    Status.FALLBACK: "pass (CPU fallback)",
    Status.PARTIAL: "partial",
    Status.FAIL: "fail",
    Status.SKIP: "skip",
    Status.HARNESS_ERROR: "harness error",
    Status.UNTESTED: "untested",
    Status.FAKE: "fake (simulated, not verified on hardware)",
}

DISAGREE_SYMBOL: Final = "≠"
SIMULATED: Final = "simulated: not verified on hardware"

# Statuses that count as "working" for diffs between runs.
WORKING: Final = frozenset({Status.PASS, Status.FALLBACK, Status.FAKE})
BROKEN: Final = frozenset({Status.FAIL, Status.HARNESS_ERROR, Status.PARTIAL})

# Marks a cell whose observed status contradicts what the plugin declares (text follows it).
CLAIM_MISMATCH_SYMBOL: Final = "‼"


class Stage(str, Enum):
    """Where a failing probe failed."""

    IMPORT = "import"
    PLACE = "place"
    COMPILE = "compile"
    EXECUTE = "execute"
    COMPARE = "compare"


def bounded(text: str | None, limit: int) -> str | None:
    """Truncate ``text`` to at most ``limit`` characters, keeping its head and tail."""
    if text is None or len(text) <= limit:
        return text
    keep = limit - len(_CUT)
    head = keep // 2
    return text[:head] + _CUT + text[len(text) - (keep - head) :]


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, use_enum_values=False)


class Numerics(_Model):
    """How a device result compared with the reference (CPU unless stated)."""

    max_abs_err: float | None = None
    max_rel_err: float | None = None
    atol: float | None = None
    rtol: float | None = None
    reference: str = "cpu"


class Claim(_Model):
    """What the selected plugin declares about a probe (``DeviceSpec.unsupported``): supported unless listed."""

    supported: bool
    reason: str | None = Field(default=None, max_length=MAX_REASON)

    @model_validator(mode="after")
    def _reason_for_unsupported(self) -> Claim:
        if not self.supported and not self.reason:
            raise ValueError("a claim of unsupported needs a reason")
        return self


class ProbeResult(_Model):
    """One probe's outcome on one run."""

    probe: str = Field(min_length=1, max_length=200)
    shim: str = Field(min_length=1, max_length=50, validation_alias=AliasChoices("shim", "group"))
    """The probe's group (a shim, ``dtypes``, ``ops``, ``workloads``, ...); files may call it ``group``."""
    description: str = Field(default="", max_length=MAX_REASON)
    params: dict[str, ParamValue] = Field(default_factory=dict)
    status: Status
    failure_stage: Stage | None = None
    reason: str | None = Field(default=None, max_length=MAX_REASON)
    exception_type: str | None = Field(default=None, max_length=200)
    message: str | None = Field(default=None, max_length=MAX_MESSAGE)
    numerics: Numerics | None = None
    fallback_ops: list[str] = Field(default_factory=list)
    expected: Claim | None = None
    """The plugin's claim for this probe; None when no device was selected (or the file predates claims)."""
    duration_s: float = Field(default=0.0, ge=0)
    log: str = Field(default="", max_length=MAX_LOG)

    @model_validator(mode="after")
    def _stage_matches_status(self) -> ProbeResult:
        if self.status is Status.FAIL and self.failure_stage is None:
            raise ValueError("a failed probe needs a failure_stage")
        if self.status is not Status.FAIL and self.failure_stage is not None:
            raise ValueError(f"failure_stage is only for failed probes, not {self.status.value}")
        if self.status in (Status.SKIP, Status.UNTESTED, Status.HARNESS_ERROR) and not self.reason:
            raise ValueError(f"a {self.status.value} result needs a reason")
        return self


class AnydeviceInfo(_Model):
    """The anydevice that ran the probes."""

    version: str
    git_sha: str | None = None


class PluginInfo(_Model):
    """The plugin selected for the run (name is the requested spec when selection failed)."""

    name: str
    version: str | None = None
    vendor_package: str | None = None
    vendor_version: str | None = None


class EnvInfo(_Model):
    """Software around the probes."""

    python: str
    torch: str | None = None
    os: str
    runtimes: dict[str, str] = Field(default_factory=dict)
    packages: dict[str, str] = Field(default_factory=dict)
    """Versions of the libraries the workload probes drive (transformers, vLLM, ...) that were installed: provenance
    only, not part of the column key (a run in another lane's venv with the same torch and device joins its column)."""


class Hardware(_Model):
    """The device the probes ran on."""

    device_type: str
    chip: str | None = None
    device_count: int = Field(default=0, ge=0)
    memory_bytes: int | None = None
    simulated: bool = False
    evidence: dict[str, str] | None = None
    """What stands behind the run (``DeviceSpec.evidence.as_dict()``: level, source, date, label); None in older files."""


class Invocation(_Model):
    """How the run was started, and the one-line command that reproduces it."""

    argv: list[str]
    ANYDEVICE: str | None = None
    seed: int = 0
    command: str


class Health(_Model):
    """Whether the run's results can be trusted as a whole."""

    sanity_passed: bool
    device_available: bool = True
    note: str | None = Field(default=None, max_length=MAX_MESSAGE)


class ExportTarget(_Model):
    """A target's run (``matrix probe --target litert``, ``--target tpu:v5e-8``): not a device plugin, the
    runtime's interpreter (export) or the vendor's compiler (compile) on the host CPU.

    The plugin and hardware of such a run are the host's (``cpu``), where the conversion and the runtime's
    interpreter ran; this says which runtime, how, and the versions of its packages.
    """

    target: str = Field(min_length=1, max_length=50)
    runs_on: str = Field(max_length=MAX_REASON)
    versions: dict[str, str] = Field(default_factory=dict)
    kind: Literal["export", "compile"] = "export"
    """``export``: converted and run in the runtime's interpreter; ``compile``: compiled for a slice, never run.
    The kind is also the group of the probes the target runs (:data:`~anydevice.compat_matrix.probe.TARGET_GROUPS`)."""

    @property
    def label(self) -> str:
        """How a column names the target: ``"litert export"``, ``"tpu:v5e-8 compiled, not run"``."""
        return f"{self.target} export" if self.kind == "export" else f"{self.target} compiled, not run"


class Run(_Model):
    """One probe run on one machine: environment, health and every probe's result."""

    schema_version: Literal[1]
    run_id: str = Field(min_length=1, max_length=100)
    started_at: datetime
    finished_at: datetime
    anydevice: AnydeviceInfo
    plugin: PluginInfo
    env: EnvInfo
    hardware: Hardware
    invocation: Invocation
    health: Health
    results: list[ProbeResult]
    export: ExportTarget | None = None
    """Set for an export target's run (its column says so); None for a device's run."""

    @model_validator(mode="after")
    def _unique_probes(self) -> Run:
        seen: set[str] = set()
        for result in self.results:
            if result.probe in seen:
                raise ValueError(f"probe {result.probe!r} appears twice")
            seen.add(result.probe)
        return self


def shown(result: ProbeResult) -> str:
    """A result's status as the page says it: symbol, label and the failing stage (``✘ fail at compile``)."""
    return f"{SYMBOL[result.status]} {LABEL[result.status]}" + (
        f" at {result.failure_stage.value}" if result.failure_stage else ""
    )


class ResultFileError(ValueError):
    """A result file that cannot be read or does not match the schema; ``path`` names it."""

    def __init__(self, path: Path, detail: str) -> None:
        super().__init__(f"{path}: {detail}")
        self.path = path
        self.detail = detail


def load_run(path: Path) -> Run:
    """Read and validate one result file; raise :class:`ResultFileError` naming the file."""
    try:
        data = json.loads(read_bytes(path, limit=MAX_RESULT_FILE).decode("utf-8"))
    except FileAccessError as exc:  # a FIFO, a device, too large, another user's in a shared directory
        raise ResultFileError(path, f"cannot read: {exc.reason}") from exc
    except (OSError, UnicodeDecodeError) as exc:
        raise ResultFileError(path, f"cannot read: {exc}") from exc
    except json.JSONDecodeError as exc:
        raise ResultFileError(path, f"not JSON: {exc}") from exc
    except RecursionError as exc:
        raise ResultFileError(path, "not a result file: its JSON is nested too deeply to read") from exc
    except (ValueError, MemoryError) as exc:  # e.g. an integer past Python's digit limit
        raise ResultFileError(path, f"not a result file: {str(exc)[:200]}") from exc
    if not isinstance(data, dict):
        raise ResultFileError(path, "not a JSON object")
    version = data.get("schema_version")
    if version != SCHEMA_VERSION:
        raise ResultFileError(path, f"unsupported schema_version {version!r} (this anydevice reads {SCHEMA_VERSION})")
    try:
        return Run.model_validate(data)
    except RecursionError as exc:
        raise ResultFileError(path, "not a result file: nested too deeply to validate") from exc
    except ValueError as exc:
        first = str(exc).splitlines()
        raise ResultFileError(path, "schema error: " + " ".join(line.strip() for line in first[:6])) from exc


RESULT_KEYS: Final = ("schema_version", "run_id", "results")
"""What a JSON object has when it is a result file: one ``dump_run`` may replace."""


def dump_run(run: Run, path: Path, *, force: bool = False) -> None:
    """Write ``run`` as stable, indented JSON, atomically; an existing file is replaced only when it is a result file
    (or with ``force``): :func:`anydevice.files.safe_files.write_bytes`, which raises ``FileAccessError`` naming the file."""
    data = (run.model_dump_json(indent=2) + "\n").encode("utf-8")
    write_bytes(path, data, ours=json_with(RESULT_KEYS), force=force, force_hint="pass --force")
