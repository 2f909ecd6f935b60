"""Running one probe in-process on the real CPU backend: every outcome becomes the right status."""

from __future__ import annotations

import warnings
from collections.abc import Callable

import pytest
import torch

import anydevice as ad
from anydevice.compat_matrix import catalog
from anydevice.compat_matrix.execute import ProbeContext, run_probe
from anydevice.compat_matrix.probe import HarnessError, Partial, Probe, Skip
from anydevice.compat_matrix.schema import MAX_LOG, ProbeResult, Stage, Status


@pytest.fixture(autouse=True)
def _cpu(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ANYDEVICE", "cpu")


def _run(fn: Callable[[ProbeContext], None], **kw: object) -> ProbeResult:
    return run_probe(Probe("p", "ops", fn, params={"dtype": "float32"}), ad, torch.device("cpu"), **kw)  # type: ignore[arg-type]


def test_pass_records_numerics_and_params() -> None:
    def fn(ctx: ProbeContext) -> None:
        ctx.vs_cpu(torch.matmul, torch.ones(3, 4), torch.ones(4, 2))

    result = _run(fn)
    assert result.status is Status.PASS and result.failure_stage is None
    assert result.numerics is not None and result.numerics.max_abs_err == 0.0
    assert result.params == {"dtype": "float32"}


def test_failure_is_attributed_to_its_stage() -> None:
    def fn(ctx: ProbeContext) -> None:
        with ctx.stage(Stage.COMPILE):
            raise RuntimeError("backend exploded")

    result = _run(fn)
    assert result.status is Status.FAIL and result.failure_stage is Stage.COMPILE
    assert result.exception_type == "RuntimeError" and "backend exploded" in (result.message or "")
    assert "Traceback" in result.log and "compile" in (result.reason or "")


def test_numeric_mismatch_fails_at_compare_with_the_error_recorded() -> None:
    def fn(ctx: ProbeContext) -> None:
        ctx.compare(torch.ones(3) + 0.5, torch.ones(3), atol=1e-3, rtol=0)

    result = _run(fn)
    assert result.failure_stage is Stage.COMPARE
    assert result.numerics is not None and result.numerics.max_abs_err == pytest.approx(0.5)


def test_import_errors_fail_at_import() -> None:
    def fn(ctx: ProbeContext) -> None:
        import no_such_vendor_module  # type: ignore[import-not-found]  # noqa: F401

    assert _run(fn).failure_stage is Stage.IMPORT


@pytest.mark.parametrize(
    ("exc", "status"),
    [
        (Skip("no fp8 here"), Status.SKIP),
        (Partial("half of it"), Status.PARTIAL),
        (HarnessError("harness"), Status.HARNESS_ERROR),
    ],
)
def test_signals(exc: Exception, status: Status) -> None:
    def fn(ctx: ProbeContext) -> None:
        raise exc

    result = _run(fn)
    assert result.status is status and result.reason == str(exc)


def test_missing_api_is_a_harness_error() -> None:
    assert _run(lambda ctx: ctx.api("no_such_function")()).status is Status.HARNESS_ERROR
    result = _run(lambda ctx: ctx.ad.no_such_attribute)
    assert result.status is Status.HARNESS_ERROR and "no_such_attribute" in (result.reason or "")


def test_simulated_passes_are_fake_and_cpu_fallback_is_detected() -> None:
    assert _run(lambda ctx: None, simulated=True).status is Status.FAKE

    def fallback(ctx: ProbeContext) -> None:
        warnings.warn(
            "The operator 'aten::_foo' is not currently supported on the XLA backend and will fall back to run on the CPU."
        )

    result = _run(fallback)
    assert result.status is Status.FALLBACK and result.fallback_ops == ["aten::_foo"]
    counts = iter([{}, {"aten::bar": 2}])
    assert _run(lambda ctx: None, fallbacks=lambda: next(counts)).fallback_ops == ["aten::bar"]


def test_output_is_captured_and_bounded() -> None:
    def noisy(ctx: ProbeContext) -> None:
        print("x" * (MAX_LOG * 2))

    result = _run(noisy)
    assert result.status is Status.PASS and len(result.log) == MAX_LOG


def test_placement_mismatch_fails_at_place() -> None:
    def fn(ctx: ProbeContext) -> None:
        ctx.device = torch.device("meta")  # pretend the selected device is another one
        ctx.place(torch.ones(2))

    assert _run(fn).failure_stage is Stage.PLACE


@pytest.mark.parametrize("name", ["sanity", "matmul", "dtype_bfloat16", "nested_to", "save_load_portable"])
def test_builtin_probes_pass_on_cpu(name: str) -> None:
    probe = next(p for p in catalog.builtin_probes() if p.name == name)
    result = run_probe(probe, ad, ad.device())
    assert result.status is Status.PASS, result.log
