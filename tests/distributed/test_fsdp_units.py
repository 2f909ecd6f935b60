"""FSDP shards per transformer block: unit choice (in process) and a tied-embedding Llama on 2 ranks vs DDP."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from anydevice.errors import DistributedError
from anydevice.shims.parallel import shard_plan
from tests.distributed.helpers import WORKERS, anydevice_run

pytestmark = pytest.mark.torch_version_sensitive  # docs/architecture.md, "Which tests the core lanes run"

transformers = pytest.importorskip("transformers")


def _llama(tied: bool, layers: int = 3) -> nn.Module:
    config = transformers.LlamaConfig(
        vocab_size=64,
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=layers,
        num_attention_heads=4,
        num_key_value_heads=2,
        tie_word_embeddings=tied,
    )
    return transformers.LlamaForCausalLM(config)


def test_plan_uses_no_split_modules_and_keeps_tied_weights_in_the_root():
    plan = shard_plan(_llama(tied=True))
    assert plan.units == ["model.layers.0", "model.layers.1", "model.layers.2"]
    assert set(plan.kinds.values()) == {"LlamaDecoderLayer"}
    assert plan.source == "the model's _no_split_modules"
    assert ["lm_head.weight", "model.embed_tokens.weight"] in [sorted(g) for g in plan.tied]
    assert {"lm_head", "model.embed_tokens", "model.norm"} <= set(plan.root)
    assert "3 x LlamaDecoderLayer" in plan.describe()


class Block(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.lin = nn.Linear(8, 8)


class Plain(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.emb = nn.Embedding(10, 8)
        self.blocks = nn.ModuleList(Block() for _ in range(3))
        self.mixed = nn.ModuleList([nn.Linear(8, 8), nn.ReLU()])  # not repeated: stays in the root
        self.head = nn.Linear(8, 10, bias=False)


def test_plan_falls_back_to_repeated_modulelist_children():
    plan = shard_plan(Plain())
    assert plan.units == ["blocks.0", "blocks.1", "blocks.2"]
    assert plan.source == "the repeated children of a ModuleList"
    assert "mixed.0" in plan.root and "head" in plan.root


def test_plan_units_by_class_or_name_and_tied_units_are_not_split():
    model = Plain()
    model.head.weight = model.emb.weight  # tied
    plan = shard_plan(model, units=[nn.Embedding, "Linear"])
    assert "emb" not in plan.units and "head" not in plan.units  # either alone would split the tied pair
    assert set(plan.dropped) == {"emb", "head"}
    assert "blocks.0.lin" in plan.units and plan.source == "units="
    with pytest.raises(DistributedError, match="matches no module"):
        shard_plan(model, units=["LlamaDecoderLayer"])


def test_plan_without_blocks_is_one_unit():
    plan = shard_plan(nn.Sequential(nn.Linear(2, 2), nn.Linear(2, 2)))
    assert plan.units == [] and "one unit" in plan.describe()


@pytest.mark.slow
@pytest.mark.timeout(1800)  # subprocesses that import torch + HF libraries; slow on a loaded machine
def test_fsdp_on_tied_llama_shards_per_layer_and_matches_ddp():
    runs = {s: anydevice_run("-n", "2", WORKERS / "fsdp_llama.py", s, timeout=300, ANYDEVICE_QUIET="") for s in ("ddp", "fsdp")}
    for strategy, result in runs.items():
        assert result.returncode == 0, f"{strategy}:\n{result.stderr[-3000:]}"
    ddp, fsdp = runs["ddp"].by_rank(), runs["fsdp"].by_rank()
    assert sorted(fsdp) == [0, 1] and all(row["world_size"] == 2 and row["tied"] for row in fsdp.values())
    assert fsdp[0]["units"] == ["FSDPLlamaDecoderLayer"] * 3 + ["FSDPLlamaForCausalLM"]
    for rank in (0, 1):
        assert torch.allclose(torch.tensor(fsdp[rank]["losses"]), torch.tensor(ddp[rank]["losses"]), atol=1e-5, rtol=0)
    assert fsdp[0]["losses"][-1] < fsdp[0]["losses"][0]
    assert runs["fsdp"].stderr.count("anydevice: fsdp: LlamaForCausalLM: 3 unit(s) (3 x LlamaDecoderLayer") == 1
