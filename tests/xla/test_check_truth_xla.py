"""Truth test on the XLA lane: `anydevice check --target xla` against a real torch_xla run on PJRT CPU.

benchmarks/check_truth.py predicts with check and measures with torch_xla's own metrics; docs/check.md
carries the full table. Here the scripts whose agreement the docs claim are re-run.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from tests.utils import REPO

pytestmark = [pytest.mark.xla, pytest.mark.slow]

sys.path.insert(0, str(REPO / "benchmarks"))
import check_truth  # noqa: E402


@pytest.mark.parametrize(
    ("script", "args"),
    [
        ("tests/check/scripts/median_model.py", ["--steps", "20"]),
        ("tests/check/scripts/cases.py", ["varying", "--steps", "20"]),
    ],
)
def test_check_agrees_with_torch_xla_metrics(script: str, args: list[str], monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PJRT_DEVICE", "CPU")
    result = check_truth.row(script, args, steps=5)
    assert result["agree"] == {"fallbacks": True, "steady_compiles": True, "graphs_per_step": True}, result


def test_the_lowering_probe_names_the_fallback_op_and_its_line(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PJRT_DEVICE", "CPU")
    predicted = check_truth.predict("tests/check/scripts/median_model.py", [], steps=3)
    assert predicted["fallbacks"] == ["median"] and predicted["verdict"] == "runs with 1 CPU fallback(s)"
    assert Path(REPO / "tests/check/scripts/median_model.py").exists()
