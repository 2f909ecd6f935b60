"""The main job: a small decoder-only transformer trained on text shipped in the repo.

Runs on whatever ``ANYDEVICE`` selects, using only anydevice's public API:

    python examples/train.py                       # best available device
    ANYDEVICE=xla python examples/train.py --steps 50 --compile
    anydevice run -n 2 examples/train.py --steps 50   # data-parallel

The last line on stdout is one JSON object: backend, device, world_size, steps, first_loss,
last_loss, tokens_per_s, mfu (null where the chip's peak is unknown), and more.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import os
import re
import signal
import sys
import time
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

import anydevice as ad

DATA = Path(__file__).parent / "data" / "corpus.txt"
VOCAB = 256  # bytes


class Block(nn.Module):
    """Pre-norm transformer block: causal self-attention then an MLP."""

    def __init__(self, d_model: int, n_heads: int) -> None:
        super().__init__()
        self.n_heads = n_heads
        self.ln1 = nn.LayerNorm(d_model)
        self.qkv = nn.Linear(d_model, 3 * d_model)
        self.proj = nn.Linear(d_model, d_model)
        self.ln2 = nn.LayerNorm(d_model)
        self.mlp = nn.Sequential(nn.Linear(d_model, 4 * d_model), nn.GELU(), nn.Linear(4 * d_model, d_model))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, t, c = x.shape
        q, k, v = self.qkv(self.ln1(x)).view(b, t, 3, self.n_heads, c // self.n_heads).permute(2, 0, 3, 1, 4)
        attn = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.proj(attn.transpose(1, 2).reshape(b, t, c))
        return x + self.mlp(self.ln2(x))


class TinyGPT(nn.Module):
    """A byte-level decoder-only transformer."""

    def __init__(self, d_model: int = 128, n_layers: int = 2, n_heads: int = 4, seq_len: int = 64) -> None:
        super().__init__()
        self.config = {"d_model": d_model, "n_layers": n_layers, "n_heads": n_heads, "seq_len": seq_len}
        self.tok = nn.Embedding(VOCAB, d_model)
        self.pos = nn.Embedding(seq_len, d_model)
        self.blocks = nn.ModuleList(Block(d_model, n_heads) for _ in range(n_layers))
        self.ln = nn.LayerNorm(d_model)
        self.head = nn.Linear(d_model, VOCAB, bias=False)

    def forward(self, idx: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        positions = torch.arange(idx.shape[1], device=idx.device)
        x = self.tok(idx) + self.pos(positions)
        for block in self.blocks:
            x = block(x)
        logits = self.head(self.ln(x))
        return F.cross_entropy(logits.reshape(-1, VOCAB), targets.reshape(-1))

    def non_embedding_params(self) -> int:
        return sum(p.numel() for name, p in self.named_parameters() if not name.startswith(("tok.", "pos.")))


class Windows(torch.utils.data.Dataset[tuple[torch.Tensor, torch.Tensor]]):
    """Every (input, next-byte target) window of ``seq_len`` bytes of the corpus."""

    def __init__(self, data: torch.Tensor, seq_len: int) -> None:
        self.data, self.seq_len = data, seq_len

    def __len__(self) -> int:
        return len(self.data) - self.seq_len - 1

    def __getitem__(self, i: int) -> tuple[torch.Tensor, torch.Tensor]:
        chunk = self.data[i : i + self.seq_len + 1]
        return chunk[:-1], chunk[1:]


def batches(args: argparse.Namespace, rank: int, world: int) -> torch.utils.data.DataLoader[Any]:
    """A deterministic, rank-sharded stream of random windows (same seed, same data everywhere)."""
    data = torch.frombuffer(bytearray(DATA.read_bytes()), dtype=torch.uint8).long()
    dataset = Windows(data, args.seq_len)
    generator = torch.Generator().manual_seed(args.seed)
    total = args.steps * args.batch_size * world
    sampler = torch.utils.data.RandomSampler(dataset, replacement=True, num_samples=total, generator=generator)
    indices = list(sampler)[rank::world]  # each rank takes its own share of the same draw
    return torch.utils.data.DataLoader(torch.utils.data.Subset(dataset, indices), batch_size=args.batch_size, drop_last=True)


CHECKPOINT_NAME = re.compile(r"step-([0-9]+)(\.pt)?")


def checkpoints(directory: Path, sharded: bool) -> list[Path]:
    """This job's checkpoints in ``directory``, newest first: ``step-N/`` (sharded, DCP) or ``step-N.pt`` files.

    Anything else (``step-final.pt``, hidden temporaries, the other format) is not ours and is ignored.
    """
    found = []
    for entry in directory.iterdir() if directory.is_dir() else []:
        match = CHECKPOINT_NAME.fullmatch(entry.name)
        if match and (entry.is_dir() if sharded else match[2] is not None and entry.is_file()):
            found.append((int(match[1]), entry))
    return [entry for _, entry in sorted(found, reverse=True)]


def resume(directory: Path, core: nn.Module, optimizer: torch.optim.Optimizer, sharded: bool) -> tuple[int, str | None]:
    """Load the newest checkpoint that loads into ``core``/``optimizer``; say on stderr which were skipped and why.

    Returns (step, path), or (0, None) when nothing loads. ``core`` is the model as wrapped for FSDP
    when ``sharded`` (DCP loads each rank's shards), else the unwrapped model.
    """
    for path in checkpoints(directory, sharded):
        try:
            if sharded:
                state = ad.checkpoint.load({"model": core, "optimizer": optimizer, "step": 0}, path)
            else:
                state = ad.load(path)
                if not isinstance(state, dict) or not {"step", "model", "optimizer"} <= state.keys():
                    raise ValueError("not a checkpoint of this job (no step, model and optimizer entries)")
                if not isinstance(state["step"], int) or state["step"] < 0:
                    raise ValueError(f"its step is {state['step']!r}, not a step number")
                core.load_state_dict(state["model"])
                optimizer.load_state_dict(state["optimizer"])
            step = state["step"]
        except (ad.AnyDeviceError, KeyError, TypeError, ValueError, RuntimeError) as exc:
            reason = str(exc).splitlines()[0] if str(exc).strip() else type(exc).__name__
            if ad.distributed.is_main():
                print(f"resume: skipped {path}: {reason}", file=sys.stderr, flush=True)
            continue
        return step, str(path)
    return 0, None


def param_checksum(model: nn.Module) -> str:
    """A position-weighted float64 sum of every parameter: equal on every rank when data-parallel training agrees."""
    full = [p.full_tensor() if hasattr(p, "full_tensor") else p for p in model.parameters()]  # FSDP2 shards: gather
    flat = torch.cat([p.detach().to("cpu", torch.float64).flatten() for p in full])
    weights = torch.arange(1, flat.numel() + 1, dtype=torch.float64)
    return float((flat * weights).sum()).hex()


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--steps", type=int, default=200)
    p.add_argument("--batch-size", type=int, default=16, help="per process")
    p.add_argument("--seq-len", type=int, default=64)
    p.add_argument("--d-model", type=int, default=128)
    p.add_argument("--layers", type=int, default=2)
    p.add_argument("--heads", type=int, default=4)
    p.add_argument("--lr", type=float, default=3e-3)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--compile", action="store_true", help="ad.compile the model with the device's backend")
    p.add_argument("--amp", action="store_true", help="train under ad.autocast() (the device's low-precision dtype)")
    p.add_argument("--profile", type=Path, metavar="DIR", help="write the device's profiler trace to DIR")
    p.add_argument("--parallel", choices=("ddp", "fsdp"), default="ddp", help="wrapping when world_size > 1")
    p.add_argument("--checkpoint-dir", type=Path, help="save checkpoints here and resume from the latest")
    p.add_argument("--checkpoint-every", type=int, default=0, metavar="K", help="save every K steps (0: only at the end)")
    p.add_argument("--log-every", type=int, default=50)
    p.add_argument(
        "--crash-at-step",
        type=int,
        default=0,
        metavar="K",
        help="fault injection for tests: SIGKILL this process right after step K, unless it resumed from a checkpoint",
    )
    p.add_argument("--crash-rank", type=int, default=None, metavar="R", help="with --crash-at-step: only rank R (default: all)")
    args = p.parse_args(argv)
    return args


def train(args: argparse.Namespace) -> dict[str, Any]:
    world = ad.distributed.world_size()
    if world > 1:
        ad.distributed.init()
    rank = ad.distributed.rank()
    ad.manual_seed(args.seed)
    model = TinyGPT(args.d_model, args.layers, args.heads, args.seq_len)
    core = ad.to(model)
    model = ad.distributed.wrap(core, args.parallel) if world > 1 else core
    optimizer = torch.optim.AdamW(model.parameters(), lr=args.lr, weight_decay=0.01)
    start_step, resumed_from = 0, None
    if args.checkpoint_dir:
        start_step, resumed_from = resume(args.checkpoint_dir, core, optimizer, args.parallel == "fsdp")
    step_fn = ad.compile(model) if args.compile else model

    tokens_per_step = args.batch_size * args.seq_len * world
    flops_per_token = ad.transformer_training_flops_per_token(
        core.non_embedding_params(), args.layers, args.d_model, args.seq_len
    )
    meter = ad.StepMeter(flops_per_step=flops_per_token * tokens_per_step, tokens_per_step=tokens_per_step, warmup=1)

    loader = ad.data_loader(batches(args, rank, world))
    losses: list[float] = []
    first_loss = None
    started = time.perf_counter()
    with contextlib.ExitStack() as stack:
        session = stack.enter_context(ad.profile(args.profile)) if args.profile else None
        for step, (x, y) in enumerate(loader):
            if step < start_step:
                continue  # the sampler is deterministic: skip what the checkpoint already trained on
            with ad.record("train_step"), ad.autocast(enabled=args.amp):
                loss = step_fn(x, y)
            loss.backward()
            optimizer.step()
            optimizer.zero_grad(set_to_none=True)
            ad.step()
            meter.step()
            value = float(loss.detach().cpu())
            if first_loss is None:
                first_loss = value
            losses.append(value)
            done = step + 1
            if args.log_every and done % args.log_every == 0 and rank == 0:
                print(f"step {done:5d}  loss {value:.4f}", file=sys.stderr)
            if args.checkpoint_dir and args.checkpoint_every and done % args.checkpoint_every == 0:
                save_checkpoint(args.checkpoint_dir, done, core, optimizer, args.parallel == "fsdp")
            if done == args.crash_at_step and resumed_from is None and args.crash_rank in (None, rank):
                print(f"rank {rank}: injected crash after step {done}", file=sys.stderr, flush=True)
                os.kill(os.getpid(), signal.SIGKILL)  # a real, unclean death: no cleanup, no final checkpoint
    profile_files = [str(f) for f in session.files] if session else []
    if args.checkpoint_dir:
        save_checkpoint(args.checkpoint_dir, args.steps, core, optimizer, args.parallel == "fsdp")
    report = meter.report()
    b = ad.backend()
    result = {
        "backend": b.name,
        "device": str(ad.device()),
        "chip": b.chip,
        "world_size": world,
        "rank": rank,
        "steps": args.steps,
        "trained_steps": len(losses),
        "resumed_from": resumed_from,
        "first_loss": first_loss,
        "last_loss": losses[-1] if losses else None,
        "losses": [round(v, 6) for v in losses],
        "tokens_per_s": report.tokens_per_s,
        "mfu": report.mfu,
        "mfu_note": report.mfu_note,
        "compile": args.compile,
        "amp": args.amp,
        "seconds": time.perf_counter() - started,
        "param_checksum": param_checksum(core),
        "profile_files": profile_files,
        "versions": b.versions,
    }
    return result


def save_checkpoint(directory: Path, step: int, core: nn.Module, optimizer: torch.optim.Optimizer, sharded: bool) -> None:
    """``step-N/`` with ad.checkpoint (every rank writes its shards) when ``sharded``, else ``step-N.pt`` with ad.save.

    FSDP shards the model, so its checkpoints are sharded (DCP, resharded on load: a 2-rank run
    resumes on 1 rank). DDP and a single process keep one portable file: every rank holds the
    whole model, and ``ad.load`` reads it anywhere without a process group or the model class.
    """
    if sharded:
        ad.checkpoint.save({"model": core, "optimizer": optimizer, "step": step}, directory / f"step-{step}")
    else:
        ad.save({"step": step, "model": core.state_dict(), "optimizer": optimizer.state_dict()}, directory / f"step-{step}.pt")


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    try:
        result = train(args)
    except ad.AnyDeviceError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    finally:
        ad.distributed.shutdown()  # after train() returned: its wrapped model can be freed before the group goes
    if not math.isfinite(result["last_loss"] or float("nan")):
        print("error: the loss is not finite", file=sys.stderr)
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
