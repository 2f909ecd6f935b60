"""The job the ``parallel`` probes start: a tiny model split by ``ad.distributed.parallelize`` against the unsplit one.

Run as ``python -m anydevice.compat_matrix.parallel_job OUT MODE [DIR]`` (one process: XLA SPMD over the host's
devices) or under ``anydevice run -n N -m ...`` (one process per rank: DTensor). Modes:

* ``tp`` (every rank or device on ``tp``) / ``fsdp+tp`` (``{"dp": -1, "tp": 2}``): 3 AdamW steps (fp32) of
  the split model (``fsdp+tp``: also ``wrap(model, "fsdp")`` on the ``dp`` axis under DTensor; on SPMD the
  ``dp`` axis shards the batch) and of the same model unsplit on the CPU, on the same global batches, after
  one forward under ``no_grad`` (an evaluation before training);
* ``save DIR``: split over every rank or device on ``tp``, one step, ``checkpoint.save``; rank 0 writes ``DIR.ref.pt``
  (the full weights and the split model's logits on a fixed input);
* ``load DIR``: one unsplit process loads the checkpoint into a fresh model: weight difference and logits.

Each process writes its result to ``OUT/rank<N>.json`` (files, not stdout: ranks' long lines would interleave).
"""

from __future__ import annotations

import copy
import json
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any, ClassVar

import torch
from torch import nn

from anydevice import api, checkpoint, distributed

STEPS, BATCH, SEQ, VOCAB, WIDTH = 3, 8, 8, 32, 16


class Block(nn.Module):
    """Pre-norm MLP block: ``up`` is split colwise, ``down`` rowwise."""

    def __init__(self) -> None:
        super().__init__()
        self.norm = nn.LayerNorm(WIDTH)
        self.up = nn.Linear(WIDTH, 4 * WIDTH)
        self.down = nn.Linear(4 * WIDTH, WIDTH)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out: torch.Tensor = x + self.down(torch.relu(self.up(self.norm(x))))
        return out


class TinyLM(nn.Module):
    """Embedding, two blocks, a head: the model declares its plan (``plan="auto"``)."""

    tp_plan: ClassVar[dict[str, str]] = {"blocks.*.up": "colwise", "blocks.*.down": "rowwise", "head": "colwise_rep"}

    def __init__(self) -> None:
        super().__init__()
        self.embed = nn.Embedding(VOCAB, WIDTH)
        self.blocks = nn.ModuleList(Block() for _ in range(2))
        self.head = nn.Linear(WIDTH, VOCAB)

    def forward(self, idx: torch.Tensor) -> torch.Tensor:
        x = self.embed(idx)
        for block in self.blocks:
            x = block(x)
        out: torch.Tensor = self.head(x)
        return out


def _full(t: torch.Tensor) -> torch.Tensor:
    gather = getattr(t, "full_tensor", None)
    return (gather() if callable(gather) else t).detach().cpu()


def _loss(model: nn.Module, idx: torch.Tensor) -> torch.Tensor:
    logits = model(idx)
    return nn.functional.cross_entropy(logits[:, :-1].reshape(-1, VOCAB), idx[:, 1:].reshape(-1))


def _train(model: nn.Module, batches: list[torch.Tensor], feed: Callable[[torch.Tensor], torch.Tensor]) -> list[float]:
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2)
    losses = []
    for idx in batches:
        loss = _loss(model, feed(idx))
        torch.autograd.backward(loss)
        optimizer.step()
        optimizer.zero_grad()
        api.step()
        losses.append(loss.detach())
    return [float(v) for v in torch.stack(losses).cpu()]  # one read, after the loop


def layout(model: nn.Module) -> dict[str, str]:
    """How each parameter is laid out (for reports): DTensor placements, or the XLA sharding spec ('' / 'plain': whole)."""
    from torch.distributed.tensor import DTensor

    out = {}
    for name, p in model.named_parameters():
        if isinstance(p, DTensor):
            out[name] = str(tuple(p.placements))
        elif p.device.type == "xla":
            import torch_xla

            out[name] = str(torch_xla._XLAC._get_xla_sharding_spec(p))
        else:
            out[name] = "plain"
    return out


def _batches() -> list[torch.Tensor]:
    return [torch.randint(0, VOCAB, (BATCH, SEQ), generator=torch.Generator().manual_seed(s)) for s in range(STEPS)]


def train(mode: str) -> dict[str, Any]:
    """The split run and the unsplit CPU run of the same model on the same global batches."""
    # First: XLA SPMD must start before any tensor is on the device.
    mesh = distributed.mesh({"tp": -1} if mode == "tp" else {"dp": -1, "tp": 2})
    torch.manual_seed(0)
    reference = TinyLM()
    batches = _batches()
    with torch.no_grad():
        ref_logits = reference(batches[0])
    model = distributed.parallelize(copy.deepcopy(reference), "auto", mesh=mesh)
    lowering = api.backend().shims.collectives.tensor_parallel
    if mode == "fsdp+tp" and lowering == "dtensor":  # on SPMD the mesh's dp axis is the data parallelism
        model = distributed.wrap(model, "fsdp")
    split = layout(model)
    with torch.no_grad():
        logits = model(distributed.shard_batch(batches[0], mesh))
    rows = distributed.shard_batch(batches[0], mesh).shape[0]
    losses = _train(model, batches, lambda b: distributed.shard_batch(b, mesh))
    # Each dp replica's loss is the mean of its slice; average over the world (tp ranks hold equal copies).
    mean = distributed.all_reduce(torch.tensor(losses), "sum") / distributed.world_size()
    start = (
        distributed.rank() // distributed.mesh_degrees(mesh)["tp"] * rows
        if "dp" in distributed.mesh_degrees(mesh) and lowering == "dtensor"
        else 0
    )
    return {
        "mesh": distributed.mesh_degrees(mesh),
        "lowering": lowering,
        "losses": mean.tolist(),
        "reference": _train(reference, batches, lambda b: b),
        "logits": _full(logits).tolist(),
        "ref_logits": ref_logits[start : start + rows].tolist(),
        "split": split,
    }


def save(directory: str) -> dict[str, Any]:
    """Split, one AdamW step, save with DCP; rank 0 keeps the full weights and the split model's logits."""
    mesh = distributed.mesh({"tp": -1})
    torch.manual_seed(0)
    model = distributed.parallelize(TinyLM(), "auto", mesh=mesh)
    _train(model, _batches()[:1], lambda b: distributed.shard_batch(b, mesh))
    checkpoint.save({"model": model, "step": 1}, directory)
    probe = _batches()[0]
    with torch.no_grad():
        logits = _full(model(distributed.shard_batch(probe, mesh)))
    weights = {n: _full(p) for n, p in model.named_parameters()}
    if distributed.rank() == 0:
        torch.save({"weights": weights, "logits": logits}, directory + ".ref.pt")
    return {"mesh": distributed.mesh_degrees(mesh), "split": layout(model)}


def load(directory: str) -> dict[str, Any]:
    """One unsplit process loads the split checkpoint into a freshly initialised model."""
    torch.manual_seed(123)  # other values than the checkpoint's
    model = TinyLM().to(api.device())
    state = checkpoint.load({"model": model, "step": 0}, directory)
    saved = torch.load(directory + ".ref.pt")
    diff = max(float((_full(p) - saved["weights"][n]).abs().max()) for n, p in model.named_parameters())
    with torch.no_grad():
        logits = _full(model(_batches()[0].to(api.device())))
    return {"step": state["step"], "max_weight_diff": diff, "logits": logits.tolist(), "saved_logits": saved["logits"].tolist()}


def main(argv: list[str]) -> None:
    out, mode = Path(argv[0]), argv[1]
    if mode in ("tp", "fsdp+tp"):
        result = train(mode)
    elif mode == "save":
        result = save(argv[2])
    elif mode == "load":
        result = load(argv[2])
    else:
        raise SystemExit(f"unknown mode {mode!r}: tp, fsdp+tp, save DIR or load DIR")
    rank = distributed.rank()
    (out / f"rank{rank}.json").write_text(json.dumps({"rank": rank, **result}))
    distributed.shutdown()


if __name__ == "__main__":
    main(sys.argv[1:])
