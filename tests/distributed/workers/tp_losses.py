"""Worker: 5 AdamW steps of a model split by ad.distributed.parallelize, and the same steps unsplit in this process.

argv: CASE [--and CASE ...], each CASE: MODE (tp | fsdp+tp) TP MODEL (mlp | hf-llama | tied-mlp | hf-llama-tied) [PLAN: a
JSON plan, default "auto"]. Several cases run one after another in one launch (tests/distributed/test_tensor_parallel.py
reads the 2-rank ones from one launch). Prints one JSON line per case and rank: the case's number, the reference losses
(unsplit, the whole batch, no process group), the parallel run's losses, for hf-llama the logits' max diff, and for the
tied models whether the split model is still tied.
"""

from __future__ import annotations

import copy
import json
import sys
from typing import Any

import torch
from torch import nn

import anydevice as ad
from anydevice.compat_matrix.parallel_job import TinyLM  # the parallel probes' model: embedding, 2 MLP blocks, head

__all__ = ["TinyLM", "build"]

STEPS, BATCH, SEQ = 5, 8, 16


def build(kind: str) -> nn.Module:
    torch.manual_seed(0)
    if kind in ("mlp", "tied-mlp"):
        model = TinyLM()
        if kind == "tied-mlp":
            model.head.weight = model.embed.weight  # (VOCAB, WIDTH) both: the head reads the embedding
        return model
    from transformers import LlamaConfig, LlamaForCausalLM

    shape = {"vocab_size": 64, "hidden_size": 32, "intermediate_size": 64, "num_hidden_layers": 2}
    heads = {"num_attention_heads": 4, "num_key_value_heads": 4, "max_position_embeddings": 64}
    config = LlamaConfig(**shape, **heads, attn_implementation="eager", tie_word_embeddings=kind == "hf-llama-tied")
    return LlamaForCausalLM(config)


def tied(model: nn.Module) -> bool | None:
    """Whether the head still holds the embedding's Parameter (None: an untied model)."""
    if isinstance(model, TinyLM):
        return model.head.weight is model.embed.weight if model.head.weight.shape == model.embed.weight.shape else None
    head, embed = model.get_output_embeddings(), model.get_input_embeddings()  # type: ignore[operator]
    return head.weight is embed.weight


def logits(model: nn.Module, idx: torch.Tensor) -> torch.Tensor:
    out = model(idx)
    return out if isinstance(out, torch.Tensor) else out.logits


def inference(model: nn.Module, idx: torch.Tensor) -> torch.Tensor:
    with torch.no_grad():
        return logits(model, idx)


def loss_of(model: nn.Module, idx: torch.Tensor) -> torch.Tensor:
    out = logits(model, idx)
    return nn.functional.cross_entropy(out[:, :-1].reshape(-1, out.shape[-1]).float(), idx[:, 1:].reshape(-1))


def train(model: nn.Module, data: list[torch.Tensor], feed: Any) -> list[float]:
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2)
    losses = []
    for idx in data:
        loss = loss_of(model, feed(idx))
        loss.backward()
        optimizer.step()
        optimizer.zero_grad()
        losses.append(loss.detach())
    return [float(v) for v in torch.stack(losses)]


def cases(argv: list[str]) -> list[list[str]]:
    """The command line's cases: the arguments between ``--and`` separators."""
    groups: list[list[str]] = [[]]
    for arg in argv:
        if arg == "--and":
            groups.append([])
        else:
            groups[-1].append(arg)
    return groups


def run_case(number: int, mode: str, tp_degree: str, kind: str, *rest: str) -> None:
    tp = int(tp_degree)
    plan = json.loads(rest[0]) if rest else "auto"
    base = build(kind)
    vocab = 32 if kind.endswith("mlp") else 64
    data = [torch.randint(0, vocab, (BATCH, SEQ), generator=torch.Generator().manual_seed(s)) for s in range(STEPS)]
    reference = copy.deepcopy(base)
    ref_logits = inference(reference, data[0])
    ref_losses = train(reference, data, lambda b: b)

    mesh = ad.distributed.mesh({"dp": -1, "tp": tp})
    model = ad.distributed.parallelize(copy.deepcopy(base), plan, mesh=mesh)
    still_tied = tied(model)
    if mode == "fsdp+tp":
        model = ad.distributed.wrap(model, "fsdp")
    split_logits = inference(model, data[0]) if mode == "tp" else ref_logits
    losses = train(model, data, lambda b: ad.distributed.shard_batch(b, mesh))
    # Each dp replica's loss is its slice's mean: average over the world (tp ranks hold equal copies).
    mean = ad.distributed.all_reduce(torch.tensor(losses), "sum") / ad.distributed.world_size()
    placements = {n: str(getattr(p, "placements", "plain")) for n, p in model.named_parameters()}
    print(
        json.dumps(
            {
                "case": number,
                "rank": ad.distributed.rank(),
                "reference": ref_losses,
                "losses": mean.tolist(),
                "mesh": ad.distributed.mesh_degrees(mesh),
                "logits_diff": float((split_logits - ref_logits[: split_logits.shape[0]]).abs().max()) if mode == "tp" else None,
                "placements": placements,
                "tied": still_tied,
            }
        ),
        flush=True,
    )


def main() -> None:
    for number, case in enumerate(cases(sys.argv[1:])):
        run_case(number, *case)
    ad.distributed.shutdown()


if __name__ == "__main__":
    main()
