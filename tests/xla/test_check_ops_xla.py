"""On the XLA lane every op of the step and of the core-ATen inventory is marked from torch_xla itself.

Ops with an XLA kernel (read from the dispatcher once torch_xla is imported) are native; an op without one
that the step ran is lowered once on PJRT CPU, and torch_xla's counters say whether it fell back.
"""

from __future__ import annotations

import pytest

import anydevice as ad
from tests.check.scripts.median_model import MedianHead

pytestmark = pytest.mark.xla
torch = pytest.importorskip("torch")


def test_every_op_is_marked_by_xla_kernels_or_a_lowering_probe(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PJRT_DEVICE", "CPU")
    report = ad.check(MedianHead(), torch.randn(4, 16), target="xla")
    (xla,) = report.targets
    obs = report.observation
    marks = {v.op: v for v in xla.ops}
    assert set(marks) == {u.op for u in obs.ops} | set(obs.core_aten) and obs.core_aten
    assert marks["aten::addmm"].status == "native" and "XLA kernels registered by torch_xla" in marks["aten::addmm"].source
    median = [v for op, v in marks.items() if op.startswith("aten::median")]
    assert median and all(v.status == "cpu_fallback" for v in median if v.in_step), median
    assert any("lowering probe" in v.source for v in median)
    assert xla.verdict == "runs with CPU fallbacks"
    assert "unknown" not in {marks[op].status for op in obs.core_aten}  # ops only export saw are probed from their traced args
