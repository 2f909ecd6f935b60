"""Probes for the profiling shim: traces, annotations, memory counters, peak FLOP/s and MFU."""

from __future__ import annotations

import gzip
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

from anydevice.compat_matrix.execute import ProbeContext
from anydevice.compat_matrix.probe import Probe, Skip
from anydevice.compat_matrix.schema import Stage

_MARKER = "anydevice_probe_marker"


def _traced(ctx: ProbeContext, annotate: bool = False) -> list[Path]:
    x = ctx.place(torch.randn(64, 64, generator=torch.Generator().manual_seed(ctx.seed)))
    with ctx.stage(Stage.EXECUTE), ctx.api("profile")(ctx.tmp / "trace") as session:
        for _ in range(2):
            if annotate:
                with ctx.api("record")(_MARKER):
                    y = x @ x
            else:
                y = x @ x
            ctx.api("step")()
        ctx.api("synchronize")()
    del y
    files = [Path(f) for f in session.files]
    if not files:
        raise AssertionError("the profiler session lists no files")
    missing = [str(f) for f in files if not f.exists() or f.stat().st_size == 0]
    if missing:
        raise AssertionError(f"listed trace files missing or empty: {missing[:3]}")
    return files


def _read(path: Path) -> bytes:
    data = path.read_bytes()
    return gzip.decompress(data) if path.suffix == ".gz" else data


def profiler_trace_written(ctx: ProbeContext) -> None:
    _traced(ctx)


def record_function_annotation(ctx: ProbeContext) -> None:
    files = _traced(ctx, annotate=True)
    if not any(_MARKER.encode() in _read(f) for f in files):
        raise AssertionError(f"no trace file mentions the ad.record label {_MARKER!r}")


def trace_format_readable(ctx: ProbeContext) -> None:
    files = _traced(ctx)
    chrome = [f for f in files if f.name.endswith((".json", ".json.gz"))]
    if not chrome:
        kinds = sorted({"".join(f.suffixes) or f.name for f in files})
        raise Skip(f"trace format {', '.join(kinds)} has no reader in the probe suite")
    with ctx.stage(Stage.COMPARE):
        doc: Any = json.loads(_read(chrome[0]))
    events = doc.get("traceEvents") if isinstance(doc, dict) else None
    if not isinstance(events, list) or not events:
        raise AssertionError(f"{chrome[0].name} has no traceEvents")


def memory_counters_track_allocation(ctx: ProbeContext) -> None:
    stats = ctx.api("memory_stats")
    before = stats()
    if not before:
        raise Skip(f"no memory counters: {getattr(before, 'reason', None) or 'empty result'}")
    with ctx.stage(Stage.EXECUTE):
        block = torch.empty(16 * 1024 * 1024, dtype=torch.uint8, device=ctx.device)
        ctx.api("synchronize")()
        during = stats()
    del block
    grew = [k for k, v in during.items() if isinstance(v, int) and v >= before.get(k, 0) + 16 * 1024 * 1024]
    if not grew:
        raise AssertionError(f"no counter grew by 16 MiB after a 16 MiB allocation (keys: {sorted(during)[:6]})")


def peak_flops_declared(ctx: ProbeContext) -> None:
    profiling = ctx.api("backend")().shims.profiling
    peak = profiling.peak_flops(torch.bfloat16)
    if peak is None:
        raise Skip(f"peak FLOP/s unknown for chip {profiling.chip() or 'unknown'}: MFU cannot be computed")
    if not peak > 0:
        raise AssertionError(f"peak_flops returned {peak!r}")


def step_meter_mfu(ctx: ProbeContext) -> None:
    meter = ctx.api("StepMeter")(flops_per_step=2 * 64**3, tokens_per_step=64, warmup=1)
    x = ctx.place(torch.randn(64, 64, generator=torch.Generator().manual_seed(ctx.seed)))
    with ctx.stage(Stage.EXECUTE):
        meter.start()
        for _ in range(4):
            x = torch.tanh(x @ x)
            ctx.api("step")()
            meter.step()
        report = meter.report()
    if report.timed_steps < 1 or not report.tokens_per_s or report.tokens_per_s <= 0:
        raise AssertionError(f"no throughput measured: {report}")
    if report.mfu is None:
        if not report.mfu_note:
            raise AssertionError("mfu is None without a note saying why")
        return
    if not 0 < report.mfu < 1.5:
        raise AssertionError(f"implausible MFU {report.mfu}")


def _p(name: str, fn: Callable[[ProbeContext], None], what: str) -> Probe:
    return Probe(name, "profiling", fn, description=what)


PROBES = [
    _p("profiler_trace_written", profiler_trace_written, "ad.profile(dir) writes non-empty trace files and lists them."),
    _p("record_function_annotation", record_function_annotation, "An ad.record(name) label appears in the device's trace."),
    _p("trace_format_readable", trace_format_readable, "The trace parses as Chrome trace JSON with events."),
    _p("memory_counters_track_allocation", memory_counters_track_allocation, "A 16 MiB allocation shows in ad.memory_stats()."),
    _p("peak_flops_declared", peak_flops_declared, "The profiling shim knows the chip's bf16 peak FLOP/s (never guessed)."),
    _p("step_meter_mfu", step_meter_mfu, "ad.StepMeter measures throughput; MFU is a plausible fraction or None with a note."),
]
