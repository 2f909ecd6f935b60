"""What anydevice costs per training step against raw torch, beside Accelerate and Lightning Fabric.

    ANYDEVICE=cpu python benchmarks/step_overhead.py [--steps 10] [--rounds 10] [--no-compile]

One process builds every variant once (same seed, model, data and optimizer; compiled variants
compile and warm up here, outside the timing), then runs rounds: in each round every variant
trains ``--steps`` steps, in an order rotated by one each round (benchmarks/rotate.py). Variants:

* ``raw torch``: the plain loop (``.to(device)``, forward, backward, ``opt.step``, ``zero_grad``);
  ``raw torch (control)`` is a second, identical copy: its ratio to the first is the noise floor;
* ``anydevice``: ``ad.to``, ``ad.data_loader``, ``ad.autocast(enabled=False)``, ``ad.step()``,
  ``StepMeter.step()``;
* ``accelerate``: ``Accelerator.prepare`` (model, optimizer, loader), ``accelerator.backward``;
* ``fabric``: ``lightning_fabric.Fabric.setup`` / ``setup_dataloaders``, ``fabric.backward``;

each eager and compiled (``torch.compile`` / ``ad.compile`` / Accelerate's ``dynamo_backend`` /
Fabric given a ``torch.compile``d model, as each documents). Ratios are per round, to the same
round's raw torch of the same mode; the JSON gives their median, min, max and quartiles.
Peers that are not installed are listed under ``skipped``. Writes benchmarks/results/step_overhead.json.
"""

from __future__ import annotations

import argparse
import importlib.util
import sys
import time
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
import rotate
import workload

import anydevice as ad

BATCH, SEQ = 16, 64


def _finish(loss: torch.Tensor, start: float, steps: int) -> float:
    loss.item()  # one host read per round, in every variant: the queued work is done
    return (time.perf_counter() - start) / steps


def raw(steps: int, compiled: bool) -> Callable[[], float]:
    device = torch.device(str(ad.device()))  # resolved once; the loop below is plain torch
    model, opt = workload.new_model()
    model = model.to(device)
    fwd: Callable[..., torch.Tensor] = torch.compile(model) if compiled else model  # type: ignore[assignment]

    def run(n: int = steps) -> float:
        loader = workload.batches(n, BATCH, SEQ)
        start = time.perf_counter()
        for x, y in loader:
            loss = fwd(x.to(device, non_blocking=True), y.to(device, non_blocking=True))
            loss.backward()
            opt.step()
            opt.zero_grad(set_to_none=True)
        return _finish(loss, start, n)

    return run


def anydevice(steps: int, compiled: bool) -> Callable[[], float]:
    model, opt = workload.new_model()
    model = ad.to(model)
    fwd: Callable[..., torch.Tensor] = ad.compile(model) if compiled else model
    meter = ad.StepMeter(tokens_per_step=BATCH * SEQ, warmup=0)

    def run(n: int = steps) -> float:
        loader: Iterable[Any] = ad.data_loader(workload.batches(n, BATCH, SEQ))
        start = time.perf_counter()
        for x, y in loader:
            with ad.autocast(enabled=False):
                loss = fwd(x, y)
            loss.backward()
            opt.step()
            opt.zero_grad(set_to_none=True)
            ad.step()
            meter.step()
        return _finish(loss, start, n)

    return run


_accelerators: dict[bool, Any] = {}


def accelerate(steps: int, compiled: bool) -> Callable[[], float]:
    from accelerate import Accelerator
    from accelerate.state import AcceleratorState

    AcceleratorState._reset_state(reset_partial_state=True)  # one Accelerator per mode in this process
    accelerator = Accelerator(cpu=ad.device().type == "cpu", dynamo_backend="inductor" if compiled else "no")
    model, opt = workload.new_model()
    model, opt = accelerator.prepare(model, opt)

    def run(n: int = steps) -> float:
        loader = accelerator.prepare_data_loader(workload.batches(n, BATCH, SEQ))
        start = time.perf_counter()
        for x, y in loader:
            loss = model(x, y)
            accelerator.backward(loss)
            opt.step()
            opt.zero_grad(set_to_none=True)
        return _finish(loss, start, n)

    return run


def fabric(steps: int, compiled: bool) -> Callable[[], float]:
    from lightning_fabric import Fabric

    kind = ad.device().type
    f = Fabric(accelerator={"cuda": "cuda", "mps": "mps"}.get(kind, "cpu"), devices=1, precision="32-true")
    model, opt = workload.new_model()
    module = torch.compile(model) if compiled else model
    fmodel, fopt = f.setup(module, opt)

    def run(n: int = steps) -> float:
        loader = f.setup_dataloaders(workload.batches(n, BATCH, SEQ))
        start = time.perf_counter()
        for x, y in loader:
            loss = fmodel(x, y)
            f.backward(loss)
            fopt.step()
            fopt.zero_grad(set_to_none=True)
        return _finish(loss, start, n)

    return run


PEERS = {"accelerate": "accelerate", "fabric": "lightning_fabric"}
WAYS: dict[str, Callable[[int, bool], Callable[[], float]]] = {
    "raw torch": raw,
    "raw torch (control)": raw,
    "anydevice": anydevice,
    "accelerate": accelerate,
    "fabric": fabric,
}


def per_call_us(n: int = 2000) -> dict[str, float]:
    """Microseconds per call of each API a training step adds to raw torch."""
    meter = ad.StepMeter(warmup=0)
    x = torch.ones(16, 64)

    def autocast_off() -> None:
        with ad.autocast(enabled=False):
            pass

    calls: dict[str, Callable[[], Any]] = {
        "ad.step": ad.step,
        "StepMeter.step": meter.step,
        "ad.autocast(enabled=False)": autocast_off,
        "ad.to(2 tensors)": lambda: ad.to((x, x)),
    }
    out = {}
    for name, fn in calls.items():
        start = time.perf_counter()
        for _ in range(n):
            fn()
        out[name] = (time.perf_counter() - start) / n * 1e6
    return out


def main(argv: list[str] | None = None) -> dict[str, Any]:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--steps", type=int, default=10, help="steps per variant per round")
    p.add_argument("--rounds", type=int, default=10)
    p.add_argument("--warmup", type=int, default=3, help="steps each variant runs before the rounds (compiles)")
    p.add_argument("--discard", type=int, default=1, help="warm-up rounds run but not recorded")
    p.add_argument("--no-compile", action="store_true", help="eager variants only")
    p.add_argument("--threads", type=int, default=1, help="torch intra-op threads (1: steadier on a shared machine)")
    p.add_argument("--out", type=Path, help="JSON file (default benchmarks/results/step_overhead.json)")
    opts = p.parse_args(argv)
    torch.set_num_threads(opts.threads)
    modes = [False] if opts.no_compile else [False, True]
    skipped = {name: f"{module} is not installed" for name, module in PEERS.items() if importlib.util.find_spec(module) is None}
    variants, setup_s = rotate.prepare(WAYS, modes, opts.steps, opts.warmup, skipped)
    samples = rotate.rotate(variants, opts.rounds, discard=opts.discard)
    result: dict[str, Any] = {
        "benchmark": "step_overhead",
        "device": str(ad.device()),
        "machine": rotate.machine(),
        "steps_per_round": opts.steps,
        "rounds": opts.rounds,
        "discarded_warmup_rounds": opts.discard,
        "threads": opts.threads,
        "tokens_per_step": BATCH * SEQ,
        "skipped": skipped,
        "setup_s": setup_s,
        "s_per_step": {name: rotate.spread(v) for name, v in samples.items()},
        "ratio_to_raw": {},
    }
    for compiled in modes:
        mode = "compiled" if compiled else "eager"
        names = [n for n in variants if n.endswith(f"[{mode}]")]
        result["ratio_to_raw"][mode] = rotate.ratios(samples, f"raw torch [{mode}]", names)
    result["per_call_us"] = per_call_us()
    for table in result["ratio_to_raw"].values():
        for name, r in table.items():
            ms = result["s_per_step"][name]["median"] * 1e3
            print(f"{name:<32} {ms:8.2f} ms/step  ratio x{r['median']:.3f} [{r['min']:.3f}..{r['max']:.3f}]")
    rotate.write("step_overhead", result, opts.out)
    return result


if __name__ == "__main__":
    main()
