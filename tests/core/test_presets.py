"""The main job's Llama-style presets: built on the meta device (no memory), counted, and the tiny one run for real."""

from __future__ import annotations

import importlib.util
import sys
from types import ModuleType

import pytest
import torch

from anydevice.meter import matmul_params_from_config
from tests.utils import REPO


def _load(name: str) -> ModuleType:
    spec = importlib.util.spec_from_file_location(name, REPO / "examples" / f"{name}.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


llama = _load("llama")

# Every parameter (embeddings and norms included), as counted on the meta device.
EXPECTED = {"tiny": 459_392, "125m": 124_668_672, "1b": 1_003_554_816, "8b": 8_030_261_248}


@pytest.mark.parametrize("name", sorted(llama.PRESETS))
def test_each_preset_builds_on_meta_with_the_size_its_name_says(name: str) -> None:
    preset = llama.PRESETS[name]
    with torch.device("meta"):
        model = llama.Llama(preset.config)
    params = sum(p.numel() for p in model.parameters())
    assert all(p.device.type == "meta" for p in model.parameters())  # nothing was allocated
    assert params == EXPECTED[name] == llama.count_params(preset.config)
    if preset.nominal_params is None:
        assert params < 1_000_000  # tiny: about the size of the old CPU-friendly default, so CI stays fast
    else:
        assert abs(params - preset.nominal_params) <= 0.10 * preset.nominal_params, f"{name}: {params:,}"
    # the FLOPs the MFU uses come from the real model's matmuls, and agree with the config-based helper
    assert model.matmul_params() == matmul_params_from_config(preset.config.flops_config())


def test_8b_is_the_llama3_8b_shape() -> None:
    c = llama.PRESETS["8b"].config
    assert (c.vocab_size, c.d_model, c.n_layers, c.n_heads, c.n_kv_heads, c.d_ff) == (128_256, 4096, 32, 32, 8, 14_336)
    assert llama.count_params(c) == 8_030_261_248  # Meta-Llama-3-8B's published parameter count


def test_tiny_trains_a_step_with_grouped_query_attention() -> None:
    torch.manual_seed(0)
    config = llama.PRESETS["tiny"].config
    assert config.n_kv_heads < config.n_heads  # GQA is exercised on CPU, not only on the big presets
    model = llama.Llama(config)
    x = torch.randint(0, config.vocab_size, (2, 16))
    loss = model(x, torch.roll(x, -1, dims=1))
    assert loss.shape == () and abs(loss.item() - torch.log(torch.tensor(256.0)).item()) < 1.0  # near uniform at init
    loss.backward()
    assert all(p.grad is not None and torch.isfinite(p.grad).all() for p in model.parameters())


def test_activation_checkpointing_gives_the_same_loss_and_gradients() -> None:
    config = llama.PRESETS["tiny"].config
    torch.manual_seed(0)
    plain = llama.Llama(config)
    checkpointed = llama.Llama(config, activation_checkpointing=True)
    checkpointed.load_state_dict(plain.state_dict())
    x = torch.randint(0, 256, (2, 32))
    losses = []
    for model in (plain, checkpointed):
        loss = model(x, torch.roll(x, -1, dims=1))
        loss.backward()
        losses.append(loss.detach())
    torch.testing.assert_close(losses[0], losses[1])
    for (name, a), b in zip(plain.named_parameters(), checkpointed.parameters(), strict=True):
        torch.testing.assert_close(a.grad, b.grad, msg=name)


def test_rotary_embeddings_make_attention_depend_on_position() -> None:
    config = llama.PRESETS["tiny"].config
    cos, sin = llama.rotary_tables(config)
    q = torch.randn(1, 1, 4, config.head_dim)
    rotated = llama.apply_rotary(q, cos[:4], sin[:4])
    torch.testing.assert_close(rotated[..., 0, :], q[..., 0, :])  # position 0 is not rotated
    torch.testing.assert_close(rotated.norm(dim=-1), q.norm(dim=-1))  # a rotation keeps lengths
    assert not torch.allclose(rotated[..., 1, :], q[..., 1, :])


@pytest.mark.parametrize(
    ("overrides", "fragment"),
    [
        ({"n_heads": 3}, "d_model 128 is not divisible by 3 heads"),
        ({"n_heads": 4, "n_kv_heads": 3}, "4 query heads cannot be grouped over 3 key/value heads"),
        ({"d_model": 12, "n_heads": 4}, "head size d_model/heads = 3 must be even"),
    ],
)
def test_a_shape_that_cannot_work_is_named(overrides: dict[str, int], fragment: str) -> None:
    config = llama.build_config("tiny", **overrides)
    assert any(fragment in problem for problem in config.problems())
    with pytest.raises(ValueError, match="cannot be built"):
        llama.Llama(config)


def test_overrides_keep_the_presets_ratios() -> None:
    config = llama.build_config("tiny", d_model=32, n_heads=1)
    assert (config.d_model, config.d_ff, config.n_heads, config.n_kv_heads) == (
        32,
        96,
        1,
        1,
    )  # d_ff 3x, MHA when 2 kv heads don't fit
    assert llama.build_config("tiny", n_heads=8).n_kv_heads == 2  # the preset's 2 key/value heads still divide 8
