"""anydevice.integrations.transformers on the main lane: environment, optimizer fix, device map, Trainer on 2 ranks."""

from __future__ import annotations

import json
import math
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch

import anydevice as ad
from anydevice.integrations import _hf
from tests.distributed.helpers import anydevice_run
from tests.utils import REPO, TINY_LLAMA_AUTO, python

PORTS = REPO / "examples" / "ports"


def test_cpu_environment_makes_accelerate_use_the_cpu_and_not_torch_xla(monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setenv("ANYDEVICE", "cpu")
    monkeypatch.setenv("USE_TORCH_XLA", "1")  # a stale value: replaced, and said
    values = _hf.apply_environment()
    assert values == {"USE_TORCH_XLA": "0", "ACCELERATE_USE_CPU": "1"}
    import os

    assert os.environ["USE_TORCH_XLA"] == "0" and os.environ["ACCELERATE_USE_CPU"] == "1"


def test_fused_adamw_is_replaced_where_the_device_has_no_fused_kernel(capsys: pytest.CaptureFixture[str]):
    from transformers.training_args import OptimizerNames

    assert _hf.fused_optimizer_supported(torch.device("cpu"))
    assert not _hf.fused_optimizer_supported(torch.device("meta"))  # torch has no fused AdamW for meta tensors
    args = SimpleNamespace(optim=OptimizerNames.ADAMW_TORCH_FUSED, device=torch.device("meta"))
    _hf.fix_optimizer(args)
    _hf.fix_optimizer(SimpleNamespace(optim=OptimizerNames.ADAMW_TORCH_FUSED, device=torch.device("meta")))
    assert args.optim == OptimizerNames.ADAMW_TORCH
    assert capsys.readouterr().err.count("using optim='adamw_torch'") == 1  # once per process
    kept = SimpleNamespace(optim=OptimizerNames.ADAMW_TORCH_FUSED, device=torch.device("cpu"))
    _hf.fix_optimizer(kept)
    assert kept.optim == OptimizerNames.ADAMW_TORCH_FUSED


def test_import_hook_patches_training_arguments_when_transformers_imports_it():
    code = (
        "import sys, anydevice.integrations.transformers, os\n"
        "assert 'transformers' not in sys.modules\n"
        "from transformers import TrainingArguments\n"
        "print(getattr(TrainingArguments.__post_init__, '_anydevice', False), os.environ['ACCELERATE_USE_CPU'])\n"
    )
    result = python("-c", code, env={"ANYDEVICE": "cpu", "HF_HUB_OFFLINE": "1"}, timeout=300)
    assert result.returncode == 0, result.stderr
    assert result.stdout.split() == ["True", "1"]


def test_device_map_loads_from_pretrained_on_the_selected_device(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    from transformers import LlamaConfig, LlamaForCausalLM

    monkeypatch.setenv("ANYDEVICE", "cpu")
    config = LlamaConfig(vocab_size=32, hidden_size=16, intermediate_size=32, num_hidden_layers=1, num_attention_heads=2)
    LlamaForCausalLM(config).save_pretrained(tmp_path)
    assert ad.device_map() == {"": "cpu"}
    model = LlamaForCausalLM.from_pretrained(tmp_path, device_map=ad.device_map())
    assert {p.device for p in model.parameters()} == {ad.device()}


@pytest.mark.slow
@pytest.mark.timeout(1800)  # subprocesses that import torch + HF libraries; slow on a loaded machine
def test_trainer_under_anydevice_run_is_one_world_2_job():
    """The unported Trainer script (no anydevice line at all): `anydevice run -n 2` makes one group of 2."""
    result = anydevice_run("-n", "2", PORTS / "original" / "trainer_llama.py", "2", timeout=600, HF_HUB_OFFLINE="1")
    assert result.returncode == 0, result.stderr[-3000:]
    rows = {row["rank"]: row for row in map(json.loads, filter(lambda line: line.startswith('{"'), result.stdout.splitlines()))}
    assert sorted(rows) == [0, 1], result.stdout
    for row in rows.values():
        assert (row["world_size"], row["group_size"], row["device"]) == (2, 2, "cpu")
        assert len(row["losses"]) == 2 and all(math.isfinite(x) for x in row["losses"])
    assert rows[0]["losses"] == rows[1]["losses"]  # Trainer logs the loss averaged over the group


def test_launch_env_carries_the_framework_environment(monkeypatch: pytest.MonkeyPatch):
    from anydevice.cli.launch import build_parser, plan

    monkeypatch.setenv("ANYDEVICE", "cpu")
    spec, _ = plan(build_parser().parse_args(["-n", "2", sys.argv[0] if Path(sys.argv[0]).is_file() else __file__]))
    assert spec.env["ACCELERATE_USE_CPU"] == "1" and spec.env["USE_TORCH_XLA"] == "0"


def test_device_map_auto_means_the_selected_device_once_the_integration_is_imported(tmp_path: Path):
    script = tmp_path / "load.py"
    check = "from transformers import PreTrainedModel\nfrom anydevice.integrations import _hf\n"
    check += "print(PreTrainedModel.from_pretrained.__func__._anydevice, _hf.auto_device_map())\n"
    script.write_text("import anydevice.integrations.transformers\n" + TINY_LLAMA_AUTO + check)
    result = python(str(script), str(tmp_path / "model"), env={"ANYDEVICE": "cpu", "HF_HUB_OFFLINE": "1"}, timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    assert result.stdout.strip().splitlines()[-2:] == ["['cpu']", "True {'': 'cpu'}"]
