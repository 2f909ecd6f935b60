"""XLA lane: anydevice against idiomatic raw torch_xla, eager (lazy tensors) and compiled (openxla).

    PJRT_DEVICE=CPU ANYDEVICE=xla python benchmarks/xla_overhead.py [--steps 10] [--rounds 6]

Run it in the XLA lane venv (``scripts/venv xla``). Same model, data and optimizer as
benchmarks/step_overhead.py; every variant is built and warmed up once (graphs traced and
compiled there), then timed in rotated rounds (benchmarks/rotate.py):

* ``raw torch_xla``: ``torch_xla.device()``, ``MpDeviceLoader``, ``torch_xla.sync()`` after the
  optimizer step (what torch_xla's own examples do); ``raw torch_xla (control)`` is an identical
  copy, whose ratio is the noise floor;
* ``anydevice``: ``ad.to``, ``ad.data_loader``, ``ad.step()``, ``StepMeter.step()``;

each eager and compiled (``torch.compile(backend="openxla")`` against ``ad.compile``). Each round
ends by waiting for the device (``xm.wait_device_ops`` / ``ad.synchronize``) inside the timing.
Writes benchmarks/results/xla_overhead.json.
"""

from __future__ import annotations

import argparse
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


def raw(steps: int, compiled: bool) -> Callable[..., float]:
    import torch_xla  # noqa: TID251 - the raw torch_xla baseline
    import torch_xla.core.xla_model as xm  # noqa: TID251
    import torch_xla.distributed.parallel_loader as pl  # noqa: TID251

    device = torch_xla.device()
    model, opt = workload.new_model()
    model = model.to(device)
    fwd: Callable[..., torch.Tensor] = torch.compile(model, backend="openxla") if compiled else model  # type: ignore[assignment]

    def run(n: int = steps) -> float:
        loader = pl.MpDeviceLoader(workload.batches(n, BATCH, SEQ), device)
        start = time.perf_counter()
        for x, y in loader:
            loss = fwd(x, y)
            loss.backward()
            opt.step()
            opt.zero_grad(set_to_none=True)
            torch_xla.sync()
        xm.wait_device_ops()
        return (time.perf_counter() - start) / n

    return run


def anydevice(steps: int, compiled: bool) -> Callable[..., float]:
    model, opt = workload.new_model()
    model = ad.to(model)
    fwd: Callable[..., torch.Tensor] = ad.compile(model) if compiled else model
    meter = ad.StepMeter(tokens_per_step=BATCH * SEQ, warmup=0)

    def run(n: int = steps) -> float:
        loader: Iterable[Any] = ad.data_loader(workload.batches(n, BATCH, SEQ))
        start = time.perf_counter()
        for x, y in loader:
            loss = fwd(x, y)
            loss.backward()
            opt.step()
            opt.zero_grad(set_to_none=True)
            ad.step()
            meter.step()
        ad.synchronize()
        return (time.perf_counter() - start) / n

    return run


WAYS: dict[str, Callable[[int, bool], Callable[..., float]]] = {
    "raw torch_xla": raw,
    "raw torch_xla (control)": raw,
    "anydevice": anydevice,
}


def main(argv: list[str] | None = None) -> dict[str, Any]:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--steps", type=int, default=10, help="steps per variant per round")
    p.add_argument("--rounds", type=int, default=6)
    p.add_argument("--warmup", type=int, default=3, help="steps each variant runs first (traces and compiles)")
    p.add_argument("--discard", type=int, default=1, help="warm-up rounds run but not recorded")
    p.add_argument("--no-compile", action="store_true", help="eager (lazy tensor) variants only")
    p.add_argument("--out", type=Path, help="JSON file (default benchmarks/results/xla_overhead.json)")
    opts = p.parse_args(argv)
    if ad.backend().name != "xla":
        p.error(f"ANYDEVICE selected {ad.backend().name!r}; run with ANYDEVICE=xla (and PJRT_DEVICE) in the XLA lane venv")
    modes = [False] if opts.no_compile else [False, True]
    variants, setup_s = rotate.prepare(WAYS, modes, opts.steps, opts.warmup)
    samples = rotate.rotate(variants, opts.rounds, discard=opts.discard)
    result: dict[str, Any] = {
        "benchmark": "xla_overhead",
        "device": str(ad.device()),
        "machine": rotate.machine(),
        "steps_per_round": opts.steps,
        "rounds": opts.rounds,
        "discarded_warmup_rounds": opts.discard,
        "tokens_per_step": BATCH * SEQ,
        "setup_s": setup_s,
        "s_per_step": {name: rotate.spread(v) for name, v in samples.items()},
        "ratio_to_raw": {},
    }
    try:
        import torch_xla  # noqa: TID251

        result["machine"]["torch_xla"] = torch_xla.__version__
    except ImportError:
        pass
    for compiled in modes:
        mode = "compiled" if compiled else "eager"
        names = [n for n in variants if n.endswith(f"[{mode}]")]
        result["ratio_to_raw"][mode] = rotate.ratios(samples, f"raw torch_xla [{mode}]", names)
    for table in result["ratio_to_raw"].values():
        for name, r in table.items():
            ms = result["s_per_step"][name]["median"] * 1e3
            print(f"{name:<34} {ms:8.2f} ms/step  ratio x{r['median']:.3f} [{r['min']:.3f}..{r['max']:.3f}]")
    rotate.write("xla_overhead", result, opts.out)
    return result


if __name__ == "__main__":
    main()
