"""The main job: a Llama-style decoder (examples/llama.py) trained on text shipped in the repo.

Runs on whatever ``ANYDEVICE`` selects, using only anydevice's public API:

    python examples/train.py                       # best available device, the tiny preset
    ANYDEVICE=xla python examples/train.py --steps 50 --compile
    anydevice run -n 2 examples/train.py --steps 50   # data-parallel
    anydevice run -n 8 examples/train.py --model 8b --parallel fsdp --activation-checkpointing
    anydevice run -n 4 examples/train.py --parallel fsdp+tp --tp 2   # FSDP on dp=2 x tensor parallel on tp=2
    ANYDEVICE=xla python examples/train.py --parallel tp --tp 4       # one process, XLA SPMD over the host's devices

The last line on stdout is one JSON object for the whole job, printed by the main rank only
(other ranks print nothing on stdout): backend, device, world_size, steps, first_loss, last_loss
(the mean over ranks), tokens_per_s (the whole job's), mfu (null where the chip's peak is
unknown), model, and more. The loss stays on the device between log lines: it is read to the host
every --log-every steps, never every step. A loss that is not finite ends the run with exit 1;
bad arguments end it with exit 2, each with one line on stderr.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import json
import math
import os
import re
import signal
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, NoReturn

import torch
from torch import nn

import anydevice as ad

sys.path.insert(0, str(Path(__file__).resolve().parent))  # examples/llama.py, however this file was loaded
import corpus
from llama import PRESETS, Llama, LlamaConfig, Logits, build_config

DATA = corpus.CORPUS
QUIET_READ_EVERY = 100  # with --log-every 0 the loss is still read (silently) this often, to catch non-finite values
HOST_INIT_LIMIT = 4 << 30  # fp32 weights up to this size are initialised on the host (same values on every device)


class NonFiniteLoss(RuntimeError):
    """The training loss became NaN or infinite."""


def batches(args: argparse.Namespace, rank: int, world: int) -> torch.utils.data.DataLoader[Any]:
    """A deterministic, rank-sharded stream of random windows (same seed, same data everywhere)."""
    return corpus.batches(args.steps, args.batch_size, args.seq_len, args.seed, rank, world)


def global_batches(args: argparse.Namespace, replicas: int) -> torch.utils.data.DataLoader[Any]:
    """The whole step's batches (``replicas`` x --batch-size rows), the same on every rank."""
    return corpus.batches(args.steps, args.batch_size * replicas, args.seq_len, args.seed, 0, 1)


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
    """A position-weighted float64 sum of this rank's parameters (its local shards under FSDP), as hex.

    Read once, at the end. Replicated (DDP) ranks agree bit for bit when training agrees.
    """
    total, offset = torch.zeros((), dtype=torch.float64), 0
    for p in model.parameters():
        flat = ad.distributed.local_shard(p.detach()).to("cpu", torch.float64).flatten()
        weights = torch.arange(offset + 1, offset + flat.numel() + 1, dtype=torch.float64)
        total += (flat * weights).sum()
        offset += flat.numel()
    return float(total).hex()


def job_checksum(model: nn.Module, sharded: bool) -> tuple[str, bool | None]:
    """The job's parameter checksum and whether the replicas agree (None when the ranks hold shards).

    Replicated ranks each hold every parameter: the job's checksum is rank 0's, and the ranks agree
    when every rank's is the same. Sharded ranks each hold a part: the job's checksum is the sum of
    the parts, in rank order (the same value on every rank).
    """
    mine = float.fromhex(param_checksum(model))
    every = ad.distributed.all_gather(torch.tensor([mine], dtype=torch.float64, device=ad.device())).cpu().flatten().tolist()
    if sharded:
        return math.fsum(every).hex(), None
    return every[0].hex(), all(v == every[0] for v in every)


# ----------------------------------------------------------------------------- arguments


class _HelpFormatter(argparse.ArgumentDefaultsHelpFormatter, argparse.RawDescriptionHelpFormatter):
    """Shows each option's default; options whose default is "the preset's" or "off" say so in their help."""

    def _get_help_string(self, action: argparse.Action) -> str | None:
        if action.default is None or action.default is False:
            return action.help  # the help text says what happens by default
        return super()._get_help_string(action)


class _Parser(argparse.ArgumentParser):
    """An argument parser whose errors are one line on stderr (exit 2), without the long usage text."""

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.prog}: error: {message} (see --help)\n")


def _checked(kind: Callable[[str], Any], test: Callable[[Any], bool], what: str) -> Callable[[str], Any]:
    def parse(text: str) -> Any:
        try:
            value = kind(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"must be {what}, got {text!r}") from None
        if not test(value):
            raise argparse.ArgumentTypeError(f"must be {what}, got {text}")
        return value

    parse.__name__ = what  # argparse names the type in some messages
    return parse


positive_int = _checked(int, lambda v: v >= 1, "a positive integer")
non_negative_int = _checked(int, lambda v: v >= 0, "an integer >= 0")
positive_float = _checked(float, lambda v: math.isfinite(v) and v > 0, "a positive finite number")


def _by_preset(field: str, extra: str = "") -> str:
    """ " (default: tiny 16, 125m 16, ...)": a value each preset sets."""
    values = []
    for name, preset in PRESETS.items():
        value = getattr(preset, field, None)
        value = getattr(preset.config, field) if value is None else value
        values.append(f"{name} {value:g}" if isinstance(value, float) else f"{name} {value}")
    return f" (default: the preset's: {', '.join(values)}{extra})"


def build_parser() -> argparse.ArgumentParser:
    p = _Parser(prog=Path(__file__).name, description=__doc__, formatter_class=_HelpFormatter)
    p.add_argument("--model", choices=tuple(PRESETS), default="tiny", help="the model preset (examples/llama.py)")
    p.add_argument("--steps", type=positive_int, default=200, metavar="N", help="optimizer steps to train")
    p.add_argument(
        "--batch-size", type=positive_int, metavar="N", help="sequences per step per process" + _by_preset("batch_size")
    )
    p.add_argument("--seq-len", type=positive_int, metavar="N", help="tokens per sequence" + _by_preset("seq_len"))
    p.add_argument("--d-model", type=positive_int, metavar="N", help="override the preset's width" + _by_preset("d_model"))
    p.add_argument("--layers", type=positive_int, metavar="N", help="override the preset's depth" + _by_preset("n_layers"))
    p.add_argument("--heads", type=positive_int, metavar="N", help="override the preset's query heads" + _by_preset("n_heads"))
    p.add_argument(
        "--kv-heads",
        type=positive_int,
        metavar="N",
        help="key/value heads for grouped-query attention" + _by_preset("n_kv_heads", "; the preset's if they divide --heads"),
    )
    p.add_argument("--lr", type=positive_float, help="AdamW learning rate" + _by_preset("lr"))
    p.add_argument("--seed", type=non_negative_int, default=0, metavar="N", help="seeds the weights and the data order")
    p.add_argument("--compile", action="store_true", help="ad.compile the model with the device's backend (default: off)")
    p.add_argument(
        "--amp",
        action=argparse.BooleanOptionalAction,
        help="train under ad.autocast() (the device's low-precision dtype) (default: on where the plugin knows the "
        "chip's bf16 peak, i.e. a recognised accelerator; off elsewhere, e.g. on CPUs: fp32)",
    )
    p.add_argument(
        "--activation-checkpointing",
        action="store_true",
        help="recompute each block's activations in the backward pass to save memory (default: off)",
    )
    p.add_argument("--profile", type=Path, metavar="DIR", help="write the device's profiler trace to DIR (default: no trace)")
    p.add_argument(
        "--parallel",
        choices=("ddp", "fsdp", "tp", "fsdp+tp"),
        default="ddp",
        help="ddp/fsdp: data parallel when world_size > 1; tp: the model's plan split over --tp ranks (devices on xla, "
        "the rest data parallel there); fsdp+tp: FSDP on the dp axis x tensor parallel on tp",
    )
    p.add_argument("--tp", type=positive_int, default=2, metavar="N", help="the tensor-parallel degree of --parallel tp/fsdp+tp")
    p.add_argument("--checkpoint-dir", type=Path, help="save checkpoints here and resume from the latest (default: none)")
    p.add_argument(
        "--checkpoint-every", type=non_negative_int, default=0, metavar="K", help="save every K steps (0: only at the end)"
    )
    p.add_argument(
        "--log-every",
        type=non_negative_int,
        default=50,
        metavar="K",
        help="read the loss to the host and log it (stderr, main rank) every K steps; 0: no log",
    )
    p.add_argument(
        "--export",
        nargs=2,
        metavar=("TARGET", "FILE"),
        help="after training, export the model (idx -> logits) for TARGET (litert) to FILE with ad.export, checked "
        "against PyTorch (default: no export)",
    )
    p.add_argument(
        "--crash-at-step",
        type=non_negative_int,
        default=0,
        metavar="K",
        help="fault injection for tests: SIGKILL this process right after step K, unless it resumed from a checkpoint",
    )
    p.add_argument(
        "--crash-rank",
        type=non_negative_int,
        default=None,
        metavar="R",
        help="with --crash-at-step: only rank R (default: every rank)",
    )
    return p


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    """The job's arguments, validated; the preset fills what was not given. Bad values exit 2 with one line."""
    p = build_parser()
    args = p.parse_args(argv)
    preset = PRESETS[args.model]
    args.batch_size = args.batch_size or preset.batch_size
    args.lr = args.lr or preset.lr
    args.seq_len = args.seq_len or preset.config.seq_len
    longest = DATA.stat().st_size - 2
    if args.seq_len > longest:
        p.error(f"argument --seq-len: {args.seq_len} is longer than the corpus allows ({longest} tokens)")
    config = build_config(
        args.model,
        d_model=args.d_model,
        n_layers=args.layers,
        n_heads=args.heads,
        n_kv_heads=args.kv_heads,
        seq_len=max(args.seq_len, preset.config.seq_len),
    )
    if args.export and args.export[0] not in ("litert",):
        p.error(f"argument --export: unknown target {args.export[0]!r} (targets: litert)")
    problems = config.problems()
    if problems:
        p.error(f"the model shape does not work: {'; '.join(problems)} (--model {args.model} with --d-model/--heads/--kv-heads)")
    if args.parallel in TENSOR_PARALLEL and (config.n_heads % args.tp or config.n_kv_heads % args.tp):
        p.error(
            f"argument --tp: {args.tp} must divide the query heads ({config.n_heads}) and key/value heads ({config.n_kv_heads})"
        )
    args.config = config
    return args


# ----------------------------------------------------------------------------- the job


def build_model(config: LlamaConfig, activation_checkpointing: bool) -> Llama:
    """The model on the selected device, initialised on the host when it is small enough (the same values on every device)."""
    with torch.device("meta"):
        model = Llama(config, activation_checkpointing)
    fp32_bytes = 4 * sum(p.numel() for p in model.parameters())
    on_host = fp32_bytes <= HOST_INIT_LIMIT
    model = model.to_empty(device="cpu" if on_host else ad.device())
    model.init_weights()
    return ad.to(model) if on_host else model


TENSOR_PARALLEL = ("tp", "fsdp+tp")


def tensor_parallel_mesh(args: argparse.Namespace) -> Any:
    """``mesh({"dp": -1, "tp": --tp})`` for ``tp``/``fsdp+tp`` (None otherwise); made before any tensor is on the device
    (XLA SPMD switches on there). Bad degrees raise before any process group starts."""
    return ad.distributed.mesh({"dp": -1, "tp": args.tp}) if args.parallel in TENSOR_PARALLEL else None


def parallelize(core: Llama, args: argparse.Namespace, mesh: Any) -> tuple[nn.Module, dict[str, int] | None]:
    """The model as trained (wrapped or split) and the mesh's degrees (None without tensor parallelism).

    ``tp``/``fsdp+tp``: the model's own plan over ``mesh({"dp": -1, "tp": --tp})``; with one process per
    rank, ``tp`` alone needs dp = 1 (nothing would average the gradients over dp).
    """
    world = ad.distributed.world_size()
    if mesh is None:
        return (ad.distributed.wrap(core, args.parallel) if world > 1 else core), None
    degrees = ad.distributed.mesh_degrees(mesh)
    if args.parallel == "tp" and world > 1 and degrees["dp"] > 1:
        raise ad.errors.DistributedError(
            f"--parallel tp over {world} processes with --tp {args.tp} leaves dp={degrees['dp']}, which nothing averages.",
            f"Use --tp {world}, or --parallel fsdp+tp for FSDP on dp x tensor parallel.",
        )
    model = ad.distributed.parallelize(core, "auto", mesh=mesh)
    if args.parallel == "fsdp+tp":
        model = ad.distributed.wrap(model, "fsdp")
    return model, degrees


def amp_by_default() -> bool:
    """Autocast by default only where the chip has a known bf16 peak: an accelerator anydevice recognises."""
    return ad.StepMeter(dtype=torch.bfloat16).report().peak_flops_per_s is not None


def read_losses(pending: list[torch.Tensor], world: int) -> list[float]:
    """The mean over ranks of each pending step's loss, read to the host in one transfer."""
    window = torch.stack(pending).float()
    if world > 1:
        window = ad.distributed.all_reduce(window, "avg")
    pending.clear()
    values: list[float] = window.cpu().tolist()
    return values


def check_finite(window: list[float], first: int, args: argparse.Namespace) -> None:
    """Raise :class:`NonFiniteLoss` naming the first step whose loss is NaN or infinite (``window`` follows step ``first``)."""
    for offset, value in enumerate(window):
        if not math.isfinite(value):
            raise NonFiniteLoss(
                f"the loss is not finite ({value}) at step {first + offset + 1} of {args.steps}; "
                f"training diverged: lower --lr (now {args.lr:g})"
            )


def clock(seconds: float) -> str:
    seconds = max(0, round(seconds))
    return f"{seconds // 3600}:{seconds // 60 % 60:02d}:{seconds % 60:02d}"


def train(args: argparse.Namespace) -> dict[str, Any]:
    world = ad.distributed.world_size()
    if world > 1:
        ad.distributed.init()
    rank = ad.distributed.rank()
    main_rank = rank == 0 or world == 1  # a stray RANK without a world is still the only (main) process
    mesh = tensor_parallel_mesh(args)
    ad.manual_seed(args.seed)
    config: LlamaConfig = args.config
    amp = amp_by_default() if args.amp is None else args.amp
    core = build_model(config, args.activation_checkpointing)
    model, degrees = parallelize(core, args, mesh)
    sharded = args.parallel in ("fsdp", "fsdp+tp") or mesh is not None  # DCP checkpoints (resharded on load)
    optimizer = torch.optim.AdamW(model.parameters(), lr=args.lr, weight_decay=0.01)
    start_step, resumed_from = 0, None
    if args.checkpoint_dir:
        start_step, resumed_from = resume(args.checkpoint_dir, core, optimizer, sharded)
    step_fn = ad.compile(model) if args.compile else model

    n_params = sum(p.numel() for p in core.parameters())
    replicas = degrees["dp"] if degrees else world  # the batches a step trains on (tp ranks share theirs)
    tokens_per_step = args.batch_size * args.seq_len * replicas
    flops_per_token = ad.transformer_training_flops_per_token(core.matmul_params(), config.n_layers, config.d_model, args.seq_len)
    meter = ad.StepMeter(flops_per_step=flops_per_token * tokens_per_step, tokens_per_step=tokens_per_step, warmup=1)
    if main_rank:
        print(
            f"model {args.model}: {n_params / 1e6:.2f}M parameters, {config.n_layers} layers, d_model {config.d_model}, "
            f"{config.n_heads}/{config.n_kv_heads} heads; {world} rank(s) x {args.batch_size} x {args.seq_len} tokens a step; "
            f"amp {'on' if amp else 'off'}",
            file=sys.stderr,
        )

    read_every = args.log_every or QUIET_READ_EVERY
    # Tensor parallel: one global batch of every dp replica's rows; shard_batch keeps this rank's (or, on XLA SPMD,
    # shards it over dp on the devices). Otherwise each rank loads its own part.
    loader = ad.data_loader(batches(args, rank, world) if mesh is None else global_batches(args, replicas))
    losses: list[float] = []
    pending: list[torch.Tensor] = []  # this window's losses, still on the device
    last: torch.Tensor | None = None  # this rank's latest loss
    started = time.perf_counter()
    window_start, window_steps = started, 0
    with contextlib.ExitStack() as stack:
        session = stack.enter_context(ad.profile(args.profile)) if args.profile else None
        for step, (x, y) in enumerate(loader):
            if step < start_step:
                continue  # the sampler is deterministic: skip what the checkpoint already trained on
            if mesh is not None:
                x, y = ad.distributed.shard_batch(x, mesh), ad.distributed.shard_batch(y, mesh)
            with ad.record("train_step"), ad.autocast(enabled=amp):
                loss = step_fn(x, y)
            loss.backward()
            optimizer.step()
            optimizer.zero_grad(set_to_none=True)
            ad.step()
            meter.step()
            pending.append(loss.detach())
            last = pending[-1]
            done, window_steps = step + 1, window_steps + 1
            if done % read_every == 0 or done == args.steps:
                window = read_losses(pending, world)
                check_finite(window, done - len(window), args)
                losses += window
                now = time.perf_counter()
                if args.log_every and main_rank:
                    rate = window_steps / (now - window_start)
                    print(
                        f"step {done:5d}/{args.steps}  loss {losses[-1]:.4f}  {rate:.2f} steps/s  "
                        f"{rate * tokens_per_step:,.0f} tokens/s  elapsed {clock(now - started)}  "
                        f"left {clock((args.steps - done) / rate)}",
                        file=sys.stderr,
                    )
                window_start, window_steps = now, 0
            if args.checkpoint_dir and args.checkpoint_every and done % args.checkpoint_every == 0:
                save_checkpoint(args.checkpoint_dir, done, core, optimizer, sharded)
            if done == args.crash_at_step and resumed_from is None and args.crash_rank in (None, rank):
                print(f"rank {rank}: injected crash after step {done}", file=sys.stderr, flush=True)
                os.kill(os.getpid(), signal.SIGKILL)  # a real, unclean death: no cleanup, no final checkpoint
    meter.stop()  # the timed window ends with the last step, before the final read and checkpoint
    if pending:
        losses += read_losses(pending, world)
    by_rank = ad.distributed.all_gather(last.float().reshape(1)).cpu().flatten().tolist() if last is not None else []
    profile_files = [str(f) for f in session.files] if session else []
    if args.checkpoint_dir:
        save_checkpoint(args.checkpoint_dir, args.steps, core, optimizer, sharded)
    exported = export_trained(core, args) if args.export else None
    report = meter.report()
    # The job runs at its slowest rank's pace: scale this rank's figures by its share of the longest timed span.
    slowest = ad.distributed.all_reduce(torch.tensor([report.seconds], dtype=torch.float64, device=ad.device()), "max")
    pace = report.seconds / float(slowest.cpu()) if report.seconds > 0 else 1.0
    checksum, replicas_agree = job_checksum(core, sharded=sharded and world > 1)
    b = ad.backend()
    result = {
        "backend": b.name,
        "device": str(ad.device()),
        "chip": b.chip,
        "world_size": world,
        "rank": rank,
        "model": args.model,
        "params": n_params,
        "steps": args.steps,
        "trained_steps": len(losses),
        "resumed_from": resumed_from,
        "first_loss": losses[0] if losses else None,
        "last_loss": losses[-1] if losses else None,
        "losses": [round(v, 6) for v in losses],  # each step's loss, the mean over ranks
        "last_loss_by_rank": by_rank,
        "tokens_per_s": report.tokens_per_s * pace if report.tokens_per_s else None,
        "mfu": report.mfu * pace if report.mfu is not None else None,
        "mfu_note": report.mfu_note,
        "flops_per_token": flops_per_token,
        "batch_size": args.batch_size,
        "seq_len": args.seq_len,
        "parallel": args.parallel if world > 1 or mesh is not None else None,
        "mesh": degrees,
        "compile": args.compile,
        "amp": amp,
        "activation_checkpointing": args.activation_checkpointing,
        "seconds": time.perf_counter() - started,
        "param_checksum": checksum,
        "replicas_agree": replicas_agree,
        "profile_files": profile_files,
        "export": exported,
        "versions": b.versions,
        "main": main_rank,  # main() prints the result on this rank only
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
        config = dataclasses.asdict(core.config)  # for `anydevice export` (anydevice_export below)
        ad.save(
            {"step": step, "model": core.state_dict(), "optimizer": optimizer.state_dict(), "config": config},
            directory / f"step-{step}.pt",
        )


def export_trained(core: nn.Module, args: argparse.Namespace) -> dict[str, Any]:
    """``--export TARGET FILE``: the trained model's logits, traced with one sequence of the training data."""
    target, path = args.export
    sample = next(iter(batches(args, 0, 1)))[0][:1]
    exported = ad.export(Logits(core), (sample,), target=target, path=path)
    if ad.distributed.is_main() or ad.distributed.world_size() == 1:
        print(exported.summary(), file=sys.stderr)
    return exported.as_dict()


def anydevice_export(checkpoint: dict[str, Any] | None) -> tuple[nn.Module, tuple[torch.Tensor]]:
    """``anydevice export step-N.pt --script examples/train.py``: the checkpoint's model (logits) and one sequence.

    Without a checkpoint, the tiny preset's freshly initialised model.
    """
    if checkpoint is None:
        config = PRESETS["tiny"].config
    elif "config" not in checkpoint:
        raise ad.AnyDeviceError(
            "This checkpoint holds no model config (written by an older examples/train.py).",
            "Retrain with this train.py, or export right after training: --export litert FILE.",
        )
    else:
        config = LlamaConfig(**checkpoint["config"])
    model = Llama(config)
    if checkpoint is not None:
        model.load_state_dict(checkpoint["model"])
    sample = corpus.corpus_bytes()[: config.seq_len].long().unsqueeze(0)
    return Logits(model), (sample,)


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    try:
        result = train(args)
    except ad.AnyDeviceError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except NonFiniteLoss as exc:
        if ad.distributed.is_main() or ad.distributed.world_size() == 1:
            print(f"error: {exc}", file=sys.stderr)
        return 1
    finally:
        ad.distributed.shutdown()  # after train() returned: its wrapped model can be freed before the group goes
    if result.pop("main"):
        print(json.dumps(result), flush=True)  # the job's one result: the main rank's, job-wide
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
