"""On ``xla`` (PJRT CPU): a ``torch.accelerator`` program lands on xla under ``anydevice run`` (no ``--cuda-compat``).

The same script as the cpu test (tests/cuda_compat/scripts/accel_examples.py): an optimizer loop, word_language_model's
hand-written update (no optimizer: the step boundary comes at the next forward after a backward) and a sampling loop
with ``torch.Generator(device=...)`` under ``torch.inference_mode``. Its tensors are on xla and its numbers equal plain
``python`` on the CPU; a call ``torch.accelerator`` cannot honour on xla is anydevice's error naming the user's line.
"""

from __future__ import annotations

import json
import sys

import pytest

from tests.utils import REPO, run

pytestmark = pytest.mark.xla
pytest.importorskip("torch_xla")

SCRIPT = REPO / "tests" / "cuda_compat" / "scripts" / "accel_examples.py"
RTOL = 1e-5


@pytest.mark.slow  # two processes and a compile per slice offset: ~40 s alone, 164 s on the loaded 2-core machine
def test_accelerator_program_lands_on_xla_and_matches_cpu() -> None:
    cpu = run([sys.executable, str(SCRIPT)], timeout=400)
    xla = run(
        [sys.executable, "-m", "anydevice", "run", str(SCRIPT), "--refuse"],
        env={"ANYDEVICE": "xla", "PJRT_DEVICE": "CPU"},
        timeout=400,
    )
    assert cpu.returncode == 0, cpu.stderr[-2000:]
    expected = json.loads(cpu.stdout.strip().splitlines()[-1])
    got = json.loads(xla.stdout.strip().splitlines()[-1])
    assert set(got["where"].values()) == {"xla:0"}, xla.stderr[-2000:]
    assert got["trained"] == pytest.approx(expected["trained"], rel=RTOL)
    assert got["by_hand"] == pytest.approx(expected["by_hand"], rel=RTOL)
    assert got["sample"] == pytest.approx(expected["sample"], rel=RTOL)
    # --refuse: torch.accelerator.current_stream() has no answer on xla: anydevice's one error, at the user's line
    assert xla.returncode == 1
    assert "torch.accelerator.current_stream() is not available on xla" in xla.stderr, xla.stderr[-2000:]
    assert "accel_examples.py" in xla.stderr and "Traceback" not in xla.stderr
