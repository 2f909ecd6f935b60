"""ad.check() for library use, and a third-party device whose plugin declares its CheckFacts (no code in core)."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pytest

import anydevice as ad
from anydevice.contract.check_facts import NO_DOUBLE, CheckFacts, OpTable
from anydevice.contract.device_spec import Detection, DeviceSpec
from anydevice.contract.hookspecs import hookimpl
from anydevice.errors import UnknownDeviceError
from anydevice.runtime.registry import Registry, reset_registry

torch = pytest.importorskip("torch")
MiB = 1 << 20
TABLE = OpTable(
    source="TinyChip op table",
    version="1.0",
    date="2026-11-01",
    ops={"aten::median.dim": "cpu_fallback", "aten::cumsum": "unsupported", "aten::addmm": "native"},
)


class _TinyChip:
    """A third-party device with 1 MiB per chip, static shapes, no float64 and its own op table."""

    @hookimpl
    def anydevice_register_devices(self, register: Callable[[DeviceSpec], None]) -> None:
        facts = CheckFacts(
            dtypes=NO_DOUBLE, static_shapes=True, memory_per_chip={"Tiny-1": MiB}, op_table=TABLE, fallback="counters"
        )
        register(
            DeviceSpec(
                name="tinychip", detect=lambda: Detection.missing("no chip here", None, "no_hardware"), load=_no_load, check=facts
            )
        )


def _no_load() -> Any:
    raise AssertionError("check never loads the target")


@pytest.fixture(autouse=True)
def tiny_registry(clean_anydevice: None) -> Iterator[None]:
    from anydevice.runtime.registry import get_registry

    builtin = get_registry()
    plugins = [(name, builtin.pm.get_plugin(name), "anydevice") for name in ("tpu", "cpu")]
    reset_registry(Registry(plugins=[*plugins, ("tinychip", _TinyChip(), "tinychip-dist")]))
    yield


def test_an_optimizer_too_large_for_the_chip_will_not_fit() -> None:
    model = torch.nn.Linear(256, 256)  # 257 KiB of float32 parameters; AdamW keeps two more copies
    before = [p.detach().clone() for p in model.parameters()]
    optimizer = torch.optim.AdamW(model.parameters())
    report = ad.check(model, torch.randn(4, 256), target="tinychip", optimizer=optimizer)
    (tiny,) = report.targets
    assert tiny.verdict == "will not fit" and not report.ok
    memory = report.observation.memory
    assert memory is not None and memory.optimizer == "AdamW"
    assert memory.optimizer_state >= 2 * memory.parameters  # exp_avg and exp_avg_sq from the real optimizer's step
    (error,) = [f for f in tiny.findings if f.check == "memory"]
    assert "Tiny-1 1.00 MiB" in error.message and "FSDP" in (error.fix or "")
    assert all(torch.equal(a, b) for a, b in zip(before, model.parameters(), strict=True))  # the caller's model is untouched
    assert optimizer.state == {}  # and so is the caller's optimizer


class Ops(torch.nn.Module):
    def __init__(self, op: str) -> None:
        super().__init__()
        self.op = op
        self.lin = torch.nn.Linear(4, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.lin(x)
        return torch.median(h, dim=-1).values if self.op == "median" else torch.cumsum(h, dim=-1)


def test_the_declared_op_table_marks_fallbacks_and_unsupported_ops_with_its_version() -> None:
    median = ad.check(Ops("median"), torch.randn(2, 4), target="tinychip").targets[0]
    assert median.verdict == "runs with CPU fallbacks" and median.summary == "runs with 1 CPU fallback(s)"
    (op,) = [o for o in median.ops if o.op == "aten::median.dim"]
    assert op.status == "cpu_fallback" and op.source == "TinyChip op table 1.0 (2026-11-01)"
    cumsum = ad.check(Ops("cumsum"), torch.randn(2, 4), target="tinychip").targets[0]
    assert cumsum.verdict == "will not compile"
    assert any(
        f.severity == "error" and "aten::cumsum" in f.message and f.line and "test_check_api.py" in f.line
        for f in cumsum.findings
    )


def test_loader_signatures_predict_recompiles_only_on_static_shape_targets() -> None:
    loader = [torch.randn(2, 4, n) for n in (3, 4, 5, 4)]

    class Seq(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.lin = torch.nn.Linear(3, 3)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return self.lin(x[..., :3]).sum()

    report = ad.check(Seq(), loader[0], target="tinychip,cpu", loader=loader)
    tiny, cpu = report.targets
    assert tiny.verdict == "will recompile" and tiny.recompiles == 2 and tiny.predicted_compiles == 3
    assert cpu.verdict == "runs" and cpu.predicted_compiles is None


def test_an_unknown_target_is_refused_with_a_suggestion() -> None:
    with pytest.raises(UnknownDeviceError, match="Did you mean 'tinychip'"):
        ad.check(torch.nn.Linear(2, 2), torch.randn(1, 2), target="tinychp")
