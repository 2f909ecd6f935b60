"""`anydevice export` and `examples/train.py --export` for real (the litert lane)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from anydevice.preflight.schema import Finding
from anydevice.preflight.text import finding_line, findings_block
from tests.utils import TRAIN, anydevice_cli, python

pytestmark = pytest.mark.litert
pytest.importorskip("litert_torch", reason="litert-torch is not installed: the litert lane (requirements/litert.txt) has it")

SCRIPT = """
import torch

def anydevice_export(checkpoint):
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.Tanh(), torch.nn.Linear(16, 2)), (torch.randn(4, 8),)
"""


SVD_SCRIPT = """
import torch

class Svd(torch.nn.Module):
    def forward(self, x):
        return torch.linalg.svd(x)[1]

def anydevice_export(checkpoint):
    return Svd(), (torch.randn(4, 4),)
"""


def test_what_cannot_convert_is_printed_as_check_prints_a_finding(tmp_path: Path) -> None:
    script = tmp_path / "svd.py"
    script.write_text(SVD_SCRIPT)
    out = tmp_path / "m.tflite"
    proc = anydevice_cli("export", str(script), "--out", str(out))
    finding = Finding(
        check="ops",
        severity="error",
        message="the op aten._linalg_svd has no LiteRT lowering",
        line=f"{script}:6",
        fix="Replace aten._linalg_svd in the model's forward with ops LiteRT has (docs/export.md lists what converts), "
        "or compute it outside the exported module.",
    )
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.splitlines()[-3:] == [
        "anydevice export: litert: WILL NOT CONVERT (nothing was written)",
        *findings_block([finding]),
    ]
    assert findings_block([finding])[0] == finding_line(finding)  # the line `anydevice check` prints for a finding
    proc = anydevice_cli("export", str(script), "--out", str(out), "--json")
    assert proc.returncode == 2, proc.stderr
    refused = json.loads(proc.stdout)
    assert refused["written"] is False and [Finding.model_validate(f) for f in refused["findings"]] == [finding]
    assert not out.exists()


def test_export_from_a_script_prints_what_it_wrote(tmp_path: Path) -> None:
    script = tmp_path / "model.py"
    script.write_text(SCRIPT)
    proc = anydevice_cli("export", str(script), "--target", "litert", "--out", str(tmp_path / "m.tflite"), "--json")
    assert proc.returncode == 0, proc.stderr
    described = json.loads(proc.stdout)
    assert described["inputs"] == [{"name": "args_0", "shape": [4, 8], "dtype": "float32"}]
    assert described["check"]["passed"] and described["check"]["max_abs_error"] < 1e-4
    assert (tmp_path / "m.tflite").stat().st_size == described["size_bytes"]


@pytest.mark.slow
def test_the_main_jobs_checkpoint_exports_and_train_py_exports_after_training(tmp_path: Path) -> None:
    out = tmp_path / "trained.tflite"
    args = [
        str(TRAIN),
        "--steps",
        "2",
        "--log-every",
        "0",
        "--checkpoint-dir",
        str(tmp_path / "ckpt"),
        "--export",
        "litert",
        str(out),
    ]
    proc = python(*args, timeout=600)
    assert proc.returncode == 0, proc.stderr
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    assert result["export"]["path"] == str(out) and result["export"]["check"]["passed"]
    assert result["export"]["outputs"][0]["shape"] == [1, 64, 256]
    checkpoint = tmp_path / "ckpt" / "step-2.pt"
    again = tmp_path / "from-checkpoint.tflite"
    proc = anydevice_cli("export", str(checkpoint), "--script", str(TRAIN), "--out", str(again), "--json", timeout=600)
    assert proc.returncode == 0, proc.stderr
    described = json.loads(proc.stdout)
    assert described["check"]["passed"] and described["inputs"][0]["dtype"] == "int32"
    assert again.read_bytes()[4:8] == b"TFL3"
