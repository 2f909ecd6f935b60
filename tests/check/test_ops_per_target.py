"""Every op of the step and of the core-ATen inventory gets a mark per target, from a source the report names."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

import anydevice as ad
from anydevice.plugin import CheckFacts, OpTable
from anydevice.preflight.judge import NO_TABLE, judge
from anydevice.preflight.matrix_ops import matrix_fallbacks, results_dir

torch = pytest.importorskip("torch")


class Nonzero(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.lin = torch.nn.Linear(8, 8)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.lin(x)
        return (h + torch.nonzero(h > 0).shape[0]).pow(2).mean()


def test_every_op_has_a_mark_on_every_target() -> None:
    report = ad.check(Nonzero(), torch.randn(4, 8), target="xla,tpu,neuron,cpu")
    obs = report.observation
    expected = {u.op for u in obs.ops} | set(obs.core_aten)
    assert obs.core_aten  # the forward exported: its core-ATen ops are judged too
    addmm = obs.core_examples["aten::addmm"]  # traced arguments, for a lowering probe of ops the step never ran
    assert addmm[0][1] == {"tensor": [4, 8], "dtype": "float32"}
    assert all(isinstance(size, int) for ex in obs.core_examples.values() for size in _sizes(ex))  # no symbolic sizes
    assert obs.model_dump_json()  # nonzero's traced (symbolic) output size is left out, so the JSON can be written
    for target in report.targets:
        marks = {v.op: v for v in target.ops}
        assert set(marks) == expected and len(target.ops) == len(expected), target.target
        assert all(v.status in ("native", "cpu_fallback", "unsupported", "unknown") and v.source for v in target.ops)
        assert all(marks[op].core_aten for op in obs.core_aten)
    xla, tpu, neuron, cpu = report.targets
    # the project's matrix: a real torch_xla run counted nonzero as a CPU fallback (the lowering probe agrees where it runs)
    assert {v.op: v.status for v in xla.ops}["aten::nonzero"] == "cpu_fallback"
    assert xla.verdict == "runs with CPU fallbacks" and xla.cpu_fallbacks >= 1
    for unpublished in (tpu, neuron):  # no vendor op table is shipped and no real matrix run shows a fallback: unknown
        assert {v.status for v in unpublished.ops} == {"unknown"} and all(NO_TABLE in v.source for v in unpublished.ops)
    assert {v.status for v in cpu.ops} == {"native"}


def test_matrix_marks_come_from_real_runs_only_and_skip_host_reads(tmp_path: Path) -> None:
    shipped = results_dir()
    assert shipped is not None and (shipped / "xla-pjrt-cpu.json").is_file()
    real = json.loads((shipped / "xla-pjrt-cpu.json").read_text())
    found = matrix_fallbacks("xla", shipped)
    source = found.get("aten::nonzero", "")
    assert "xla-pjrt-cpu.json" in source and "torch_xla 2.9.0" in source and "where_masked_nonzero" in source
    assert "aten::_local_scalar_dense" not in found  # torch_xla counts .item(); check reports it as a host read
    simulated = tmp_path / "sim"
    simulated.mkdir()
    real["hardware"]["simulated"] = True
    (simulated / "xla-sim.json").write_text(json.dumps(real))
    assert matrix_fallbacks("xla", simulated) == {}  # a simulated run is no evidence
    shutil.copy(shipped / "neuron-fake.json", simulated / "neuron-fake.json")
    (simulated / "broken.json").write_text("{not json")  # skipped, not fatal
    assert matrix_fallbacks("neuron", simulated) == {}


def test_an_op_only_the_core_aten_decomposition_has_is_reported_but_not_counted() -> None:
    report = ad.check(Nonzero(), torch.randn(4, 8), target="cpu")
    core_only = sorted(set(report.observation.core_aten) - {u.op for u in report.observation.ops})
    stepped = report.observation.ops[0].op
    marks = {op: "unsupported" for op in [*core_only, "aten::does_not_exist"]}
    table = OpTable(source="a table", version="1", date="2026-11-01", ops={**marks, stepped: "cpu_fallback"})
    if not core_only:
        pytest.skip("this torch's export gave no op the step did not run")
    judged = judge("chip", CheckFacts(op_table=table), report.observation)
    assert judged.verdict == "runs with CPU fallbacks" and judged.cpu_fallbacks == 1  # only the step's op counts
    infos = [f for f in judged.findings if f.check == "ops" and "only in the forward's core-ATen decomposition" in f.message]
    assert {f.message.split()[0] for f in infos} == set(core_only) and all(f.severity == "info" for f in infos)


def _sizes(example: object) -> list[object]:
    if isinstance(example, dict):
        return list(example.get("tensor", [])) + [s for v in example.values() if isinstance(v, (dict, list)) for s in _sizes(v)]
    if isinstance(example, list):
        return [s for v in example for s in _sizes(v)]
    return []
