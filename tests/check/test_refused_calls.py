"""Calls a target's runtime refuses, found in the script's source before the run (issue 36: torch_xla refuses
inference mode and a generator on the device; both come after training, where a real run loses its work)."""

from __future__ import annotations

from pathlib import Path

import pytest

from anydevice.preflight.schema import Report
from anydevice.preflight.source_calls import calls_in
from tests.utils import REPO, cli_in_process

SCRIPT = REPO / "tests" / "check" / "scripts" / "after_training.py"


def marker(case: str) -> str:
    lines = SCRIPT.read_text().splitlines()
    return f"{SCRIPT}:{next(i for i, line in enumerate(lines, 1) if f'# CHECK: {case}' in line)}"


def test_the_sources_calls_are_named_through_its_imports_with_their_first_line(tmp_path: Path) -> None:
    script = tmp_path / "s.py"
    script.write_text(
        "import torch as t\n"
        "from torch import inference_mode as im, Generator\n"
        "@t.inference_mode\n"
        "def evaluate(): pass\n"
        "with im():\n"
        "    g = Generator(device='xla')\n"
        "h = t.Generator()\n"
        "t.nn.functional.relu(t.zeros(1))\n"
        "def helper(): return torch_like.inference_mode()\n"
    )
    calls = calls_in(script)
    assert calls["torch.inference_mode"] == f"{script}:3"  # the bare decorator is the first
    assert calls["torch.Generator(device=)"] == f"{script}:6" and calls["torch.Generator"] == f"{script}:6"
    assert calls["torch.nn.functional.relu"] == f"{script}:8" and calls["torch.zeros"] == f"{script}:8"
    assert not any(name.startswith("torch_like") for name in calls)  # names it cannot resolve are left out
    broken = tmp_path / "broken.py"
    broken.write_text("def (:\n")
    assert calls_in(broken) == {} and calls_in(tmp_path / "missing.py") == {}


@pytest.mark.slow
def test_xla_is_told_of_inference_mode_and_a_device_generator_at_their_lines_and_cpu_is_not() -> None:
    done = cli_in_process("check", str(SCRIPT), "--target", "xla,cpu", "--json")
    assert done.returncode in (0, 1), done.stderr
    report = Report.model_validate_json(done.stdout)
    by_target = {t.target: [f for f in t.findings if f.check == "calls"] for t in report.targets}
    assert by_target["cpu"] == []
    (inference,) = [f for f in by_target["xla"] if f.message.startswith("torch.inference_mode: ")]
    (generator,) = [f for f in by_target["xla"] if f.message.startswith("torch.Generator(device=...): ")]
    assert inference.line == marker("inference_mode") and "version_counter" in inference.message
    assert "no_grad" in (inference.fix or "") and "--cuda-compat" in (inference.fix or "")
    assert generator.line == marker("generator") and generator.message.startswith("torch.Generator(device=...)")
    assert all(f.severity == "error" for f in (inference, generator))
