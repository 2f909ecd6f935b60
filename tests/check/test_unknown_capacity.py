"""A compiled step whose compiler stated no capacity is never said to fit (issue 47): the verdict is "partly checked"."""

from __future__ import annotations

from anydevice.preflight.compiled import compiled_memory
from anydevice.preflight.schema import CompiledStep, Finding


def _step(**fields: object) -> CompiledStep:
    base = dict(
        compiler="libtpu", target="tpu:v5e-8", topology="v5e:2x4", counting="8 chips", chips=8, devices=8,
        device_kind="TPU v5 lite", mesh={"dp": 8}, program="forward", ok=True, seconds=1.0,
        per_chip_bytes={"total": 2 * 2**30},
    )  # fmt: skip
    return CompiledStep.model_validate({**base, **fields})


def test_no_stated_capacity_is_unknown_never_fits() -> None:
    findings: list[Finding] = []
    assert compiled_memory(_step(fits=None, capacity_bytes=None), findings) == ["partly checked"]
    assert len(findings) == 1 and findings[0].severity == "warning"
    assert "2.00 GiB per chip" in findings[0].message and "so fitting is unknown" in findings[0].message
    assert "fits;" not in findings[0].message and findings[0].fix


def test_a_stated_capacity_still_answers_fits() -> None:
    findings: list[Finding] = []
    assert compiled_memory(_step(fits=True, capacity_bytes=16 * 2**30), findings) == []
    assert "2.00 GiB per chip of 16.00 GiB (12%), fits;" in findings[0].message
