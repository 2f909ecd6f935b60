"""Strict mode on the XLA lane (torch_xla 2.9, PJRT CPU): a real CPU fallback fails the first step, naming the op and line."""

from __future__ import annotations

import json

import pytest

from tests.utils import REPO, python

pytestmark = [pytest.mark.xla, pytest.mark.slow]

SCRIPT = REPO / "tests" / "check" / "scripts" / "median_model.py"
MEDIAN_LINE = next(i for i, line in enumerate(SCRIPT.read_text().splitlines(), 1) if "return torch.median(" in line)


def test_strict_fails_at_the_first_step_naming_the_op_and_the_line() -> None:
    done = python(str(SCRIPT), env={"ANYDEVICE": "xla", "PJRT_DEVICE": "CPU", "ANYDEVICE_STRICT": "1"})
    assert done.returncode != 0
    assert "CpuFallbackError" in done.stderr and "aten::median.dim_values" in done.stderr, done.stderr[-2000:]
    assert f"median_model.py:{MEDIAN_LINE}" in done.stderr
    assert "ad.step()" in done.stderr or "anydevice/api.py" in done.stderr  # raised by the step marker
    assert '"steps"' not in done.stdout  # nothing after the first step ran


def test_without_strict_it_runs_and_fallback_ops_lists_the_op() -> None:
    done = python(str(SCRIPT), env={"ANYDEVICE": "xla", "PJRT_DEVICE": "CPU"})
    assert done.returncode == 0, done.stderr[-2000:]
    result = json.loads(done.stdout.strip().splitlines()[-1])
    assert result["steps"] == 3 and result["fallback_ops"].get("aten::median.dim_values", 0) >= 3


def test_use_strict_true_wins_over_the_variable_and_false_turns_it_off() -> None:
    code = (
        "import anydevice as ad, torch\n"
        "ad.use('xla', strict={strict})\n"
        "x = ad.to(torch.randn(4, 8))\n"
        "torch.median(x, dim=-1)\n"
        "try:\n    ad.step(); print('passed')\n"
        "except ad.errors.CpuFallbackError as e:\n    print('raised', sorted(e.ops))\n"
    )
    on = python("-c", code.format(strict=True), env={"ANYDEVICE_STRICT": "0", "PJRT_DEVICE": "CPU"})
    off = python("-c", code.format(strict=False), env={"ANYDEVICE_STRICT": "1", "PJRT_DEVICE": "CPU"})
    assert "raised ['aten::median.dim_values']" in on.stdout, on.stderr[-2000:]
    assert "passed" in off.stdout, off.stderr[-2000:]
