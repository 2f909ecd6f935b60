"""The XLA lane (torch_xla installed): Trainer, from_pretrained and PJRT_DEVICE follow ANYDEVICE."""

from __future__ import annotations

import json
import math

import pytest

from tests.utils import REPO, python

pytest.importorskip("transformers")
TRAINER = REPO / "examples" / "ports" / "anydevice" / "trainer_llama.py"
ORIGINAL = REPO / "examples" / "ports" / "original" / "trainer_llama.py"
DEFAULTING = "Defaulting to PJRT_DEVICE"


def _last_json(stdout: str) -> dict[str, object]:
    return json.loads([line for line in stdout.splitlines() if line.startswith('{"')][-1])  # type: ignore[no-any-return]


@pytest.mark.slow
@pytest.mark.timeout(1800)  # subprocesses that import torch + HF libraries; slow on a loaded machine
@pytest.mark.parametrize(
    ("selected", "launch", "device", "optim"),
    [
        ("cpu", "python", "cpu", "adamw_torch_fused"),
        ("xla", "python", "xla:0", "adamw_torch"),
        ("xla", "anydevice run", "xla:0", "adamw_torch"),  # the unported script: nothing in it names anydevice
    ],
)
def test_trainer_trains_on_the_selected_device(selected: str, launch: str, device: str, optim: str):
    env = {"ANYDEVICE": selected, "HF_HUB_OFFLINE": "1"}
    if launch == "python":
        result = python(str(TRAINER), "3", env=env, timeout=900)
    else:
        result = python("-m", "anydevice", "run", str(ORIGINAL), "3", env=env, timeout=900)
    assert result.returncode == 0, result.stderr[-3000:]
    row = _last_json(result.stdout)
    assert (row["device"], row["world_size"], row["optim"]) == (device, 1, optim)
    losses = row["losses"]
    assert isinstance(losses, list) and len(losses) == 3 and all(math.isfinite(x) for x in losses)
    assert DEFAULTING not in result.stderr
    replaced = result.stderr.count("using optim='adamw_torch'")
    assert replaced == (1 if selected == "xla" else 0), result.stderr


def test_pjrt_device_is_set_before_a_library_imports_torch_xla():
    code = "import anydevice.integrations.transformers, os\nimport torch_xla\nprint(os.environ['PJRT_DEVICE'])"
    result = python("-c", code, env={"ANYDEVICE": "xla"}, timeout=900)
    assert result.returncode == 0, result.stderr
    assert result.stdout.split() == ["CPU"] and DEFAULTING not in result.stderr


def test_under_anydevice_run_transformers_imports_torch_xla_with_pjrt_set(tmp_path):
    script = tmp_path / "s.py"
    script.write_text("import transformers.training_args\nimport torch_xla.runtime as xr\nprint(xr.device_type())\n")
    result = python("-m", "anydevice", "run", str(script), env={"ANYDEVICE": "xla", "HF_HUB_OFFLINE": "1"}, timeout=900)
    assert result.returncode == 0, result.stderr[-3000:]
    assert result.stdout.split()[-1] == "CPU" and DEFAULTING not in result.stderr


def test_device_map_puts_from_pretrained_on_xla(tmp_path):
    code = (
        "import anydevice.integrations.transformers\nimport sys\nimport anydevice as ad\n"
        "from transformers import LlamaConfig, LlamaForCausalLM\n"
        "c = LlamaConfig(vocab_size=32, hidden_size=16, intermediate_size=32, num_hidden_layers=1, num_attention_heads=2)\n"
        "LlamaForCausalLM(c).save_pretrained(sys.argv[1])\n"
        "m = LlamaForCausalLM.from_pretrained(sys.argv[1], device_map=ad.device_map())\n"
        "print(ad.device_map()[''], sorted({str(p.device) for p in m.parameters()}))\n"
    )
    result = python("-c", code, str(tmp_path), env={"ANYDEVICE": "xla", "HF_HUB_OFFLINE": "1"}, timeout=900)
    assert result.returncode == 0, result.stderr[-3000:]
    assert result.stdout.strip().splitlines()[-1] == "xla:0 ['xla:0']"
