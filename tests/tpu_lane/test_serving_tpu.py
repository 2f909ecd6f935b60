"""Serving on TPU in the TPU lane (real torch_tpu 0.2.0 and libtpu, no chip): both vLLM routes, libtpu, TPU_VISIBLE_CHIPS.

vllm-torchtpu is stood in for by tests/serve/plugins/torchtpu_standin (the ``torchtpu`` entry point in
``vllm.platform_plugins``; like the real one it registers without a hardware check). vLLM is not in this
lane: its built-in TPU detection (tpu-inference) is the ``builtin`` answer the test gives ``decide``.
"""

from __future__ import annotations

import importlib.util
import json
import re
from pathlib import Path

import pytest

from tests.serve.conftest import SERVE_PLUGINS
from tests.utils import pip_site, python

pytestmark = [
    pytest.mark.tpu_lane,
    pytest.mark.skipif(
        importlib.util.find_spec("torch_tpu") is None or importlib.util.find_spec("libtpu") is None,
        reason="torch_tpu and libtpu are not installed (TPU lane venv only)",
    ),
]

DECIDE = """
import json, os, sys
from anydevice.integrations import _serving
from anydevice.integrations._serving import VLLM

def builtin(name):  # vLLM's own TPU detection on a TPU host: tpu-inference's platform
    return ("tpu_inference.platforms.TpuPlatform", "vLLM's built-in 'tpu' platform") if name == "tpu" else None

d = _serving.decide(VLLM, os.environ["ANYDEVICE"], builtin)
print(json.dumps({"device": d.device, "platform": d.platform, "why": d.why, "error": d.error and str(d.error),
                  "imported": sorted(m for m in ("torch", "torch_tpu", "vllm") if m in sys.modules)}))
"""


@pytest.fixture(scope="module")
def torchtpu_site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return pip_site("torchtpu", [SERVE_PLUGINS / "torchtpu_standin"], tmp_path_factory)


def _decide(tmp_path: Path, site: Path | None, selection: str = "tpu") -> tuple[dict[str, object], list[str]]:
    calls = tmp_path / "calls"
    env = {"ANYDEVICE": selection, "TORCHTPU_CALLS": str(calls)}
    done = python("-c", DECIDE, env=env, pythonpath=site)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1]), calls.read_text().split("\n")[:-1] if calls.exists() else []


def test_vllm_torchtpu_is_the_route_with_torch_tpu(torchtpu_site: Path, tmp_path: Path) -> None:
    row, calls = _decide(tmp_path, torchtpu_site)
    assert row["error"] is None and row["device"] == "tpu"
    assert row["platform"] == "vllm_torchtpu.platform.TorchTpuPlatform"  # asked first, before tpu-inference
    assert "libtpu" in str(row["why"]) and "vllm-torchtpu-standin 0.29.0" in str(row["why"])
    assert len(calls) == 1
    assert row["imported"] == []  # resolved without importing torch, torch_tpu or vLLM


def test_tpu_inference_when_vllm_torchtpu_is_not_installed(tmp_path: Path) -> None:
    row, calls = _decide(tmp_path, None)
    assert row["error"] is None and row["platform"] == "tpu_inference.platforms.TpuPlatform"
    assert "vLLM's built-in 'tpu' platform" in str(row["why"]) and calls == []


def test_a_chip_index_becomes_tpu_visible_chips_for_the_engine(torchtpu_site: Path) -> None:
    code = (
        "import json, os\nfrom anydevice.integrations import vllm\n"
        "p = vllm.platform_plugin()\n"
        "print(json.dumps([p, os.environ.get('TPU_VISIBLE_CHIPS'), os.environ['ANYDEVICE']]))"
    )
    done = python("-c", code, env={"ANYDEVICE": "tpu:1", "ANYDEVICE_QUIET": "1"}, pythonpath=torchtpu_site)
    assert done.returncode == 0, done.stderr[-3000:]
    assert json.loads(done.stdout.strip().splitlines()[-1]) == ["vllm_torchtpu.platform.TorchTpuPlatform", "1", "tpu:0"]


def test_doctor_names_the_route_and_the_visible_chip(torchtpu_site: Path) -> None:
    code = (
        "import json\nfrom anydevice.cli.doctor_serving import platform_under_selection\n"
        "from anydevice.contract.diagnosis import DoctorContext\nfrom anydevice.integrations._serving import VLLM\n"
        "from anydevice.runtime.registry import get_registry\n"
        "c = platform_under_selection(DoctorContext(get_registry(), 'tpu:1', ['tpu']), VLLM, 'vllm')\n"
        "print(json.dumps([c.status, c.message]))"
    )
    done = python("-c", code, env={"ANYDEVICE": "tpu:1"}, pythonpath=torchtpu_site)
    assert done.returncode == 0, done.stderr[-3000:]
    status, message = json.loads(done.stdout.strip().splitlines()[-1])
    assert status == "ok"
    assert re.match(r"ANYDEVICE=tpu:1 -> tpu \(libtpu [0-9.]+ is installed", message), message
    assert "TPU_VISIBLE_CHIPS=1 for the engine" in message
    assert message.endswith("the platform plugin 'torchtpu' (vllm-torchtpu-standin 0.29.0)")
