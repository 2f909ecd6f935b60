"""Per-step cost of a CUDA-written loop under cuda-compat against the same loop ported by hand.

    ANYDEVICE=cpu python benchmarks/cuda_compat_overhead.py [--steps 10] [--rounds 10]
    ANYDEVICE=xla PJRT_DEVICE=CPU python benchmarks/cuda_compat_overhead.py      # the XLA lane

One process, the benchmark workload (benchmarks/workload.py), three variants rotated each round
(benchmarks/rotate.py): ``hand port`` (``.to(device)``; on xla ``torch_xla.sync()`` after the optimizer
step), ``hand port (control)`` (an identical copy: the noise floor) and ``cuda-compat``: the loop as
written for a GPU (``.pin_memory().to("cuda", non_blocking=True)``, ``torch.cuda.synchronize()``-free,
``torch.autocast("cuda", enabled=False)``), run with cuda-compat enabled for its round and disabled
after (enable/disable are outside the timing). Ratios are per round, to the same round's hand port.
Also the per-call cost of the redirected calls (``Tensor.to("cuda")``, ``torch.cuda.is_available()``).
Writes benchmarks/results/cuda_compat_overhead[-DEVICE].json.
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
import rotate
import workload

import anydevice as ad
from anydevice import cuda_compat

BATCH, SEQ = 16, 64


def hand_port(steps: int, compiled: bool) -> Callable[[int], float]:
    device = ad.device()
    lazy = device.type == "xla"
    model, _ = workload.new_model()
    model = model.to(device)
    # the optimizer of the moved parameters: on xla, .to() makes new Parameters, so an optimizer built before
    # the move would step the CPU copies (the port would train nothing and skip the optimizer's device work)
    opt = torch.optim.AdamW(model.parameters(), lr=3e-3)

    def run(n: int = steps) -> float:
        start = time.perf_counter()
        for x, y in workload.batches(n, BATCH, SEQ):
            loss = model(x.to(device), y.to(device))
            loss.backward()
            opt.step()
            opt.zero_grad(set_to_none=True)
            if lazy:
                import torch_xla

                torch_xla.sync()
        loss.item()
        return (time.perf_counter() - start) / n

    return run


def cuda_written(steps: int, compiled: bool) -> Callable[[int], float]:
    cuda_compat.enable()
    try:
        model, opt = workload.new_model()
        model = model.cuda()
    finally:
        cuda_compat.disable()

    def run(n: int = steps) -> float:
        cuda_compat.enable()
        try:
            start = time.perf_counter()
            for x, y in workload.batches(n, BATCH, SEQ):
                x, y = x.pin_memory().to("cuda", non_blocking=True), y.pin_memory().to("cuda", non_blocking=True)
                with torch.autocast("cuda", enabled=False):
                    loss = model(x, y)
                loss.backward()
                opt.step()
                opt.zero_grad(set_to_none=True)
            loss.item()
            return (time.perf_counter() - start) / n
        finally:
            cuda_compat.disable()

    return run


WAYS: dict[str, Callable[[int, bool], Callable[..., float]]] = {
    "hand port": hand_port,
    "hand port (control)": hand_port,
    "cuda-compat": cuda_written,
}


def per_call_us(n: int = 20000) -> dict[str, float]:
    """Microseconds per call of the redirected calls, and of the plain ``Tensor.to(device)``."""
    x = torch.ones(4)
    device = ad.device()
    out = {}
    start = time.perf_counter()
    for _ in range(n):
        x.to(device)
    out["Tensor.to(device), plain"] = (time.perf_counter() - start) / n * 1e6
    cuda_compat.enable()
    try:
        calls: dict[str, Callable[[], Any]] = {
            "Tensor.to(device) under cuda-compat": lambda: x.to(device),
            "Tensor.to('cuda') under cuda-compat": lambda: x.to("cuda"),
            "torch.cuda.is_available() under cuda-compat": torch.cuda.is_available,
        }
        for name, fn in calls.items():
            start = time.perf_counter()
            for _ in range(n):
                fn()
            out[name] = (time.perf_counter() - start) / n * 1e6
    finally:
        cuda_compat.disable()
    return out


def main(argv: list[str] | None = None) -> dict[str, Any]:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--steps", type=int, default=10, help="steps per variant per round")
    p.add_argument("--rounds", type=int, default=10)
    p.add_argument("--warmup", type=int, default=3)
    p.add_argument("--discard", type=int, default=1)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--out", type=Path)
    opts = p.parse_args(argv)
    torch.set_num_threads(opts.threads)
    import os

    os.environ["ANYDEVICE_QUIET"] = "1"  # cuda-compat is enabled once per round: no start-up line each time
    variants, setup_s = rotate.prepare(WAYS, [False], opts.steps, opts.warmup)
    samples = rotate.rotate(variants, opts.rounds, discard=opts.discard)
    device = ad.device()
    result: dict[str, Any] = {
        "benchmark": "cuda_compat_overhead",
        "device": str(device),
        "machine": rotate.machine(),
        "steps_per_round": opts.steps,
        "rounds": opts.rounds,
        "threads": opts.threads,
        "setup_s": setup_s,
        "s_per_step": {name: rotate.spread(v) for name, v in samples.items()},
        "ratio_to_hand_port": rotate.ratios(samples, "hand port [eager]"),
        "per_call_us": per_call_us(),
    }
    for name, r in result["ratio_to_hand_port"].items():
        ms = result["s_per_step"][name]["median"] * 1e3
        print(f"{name:<32} {ms:8.2f} ms/step  ratio x{r['median']:.3f} [{r['min']:.3f}..{r['max']:.3f}]")
    for name, us in result["per_call_us"].items():
        print(f"{name:<48} {us:7.2f} us")
    suffix = "" if device.type == "cpu" else f"-{device.type}"
    rotate.write(f"cuda_compat_overhead{suffix}", result, opts.out)
    return result


if __name__ == "__main__":
    main()
