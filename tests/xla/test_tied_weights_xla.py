"""Tied weights through ad.to and parallelize on xla (PJRT CPU) train as on cpu (issue 35).

torch_xla's ``Module.to`` gives each module a new Parameter, so a head tied to its embedding trained
apart (4.8e-2 off after 4 AdamW steps); SPMD's split moved the model the same way (4e-3).
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.utils import child_env

pytestmark = [pytest.mark.xla, pytest.mark.slow]
pytest.importorskip("torch_xla")

WORKER = Path(__file__).parent / "fixtures" / "tied_xla.py"


def _run(*args: str) -> dict[str, object]:
    env = child_env({"ANYDEVICE": "xla", "PJRT_DEVICE": "CPU", "CPU_NUM_DEVICES": "2", "ANYDEVICE_QUIET": "1"})
    done = subprocess.run([sys.executable, str(WORKER), *args], env=env, capture_output=True, text=True, timeout=400)
    assert done.returncode == 0, done.stderr[-3000:]
    row: dict[str, object] = json.loads(done.stdout.strip().splitlines()[-1])
    return row


@pytest.mark.parametrize("model", ["module", "llama"])
def test_ad_to_keeps_the_tie_and_the_parameter_objects(model: str) -> None:
    if model == "llama":
        pytest.importorskip("transformers")
    row = _run(model, "to")
    assert row["tied"] is True and row["same_object"] is True
    assert row["losses"] == pytest.approx(row["cpu"], abs=1e-5)


@pytest.mark.parametrize("model", ["module", "llama"])
def test_spmd_split_keeps_the_tie_and_trains_as_cpu(model: str) -> None:
    if model == "llama":
        pytest.importorskip("transformers")
    row = _run(model, "spmd")
    assert row["tied"] is True
    assert row["losses"] == pytest.approx(row["cpu"], abs=1e-4)
