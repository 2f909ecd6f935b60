"""``anydevice run`` without ``--cuda-compat`` on cpu: a ``torch.accelerator`` program computes what ``python`` computes.

On the host torch reports no accelerator and anydevice installs nothing (:mod:`anydevice.device_agnostic`): the
pytorch/examples ``--accel`` idiom, a hand-written update loop and a device-Generator sampling loop print the same
JSON, bit for bit, as plain ``python``. The xla lane runs the same script on xla (tests/xla/test_device_agnostic_xla.py).
"""

from __future__ import annotations

import sys
from pathlib import Path

from tests.utils import run

SCRIPT = Path(__file__).parent / "scripts" / "accel_examples.py"


def test_accelerator_program_on_cpu_is_bit_exact_under_anydevice_run() -> None:
    plain = run([sys.executable, str(SCRIPT)])
    under = run([sys.executable, "-m", "anydevice", "run", str(SCRIPT)], env={"ANYDEVICE": "cpu"})
    assert plain.returncode == 0, plain.stderr[-2000:]
    assert under.returncode == 0, under.stderr[-2000:]
    assert under.stdout == plain.stdout
    assert '"model": "cpu"' in plain.stdout
    assert "torch.accelerator" not in under.stderr  # nothing installed, nothing said
