"""StepMeter and the FLOPs helpers: MFU from the plugin's peak on a known chip, null on an unknown one."""

from __future__ import annotations

import importlib
import importlib.util
import json
import sys
from pathlib import Path
from types import ModuleType, SimpleNamespace

import pytest
import torch

import anydevice as ad
from anydevice.meter import StepMeter, flops_per_token_from_config, matmul_params_from_config
from anydevice.runtime.registry import Registry, reset_registry
from tests.utils import TRAIN, python

pytestmark = pytest.mark.torch_version_sensitive  # docs/architecture.md, "Which tests the core lanes run"


@pytest.fixture
def toy(plugin_site: Path, monkeypatch: pytest.MonkeyPatch) -> ModuleType:
    """The third-party ``toy`` plugin (pip-installed under tests/), selected in this process.

    Its device computes on the CPU and declares chip ToyChip-1 with a peak of 1 TFLOP/s.
    """
    monkeypatch.syspath_prepend(str(plugin_site))
    module = importlib.import_module("anydevice_toydevice")
    reset_registry(Registry([("toy", module, "anydevice-toydevice")]))
    ad.use("toy")
    return module


def work() -> None:
    torch.randn(64, 64) @ torch.randn(64, 64)


def train_module() -> ModuleType:
    spec = importlib.util.spec_from_file_location("anydevice_example_train", TRAIN)
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def test_mfu_uses_the_plugins_peak_on_a_known_chip(toy: ModuleType) -> None:
    meter = StepMeter(flops_per_step=2e9, tokens_per_step=512, warmup=1)
    for _ in range(4):
        work()
        meter.step()
    report = meter.report()
    assert report.chip == "ToyChip-1" and report.chips == 1
    assert report.peak_flops_per_s == toy.PEAK_TFLOPS["ToyChip-1"] * 1e12
    assert report.timed_steps == 3 and report.seconds > 0
    achieved = 2e9 * report.timed_steps / report.seconds
    assert report.flops_per_s == pytest.approx(achieved)
    assert report.mfu == pytest.approx(achieved / 1e12)
    assert "ToyChip-1" in report.mfu_note and "plugin toy" in report.mfu_note


def test_mfu_divides_by_every_chip(toy: ModuleType) -> None:
    one, four = StepMeter(flops_per_step=1e9, chips=1), StepMeter(flops_per_step=1e9, chips=4)
    for meter in (one, four):
        for _ in range(3):
            work()
            meter.step()
    r1, r4 = one.report(), four.report()
    assert r1.mfu is not None and r4.mfu is not None
    assert r4.mfu == pytest.approx(r4.flops_per_s / 4e12) and r4.peak_flops_per_s == 4e12  # type: ignore[operator]


def test_a_dtype_without_a_peak_gives_no_mfu_and_says_which(toy: ModuleType) -> None:
    meter = StepMeter(flops_per_step=1e9, dtype=torch.float32)
    for _ in range(3):
        meter.step()
    report = meter.report()
    assert report.mfu is None and "no float32 peak for ToyChip-1" in report.mfu_note


def test_an_unknown_chip_gives_null_mfu_never_a_guess() -> None:
    ad.use("cpu")
    meter = StepMeter(flops_per_step=1e9, tokens_per_step=10)
    for _ in range(3):
        meter.step()
    report = meter.report()
    assert report.mfu is None and report.peak_flops_per_s is None and report.flops_per_s
    assert "not in the cpu plugin's (cpu) peak FLOP/s table" in report.mfu_note


def test_without_flops_there_is_no_mfu_even_on_a_known_chip(toy: ModuleType) -> None:
    meter = StepMeter(tokens_per_step=10)
    for _ in range(3):
        meter.step()
    report = meter.report()
    assert report.mfu is None and report.tokens_per_s and "no flops_per_step" in report.mfu_note


@pytest.mark.parametrize(("warmup", "start", "timed"), [(0, True, 5), (0, False, 4), (1, False, 4), (2, False, 3), (2, True, 3)])
def test_warmup_steps_are_not_timed(warmup: int, start: bool, timed: int) -> None:
    ad.use("cpu")
    meter = StepMeter(warmup=warmup)
    if start:
        meter.start()
    for _ in range(5):
        meter.step()
    assert (meter.report().steps, meter.report().timed_steps) == (5, timed)


def test_main_job_reports_mfu_from_the_toy_chips_peak(plugin_site: Path) -> None:
    out = python(str(TRAIN), "--steps", "6", "--batch-size", "4", env={"ANYDEVICE": "toy"}, pythonpath=plugin_site)
    assert out.returncode == 0, out.stderr
    result = json.loads(out.stdout.strip().splitlines()[-1])
    assert result["backend"] == "toy" and result["chip"] == "ToyChip-1"
    job = train_module()
    model = job.Llama(job.PRESETS["tiny"].config)  # the job's default preset: d_model 128, 2 layers, seq_len 64
    per_token = ad.transformer_training_flops_per_token(model.matmul_params(), 2, 128, 64)  # attention included
    assert result["model"] == "tiny" and result["flops_per_token"] == per_token
    assert result["mfu"] == pytest.approx(result["tokens_per_s"] * per_token / 1e12, rel=1e-9)
    assert 0 < result["mfu"] < 1 and "peak 1 TFLOP/s" in result["mfu_note"]


def test_llama_7b_config_counts_its_matmul_parameters() -> None:
    # LLaMA-7B: 6,738,415,616 parameters; minus the input embedding (32000 x 4096) and 65 RMSNorm weights
    config = {
        "num_hidden_layers": 32,
        "hidden_size": 4096,
        "intermediate_size": 11008,
        "vocab_size": 32000,
        "num_attention_heads": 32,
        "num_key_value_heads": 32,
        "hidden_act": "silu",
        "max_position_embeddings": 2048,
    }
    assert matmul_params_from_config(config) == 6_738_415_616 - 32000 * 4096 - 65 * 4096
    n = matmul_params_from_config(config)
    assert flops_per_token_from_config(config) == 6 * n + 12 * 32 * 4096 * 2048
    assert flops_per_token_from_config(config, seq_len=512) == 6 * n + 12 * 32 * 4096 * 512


def test_grouped_query_attention_shrinks_k_and_v() -> None:
    base = {"num_hidden_layers": 1, "hidden_size": 64, "intermediate_size": 128, "vocab_size": 10, "num_attention_heads": 8}
    full = matmul_params_from_config({**base, "num_key_value_heads": 8})
    grouped = matmul_params_from_config({**base, "num_key_value_heads": 2})
    assert full - grouped == 2 * 64 * (64 - 16)


def test_llama_style_object_config_matches_the_main_jobs_model() -> None:
    job = train_module()
    model = job.Llama(job.PRESETS["tiny"].config)  # grouped-query attention (4 query, 2 key/value heads), SwiGLU
    config = SimpleNamespace(
        num_hidden_layers=2,
        hidden_size=128,
        num_attention_heads=4,
        num_key_value_heads=2,
        intermediate_size=384,
        vocab_size=256,
        hidden_act="silu",
        max_position_embeddings=64,
    )
    # exactly the model's matmul weights: attention, gated MLP and output head (no biases; embeddings and norms left out)
    assert matmul_params_from_config(config) == model.matmul_params()
    non_matmul = sum(p.numel() for p in model.parameters()) - model.matmul_params()
    assert non_matmul == 256 * 128 + (2 * 2 + 1) * 128  # the input embedding and the RMSNorm weights


def test_a_config_without_the_needed_fields_names_them() -> None:
    with pytest.raises(ValueError, match=r"lacks d_model, vocab_size.*hidden_size"):
        matmul_params_from_config({"num_hidden_layers": 2})
    with pytest.raises(ValueError, match="seq_len"):
        flops_per_token_from_config({"n_layers": 1, "d_model": 8, "vocab_size": 4})
