"""What parallelize refuses before it splits (issue 35): heads, plan shapes, tied weights, meta models.

Each case used to fail later inside torch (transformers' ``view()``, a DTensor shape error), train on with
a tied weight split apart, or answer with torch's ``to_empty()`` advice; the checks run in one process,
before any process group or mesh.
"""

from __future__ import annotations

from typing import ClassVar

import pytest
import torch
from torch import nn

from anydevice.errors import DistributedError
from anydevice.shims.tp_dtensor import DTensorParallel

LOWERING = DTensorParallel("cpu")


def _llama(heads: int, hidden: int, tied: bool = False) -> nn.Module:
    transformers = pytest.importorskip("transformers")
    torch.manual_seed(0)
    config = transformers.LlamaConfig(
        vocab_size=64, hidden_size=hidden, intermediate_size=64, num_hidden_layers=1, num_attention_heads=heads,
        num_key_value_heads=heads, max_position_embeddings=32, tie_word_embeddings=tied,
    )  # fmt: skip
    return transformers.LlamaForCausalLM(config)


def _check(model: nn.Module, plan: dict[str, str] | str, tp: int = 2) -> None:
    LOWERING.check(model, LOWERING.expand(model, plan), {"tp": tp})


def test_three_heads_on_tp_2_name_the_projection_and_the_numbers() -> None:
    with pytest.raises(DistributedError) as caught:
        _check(_llama(heads=3, hidden=24), "auto")
    message = str(caught.value)
    assert "model.layers.0.self_attn.q_proj" in message
    assert "3 attention heads of size 8" in message and "tensor-parallel degree 2" in message
    _check(_llama(heads=4, hidden=32), "auto")  # 4 heads split: nothing to say


class Block(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.up = nn.Linear(8, 16)
        self.down = nn.Linear(16, 8)


class Model(nn.Module):
    tp_plan: ClassVar[dict[str, str]] = {"blocks.*.up": "colwise", "blocks.*.down": "rowwise"}

    def __init__(self) -> None:
        super().__init__()
        self.blocks = nn.ModuleList([Block(), Block()])


def test_colwise_feeding_colwise_names_both_entries() -> None:
    with pytest.raises(DistributedError) as caught:
        _check(Model(), {"blocks.*.up": "colwise", "blocks.*.down": "colwise"})
    message = str(caught.value)
    assert "'blocks.*.up' makes blocks.0.up 'colwise'" in message
    assert "blocks.0.down ('colwise' from 'blocks.*.down')" in message
    _check(Model(), "auto")


def test_a_rowwise_module_fed_a_whole_activation_is_refused() -> None:
    with pytest.raises(DistributedError, match=r"blocks\.0\.down 'rowwise', which takes its input split"):
        _check(Model(), {"blocks.*.down": "rowwise"})


def test_a_later_glob_overriding_an_explicit_entry_names_both() -> None:
    with pytest.raises(DistributedError) as caught:
        LOWERING.expand(Model(), {"blocks.0.up": "colwise_rep", "blocks.*.up": "colwise", "blocks.*.down": "rowwise"})
    assert "blocks.0.up is named by two plan entries with different styles: 'blocks.0.up' (colwise_rep) and 'blocks.*.up'" in str(
        caught.value
    )


def test_a_model_on_meta_is_refused_with_a_fix_the_user_can_apply() -> None:
    with torch.device("meta"):
        model = Model()
    with pytest.raises(DistributedError) as caught:
        _check(model, "auto")
    assert "on the meta device (blocks.0.up.weight is one)" in str(caught.value)
    assert "model.to_empty(device='cpu') and then model.load_state_dict" in str(caught.value)


class TiedLM(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.embed = nn.Embedding(16, 8)
        self.blocks = nn.ModuleList([Block()])
        self.head = nn.Linear(8, 16, bias=False)
        self.head.weight = self.embed.weight


def test_a_tied_pair_split_two_ways_is_refused_naming_both() -> None:
    plan = {"blocks.*.up": "colwise", "blocks.*.down": "rowwise", "head": "colwise_rep", "embed": "embedding_colwise"}
    with pytest.raises(DistributedError) as caught:
        _check(TiedLM(), plan)
    message = str(caught.value)
    assert "embed.weight and head.weight are one Parameter (tied weights)" in message
    assert "embed.weight ('embedding_colwise' from 'embed': split on dim 1)" in message
    assert "head.weight ('colwise_rep' from 'head': split on dim 0)" in message
    plan["embed"] = "embedding_rowwise"  # the vocabulary: dim 0, as the head's output features
    _check(TiedLM(), plan)
    del plan["embed"]
    with pytest.raises(DistributedError, match=r"embed\.weight \(not in the plan: plain\)"):
        _check(TiedLM(), plan)


def test_auto_leaves_a_tied_pair_it_would_split_apart_whole() -> None:
    model = TiedLM()
    model.tp_plan = {"blocks.*.up": "colwise", "blocks.*.down": "rowwise", "head": "colwise_rep"}  # type: ignore[assignment]
    rules = LOWERING.expand(model, "auto")
    assert [r.name for r in rules] == ["blocks.0.up", "blocks.0.down"]
    LOWERING.check(model, rules, {"tp": 2})
