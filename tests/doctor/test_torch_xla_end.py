"""torch_xla ends at torch 2.9: `anydevice list` and `doctor` say so on a later torch and name the native packages.

The main lane (torch 2.13, no torch_xla) is the real case; on torch 2.9 without torch_xla (the
core-torch2.9 lane) the same commands must not claim the end.
"""

from __future__ import annotations

import json
import sys
from importlib import metadata
from importlib.util import find_spec

import pytest

from anydevice.plugins import neuron, tpu
from anydevice.shims.lazy_xla import torch_xla_ended
from tests.utils import run

TORCH = metadata.version("torch")
ENDED = torch_xla_ended(TORCH)
pytestmark = pytest.mark.skipif(find_spec("torch_xla") is not None, reason="torch_xla is installed here (the xla lane)")


def _devices() -> dict[str, dict[str, str]]:
    listed = run([sys.executable, "-m", "anydevice", "list", "--json"])
    assert listed.returncode == 0, listed.stderr
    return {d["name"]: d for d in json.loads(listed.stdout)["devices"]}


def test_list_says_where_xla_users_go() -> None:
    devices = _devices()
    xla, tpu_, neuron_ = devices["xla"], devices["tpu"], devices["neuron"]
    if ENDED:
        assert "torch_xla ends at torch 2.9" in xla["reason"]
        assert "on TPU TorchTPU (torch_tpu)" in xla["reason"] and "on Trainium TorchNeuron (torch-neuronx)" in xla["reason"]
        assert (
            "pip install torch_tpu" in xla["fix"]
            and "torch-neuronx" in xla["fix"]
            and "torch==2.9.0 torch_xla==2.9.0" in xla["fix"]
        )
        assert "ends at torch 2.9" in tpu_["fix"] and "or pip install torch_xla" not in tpu_["fix"]
        assert "native TorchNeuron" in neuron_["fix"] and "XLA-based torch-neuronx ends at torch 2.9" in neuron_["fix"]
    else:  # torch 2.9: torch_xla is still an install away
        assert xla["reason"] == "torch_xla is not installed" and "ends at" not in xla["fix"]
        assert "pip install torch_xla[tpu]" in tpu_["fix"]


def test_doctor_says_it_too() -> None:
    report = run([sys.executable, "-m", "anydevice", "doctor"])
    line = next(line for line in report.stdout.splitlines() if "device xla" in line)
    assert ("torch_xla ends at torch 2.9" in line) is ENDED
    if ENDED:
        assert "TorchTPU" in line and "TorchNeuron" in line
    support = next(line for line in report.stdout.splitlines() if "torch support" in line)
    assert "in anydevice's range (2.9 to 2.15)" in support


@pytest.mark.parametrize(("torch", "ended"), [("2.9.0", False), ("2.10.0", True), ("2.15.0+cu130", True)])
def test_the_fixes_follow_the_torch_version(torch: str, ended: bool) -> None:
    tpu_fix = tpu.classify(False, False, [], None, torch).fix or ""
    neuron_fix = neuron.classify(None, [], None, torch).fix or ""
    assert ("torch_xla[tpu]" in tpu_fix and "or pip install torch_xla" not in tpu_fix) is ended
    assert ("ends at torch 2.9" in neuron_fix) is ended
    assert "pip install torch_tpu" in tpu_fix  # the native stack is always the first offer


def test_tpu_and_neuron_keep_preferring_the_native_stack() -> None:
    assert tpu.PAIRED_PACKAGES and next(iter(tpu.PAIRED_PACKAGES)) == "torch_tpu"
    assert tpu.classify(True, True, ["v5e"]).reason.endswith("using TorchTPU")
    assert neuron.is_native("2.13.3.0") and neuron.is_native("2.14.3.0") and not neuron.is_native("2.9.0.2.13.1")
