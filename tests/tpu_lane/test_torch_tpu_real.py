"""The tpu plugin against the real TorchTPU (torch_tpu 0.2.0) on a machine without a TPU chip.

Run in the TPU lane venv: ``$(scripts/venv tpu)/bin/python -m pytest -m tpu_lane tests/tpu_lane``.
Import costs are proven by what was imported (``sys.modules`` of the child), never by timings.
"""

from __future__ import annotations

import importlib.util
import json
import subprocess
from pathlib import Path

import pytest

from tests.utils import TRAIN, anydevice_cli, python, run

pytestmark = [
    pytest.mark.tpu_lane,
    pytest.mark.skipif(importlib.util.find_spec("torch_tpu") is None, reason="torch_tpu is not installed (TPU lane venv only)"),
]

CHILD = """
import json, os, sys
import torch
print(json.dumps({"torch_tpu_imported": "torch_tpu" in sys.modules, "rank": os.environ.get("RANK")}))
"""


def _last_json(proc: subprocess.CompletedProcess[str]) -> dict[str, object]:
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])  # type: ignore[no-any-return]


def test_detection_says_no_chip_without_importing_torch_tpu() -> None:
    code = (
        "import json, sys\nfrom anydevice.plugins import tpu\nr = tpu.detect()\n"
        "print(json.dumps({'reason': r.reason, 'problem': r.problem, "
        "'imported': sorted(m for m in ('torch', 'torch_tpu') if m in sys.modules)}))"
    )
    out = _last_json(python("-c", code))
    assert out == {"reason": "TorchTPU installed, no TPU chip found", "problem": "no_hardware", "imported": []}


def test_selecting_tpu_fails_with_the_sentence_and_no_traceback() -> None:
    proc = python(str(TRAIN), "--steps", "2", env={"ANYDEVICE": "tpu"})
    assert proc.returncode != 0
    assert "TorchTPU installed, no TPU chip found" in proc.stderr
    assert "Traceback" not in proc.stderr + proc.stdout


def test_cli_info_under_cpu_does_not_import_torch_tpu() -> None:
    for proc in (
        anydevice_cli("info", "--json", env={"ANYDEVICE": "cpu"}),
        run([str(Path(__import__("sys").executable).parent / "anydevice"), "info", "--json"], env={"ANYDEVICE": "cpu"}),
    ):
        assert proc.returncode == 0, proc.stderr[-3000:]
        info = json.loads(proc.stdout)
        assert info["imported_vendor_modules"] == []
        assert info["backend"]["name"] == "cpu"


def test_plain_import_torch_does_import_torch_tpu() -> None:
    """The contrast: a process anydevice does not start pays TorchTPU's import through autoload."""
    assert _last_json(python("-c", CHILD))["torch_tpu_imported"] is True


def test_anydevice_run_under_cpu_does_not_import_torch_tpu(tmp_path: Path) -> None:
    if importlib.util.find_spec("anydevice.cli.launch") is None:
        pytest.skip("anydevice run (anydevice/cli/launch.py) is not built yet")
    script = tmp_path / "child.py"
    script.write_text(CHILD)
    out = _last_json(anydevice_cli("run", "-n", "1", str(script), env={"ANYDEVICE": "cpu"}, timeout=300))
    assert out == {"torch_tpu_imported": False, "rank": "0"}


def test_tpu_compile_backend_is_found_once_torch_tpu_is_loaded() -> None:
    code = (
        "import json, torch, torch._dynamo\nbefore = 'tpu' in torch._dynamo.list_backends()\n"
        "from anydevice.plugins import tpu\ntpu.load_torch_tpu()\n"
        "print(json.dumps({'before': before, 'after': 'tpu' in torch._dynamo.list_backends()}))"
    )
    out = _last_json(python("-c", code, env={"TORCH_DEVICE_BACKEND_AUTOLOAD": "0"}))
    assert out == {"before": False, "after": True}


def test_loading_the_plugin_without_a_chip_is_a_typed_error() -> None:
    code = (
        "import json\nfrom anydevice.errors import DeviceUnavailableError\nfrom anydevice.plugins import tpu\n"
        "try:\n    tpu.load()\nexcept DeviceUnavailableError as e:\n"
        "    print(json.dumps({'problem': e.problem, 'reason': e.reason}))"
    )
    out = _last_json(python("-c", code, env={"TORCH_DEVICE_BACKEND_AUTOLOAD": "0"}))
    assert out["problem"] == "no_hardware" and "no TPU chip found" in str(out["reason"])
