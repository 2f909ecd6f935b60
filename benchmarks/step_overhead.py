"""What anydevice costs per training step, against raw torch and (when installed) Hugging Face Accelerate.

    ANYDEVICE=cpu python benchmarks/step_overhead.py [--steps 100] [--repeat 3]

The same TinyGPT (examples/train.py), data and optimizer run three ways in one process, in turn:
raw torch; through anydevice's API (ad.to, ad.data_loader, ad.autocast(enabled=False), ad.step,
StepMeter); through accelerate.Accelerator (if importable). Reports the median seconds per step and
the ratio to raw torch, then the microseconds per call of each API a step adds. Prints a JSON line last.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "examples"))
from train import TinyGPT, batches, parse_args

import anydevice as ad


def _setup(seed: int = 0) -> tuple[TinyGPT, torch.optim.Optimizer]:
    torch.manual_seed(seed)
    model = TinyGPT()
    return model, torch.optim.AdamW(model.parameters(), lr=3e-3)


def raw(args: argparse.Namespace) -> float:
    model, opt = _setup()
    loader = batches(args, 0, 1)
    start = time.perf_counter()
    for x, y in loader:
        loss = model(x, y)
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
    return (time.perf_counter() - start) / args.steps


def with_anydevice(args: argparse.Namespace) -> float:
    model, opt = _setup()
    model = ad.to(model)
    loader = ad.data_loader(batches(args, 0, 1))
    meter = ad.StepMeter(tokens_per_step=args.batch_size * args.seq_len, warmup=0)
    start = time.perf_counter()
    for x, y in loader:
        with ad.autocast(enabled=False):
            loss = model(x, y)
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        ad.step()
        meter.step()
    return (time.perf_counter() - start) / args.steps


def with_accelerate(args: argparse.Namespace) -> float:
    from accelerate import Accelerator

    accelerator = Accelerator(cpu=ad.backend().device_type == "cpu")
    model, opt = _setup()
    model, opt, loader = accelerator.prepare(model, opt, batches(args, 0, 1))
    start = time.perf_counter()
    for x, y in loader:
        loss = model(x, y)
        accelerator.backward(loss)
        opt.step()
        opt.zero_grad(set_to_none=True)
    return (time.perf_counter() - start) / args.steps


def per_call_us(n: int = 2000) -> dict[str, float]:
    """Microseconds per call of the API a training step adds to raw torch."""
    meter = ad.StepMeter(warmup=0)
    x = torch.ones(16, 64)

    def autocast_off() -> None:
        with ad.autocast(enabled=False):
            pass

    def record() -> None:
        with ad.record("step"):
            pass

    calls: dict[str, Callable[[], Any]] = {
        "ad.step": ad.step,
        "StepMeter.step": meter.step,
        "ad.autocast": autocast_off,
        "ad.record": record,
        "ad.to(2 tensors)": lambda: ad.to((x, x)),
    }
    out = {}
    for name, fn in calls.items():
        start = time.perf_counter()
        for _ in range(n):
            fn()
        out[name] = (time.perf_counter() - start) / n * 1e6
    return out


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=100)
    parser.add_argument("--repeat", type=int, default=3)
    opts = parser.parse_args()
    args = parse_args(["--steps", str(opts.steps)])
    ways: dict[str, Callable[[argparse.Namespace], float]] = {"raw torch": raw, "anydevice": with_anydevice}
    if importlib.util.find_spec("accelerate") is not None:
        ways["accelerate"] = with_accelerate
    times: dict[str, list[float]] = {name: [] for name in ways}
    order = list(ways)
    for i in range(opts.repeat):  # interleaved and rotated, so drift and warm-up hit every way alike
        for name in order[i % len(order) :] + order[: i % len(order)]:
            times[name].append(ways[name](args))
    medians = {name: statistics.median(t) for name, t in times.items()}
    base = medians["raw torch"]
    result: dict[str, Any] = {"device": str(ad.device()), "steps": opts.steps, "repeat": opts.repeat, "s_per_step": medians}
    result["ratio_to_raw"] = {name: m / base for name, m in medians.items()}
    result["per_call_us"] = per_call_us()
    for name, m in medians.items():
        print(f"{name:<12} {m * 1e3:8.2f} ms/step   x{m / base:.3f} of raw torch")
    print("per call: " + ", ".join(f"{k} {v:.1f} us" for k, v in result["per_call_us"].items()))
    print(json.dumps(result))


if __name__ == "__main__":
    main()
