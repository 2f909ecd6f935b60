"""What ad.check sees on a model nobody here wrote: boolean masks, float64 read through .float(), meta models.

In process (``ad.check``): the same Observer and judge the script runner uses, on real torch. The third-party
device whose plugin code raises checks that every call into it is guarded as hooks are.
"""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

import anydevice as ad
from anydevice.contract.check_facts import NO_DOUBLE, CheckFacts, OpTable
from anydevice.contract.device_spec import Detection, DeviceSpec
from anydevice.contract.hookspecs import hookimpl
from anydevice.preflight.schema import FROM_SHAPES, RAN_ON_CPU
from anydevice.runtime.registry import Registry, get_registry, reset_registry

torch = pytest.importorskip("torch")


def _line_of(text: str) -> str:
    """``/path/to/test_check_observe.py:N`` of the first line of this file containing ``text``."""
    lines = Path(__file__).read_text().splitlines()
    return f"{Path(__file__)}:{next(i for i, line in enumerate(lines, 1) if text in line and '_line_of' not in line)}"


class Masked(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.lin = torch.nn.Linear(8, 8)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.lin(x)
        return (h + h[h > 0].sum()).pow(2).mean()  # the boolean mask


def test_a_boolean_mask_index_is_named_and_will_not_compile_on_static_shape_targets() -> None:
    report = ad.check(Masked(), torch.randn(4, 8), target="tpu,cpu")
    (use,) = report.observation.data_dependent
    assert use.op == "aten::index.Tensor (boolean mask)" and use.line == _line_of("# the boolean mask")
    tpu, cpu = report.targets
    assert tpu.verdict == "will not compile" and not report.ok
    (error,) = [f for f in tpu.findings if f.check == "shapes" and f.severity == "error"]
    assert "boolean-mask index" in error.message and "implicit nonzero" in error.message and error.line == use.line
    assert "torch.where" in (error.fix or "")
    assert cpu.verdict == "runs"  # dynamic shapes: the mask is reported as info only


class ReadsDouble(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.lin = torch.nn.Linear(8, 8)
        self.register_buffer("scale", torch.ones(8, dtype=torch.float64))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        with contextlib.ExitStack() as stack:
            stack.callback(torch.ones, 2, dtype=torch.int64)  # an op run from the standard library's frame
        return (self.lin(x) * self.scale.float()).pow(2).mean()  # float64 read through .float()


def test_a_float64_buffer_read_through_float_will_not_compile_on_tpu_at_the_users_line() -> None:
    report = ad.check(ReadsDouble(), torch.randn(4, 8), target="tpu,cpu")
    dtypes = report.observation.dtypes
    assert dtypes["float64"] == _line_of("# float64 read through .float()")  # an input dtype: .float() outputs float32
    assert dtypes["int64"] == _line_of("with contextlib.ExitStack()")  # the user's line, not contextlib.py's
    assert all(line and line.startswith(str(Path(__file__))) for line in dtypes.values()), dtypes
    tpu, cpu = report.targets
    assert tpu.verdict == "will not compile" and cpu.verdict == "runs"
    (error,) = [f for f in tpu.findings if f.check == "dtypes"]
    assert "float64" in error.message and error.line == dtypes["float64"]


class Block(torch.nn.Module):
    def __init__(self, width: int) -> None:
        super().__init__()
        self.embed = torch.nn.Embedding(1000, width)
        self.up = torch.nn.Linear(width, 4 * width)
        self.down = torch.nn.Linear(4 * width, width)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        h = self.embed(ids)
        return self.down(torch.nn.functional.gelu(self.up(h))).float().pow(2).mean()


def test_a_model_on_meta_is_checked_from_shapes_without_materializing_it() -> None:
    width = 8192  # 5.5e8 parameters (2 GiB of float32, 8 GiB with AdamW): never allocated, on meta
    with torch.device("meta"):
        model = Block(width)
    optimizer = torch.optim.AdamW(model.parameters())
    ids = torch.empty(2, 16, dtype=torch.long, device="meta")
    report = ad.check(model, ids, target="tpu,cpu", optimizer=optimizer)
    assert report.kind == FROM_SHAPES
    assert all(p.is_meta for p in model.parameters()) and optimizer.state == {}  # the caller's are untouched
    memory = report.observation.memory
    numel = sum(p.numel() for p in model.parameters())
    assert memory is not None and memory.estimated_from == "meta shapes"
    assert memory.parameters == memory.gradients == 4 * numel
    assert memory.optimizer == "AdamW" and memory.optimizer_state >= 2 * memory.parameters
    assert memory.activations >= 2 * 16 * 4 * width * 4  # the up projection's output, saved for gelu's backward
    # the weights autograd saves for backward (down.weight, up.weight.t(): 0.5 GiB each) are parameters, counted once
    assert memory.activations < 2 * 16 * 16 * width * 4
    ops = {u.op for u in report.observation.ops}
    assert {"aten::embedding", "aten::addmm", "aten::gelu"} <= ops and set(report.observation.dtypes) == {"int64", "float32"}
    (fit,) = [f for f in report.targets[0].findings if f.check == "memory"]
    assert "from meta shapes" in fit.message
    assert ad.check(Block(4), torch.randint(1000, (2, 3)), target="cpu").kind == RAN_ON_CPU


def test_saved_weights_are_not_counted_again_as_activations_on_a_real_model() -> None:
    """The truth table against libtpu's compiler found the estimate counting each saved weight twice (docs/check.md)."""
    width = 256
    model = torch.nn.Sequential(*[torch.nn.Linear(width, width) for _ in range(4)])
    report = ad.check(model, torch.randn(2, width), target="cpu", optimizer=torch.optim.SGD(model.parameters()))
    memory = report.observation.memory
    assert memory is not None and memory.parameters == 4 * (width * width + width) * 4
    # each layer's input is saved for its weight's gradient (4 x 2 x 256 floats); the weights are not activations
    assert 4 * 2 * width * 4 <= memory.activations < width * width * 4


def test_shapes_alone_are_example_inputs_on_meta() -> None:
    with torch.device("meta"):
        model = torch.nn.Sequential(torch.nn.Linear(64, 64), torch.nn.ReLU(), torch.nn.Linear(64, 4))
    report = ad.check(model, torch.Size([8, 64]), target="tpu", optimizer=torch.optim.SGD(model.parameters(), momentum=0.9))
    memory = report.observation.memory
    assert report.kind == FROM_SHAPES and memory is not None and memory.estimated_from == "meta shapes"
    assert memory.optimizer_state == memory.parameters  # SGD with momentum: one buffer per parameter
    assert report.observation.signatures[0].signature == "(8, 64):float32"


# A third-party plugin whose declared module ends the process when imported: check must report, not die.
RAISING_MODULE = "import sys\nsys.exit(3)\n"


class _BadImport:
    @hookimpl
    def anydevice_register_devices(self, register: Callable[[DeviceSpec], None]) -> None:
        table = OpTable(source="BadChip kernels", dispatch_key="PrivateUse1", module="badchip_kernels")
        facts = CheckFacts(dtypes=NO_DOUBLE, static_shapes=True, op_table=table, fallback="counters")
        register(
            DeviceSpec(name="badchip", detect=lambda: Detection.missing("no chip", None, "no_hardware"), load=_no, check=facts)
        )


def _no() -> Any:
    raise AssertionError("check never loads the target")


@pytest.fixture
def bad_registry(clean_anydevice: None, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    (tmp_path / "badchip_kernels.py").write_text(RAISING_MODULE)
    monkeypatch.syspath_prepend(str(tmp_path))
    builtin = get_registry()
    plugins = [(name, builtin.pm.get_plugin(name), "anydevice") for name in ("tpu", "cpu")]
    reset_registry(Registry(plugins=[*plugins, ("badchip", _BadImport(), "badchip-dist")]))
    yield
    sys.modules.pop("badchip_kernels", None)


def test_a_plugin_module_that_exits_on_import_is_reported_through_the_guard(bad_registry: None) -> None:
    report = ad.check(torch.nn.Linear(4, 4), torch.randn(2, 4), target="badchip")
    (bad,) = report.targets
    assert bad.ops and all(v.status == "unknown" for v in bad.ops)
    assert "importing badchip_kernels failed" in bad.ops[0].source and "sys.exit(3)" in bad.ops[0].source
    assert any("importing badchip_kernels failed" in s for s in bad.sources)
