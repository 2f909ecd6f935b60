"""torch_xla profiling's host-side parts (anydevice.shims.xla_profiler), in the main lane, without torch_xla.

Tested here: the options a trace refuses, the one-session-per-process rule, the trace directory and
session fields, ``ad.record`` outside a recording trace, the step schedule's arithmetic (wait plus
warmup), the chip and its peak FLOP/s from the vendor table, and the errors that name torch_xla where
the profiler itself is needed. The xla lane (tests/xla/) records real traces with torch_xla.
"""

from __future__ import annotations

from contextlib import nullcontext
from importlib.util import find_spec
from pathlib import Path

import pytest
import torch

from anydevice.errors import UnsupportedFeatureError
from anydevice.shims import xla_profiler
from anydevice.shims.lazy_xla import XlaVendor
from anydevice.shims.xla_profiler import XPROF, XlaProfiling, sync_step

needs_no_torch_xla = pytest.mark.skipif(find_spec("torch_xla") is not None, reason="torch_xla is installed here (the xla lane)")

TPU = XlaVendor(name="tpu", pjrt_device="TPU", chip=lambda: "TPU v5e", peak_tflops={"TPU v5e": 197.0, "TPU v4": 275.0})


def test_the_chip_and_its_bf16_and_fp16_peak_come_from_the_vendor_table() -> None:
    profiling = XlaProfiling(TPU)
    assert profiling.device_type == "xla" and profiling.chip() == "TPU v5e"
    assert profiling.peak_flops(torch.bfloat16) == pytest.approx(197e12)
    assert profiling.peak_flops(torch.float16) == pytest.approx(197e12)
    assert profiling.peak_flops(torch.float32) is None  # the table is dense bf16/fp16: fp32 is never guessed


def test_a_chip_missing_from_the_table_or_unknown_has_no_peak() -> None:
    other = XlaProfiling(XlaVendor(name="tpu", pjrt_device="TPU", chip=lambda: "TPU v9", peak_tflops={"TPU v5e": 197.0}))
    assert other.chip() == "TPU v9" and other.peak_flops(torch.bfloat16) is None
    generic = XlaProfiling(XlaVendor(name="xla", pjrt_device="CPU"))
    assert generic.chip() is None and generic.peak_flops(torch.bfloat16) is None


def test_options_torch_xla_lacks_are_refused_by_name_before_anything_is_written(tmp_path: Path) -> None:
    directory = tmp_path / "trace"
    with pytest.raises(UnsupportedFeatureError) as caught:
        with XlaProfiling(TPU).trace(directory, record_shapes=True, with_stack=True, profile_memory=False):
            pass
    assert caught.value.message == "torch_xla's profiler has no option record_shapes, with_stack."
    assert "Supported: wait, warmup, active" in str(caught.value) and "port" in str(caught.value)
    assert not directory.exists()


@needs_no_torch_xla
def test_a_waiting_trace_makes_its_directory_and_refuses_a_nested_one(tmp_path: Path) -> None:
    directory = tmp_path / "runs" / "xla"
    profiling = XlaProfiling(TPU)
    seen: dict[str, object] = {}
    # Closing a session syncs through torch_xla, so the block ends in ModuleNotFoundError here: what the session
    # looked like inside is kept and checked afterwards (an assert inside would be masked by that error).
    with pytest.raises(ModuleNotFoundError, match="torch_xla"):
        with profiling.trace(str(directory), wait=2, warmup=1, active=3) as session:
            seen["made"] = directory.is_dir()
            active = xla_profiler._active
            seen["schedule"] = None if active is None else (active.wait, active.active, active.recording)
            seen["span"] = profiling.record("forward")
            try:
                with profiling.trace(tmp_path / "inner"):
                    pass
            except UnsupportedFeatureError as exc:
                seen["nested"] = str(exc)
    assert seen["made"] is True
    assert session.directory == directory and session.files == []
    assert session.viewer == XPROF and "xprof --logdir DIR" in session.viewer
    assert session.tool == "torch_xla.debug.profiler"
    assert seen["schedule"] == (3, 3, False)  # wait + warmup steps pass before recording starts
    assert isinstance(seen["span"], nullcontext)  # nothing records yet: a span costs nothing
    assert seen["nested"] == "A torch_xla trace is already recording in this process.\nDo not nest ad.profile()."
    assert not (tmp_path / "inner").exists()
    assert xla_profiler._active is None  # the session is over even though closing failed


def test_record_outside_any_trace_is_a_no_op() -> None:
    assert xla_profiler._active is None
    with XlaProfiling(TPU).record("optimizer") as span:
        assert span is None


@needs_no_torch_xla
def test_without_torch_xla_a_trace_that_records_at_once_fails_naming_it(tmp_path: Path) -> None:
    profiling = XlaProfiling(TPU)
    with pytest.raises(ModuleNotFoundError) as caught:
        with profiling.trace(tmp_path / "now"):
            pass
    assert caught.value.name == "torch_xla"
    assert xla_profiler._active is None  # no half-started session blocks the next trace
    assert (tmp_path / "now").is_dir()


@needs_no_torch_xla
def test_without_torch_xla_a_capture_server_fails_before_the_directory_is_made(tmp_path: Path) -> None:
    with pytest.raises(ModuleNotFoundError, match="torch_xla"):
        with XlaProfiling(TPU).trace(tmp_path / "served", port=9012):
            pass
    assert not (tmp_path / "served").exists()


@needs_no_torch_xla
def test_without_torch_xla_a_step_sync_fails_naming_it() -> None:
    with pytest.raises(ModuleNotFoundError) as caught:
        sync_step()
    assert caught.value.name == "torch_xla"
