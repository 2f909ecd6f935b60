"""Tokens/s and MFU of each main-job preset (``examples/train.py --model NAME``) on the selected device.

    ANYDEVICE=cuda python benchmarks/presets.py [--models tiny,125m,1b,8b] [--steps 30] [-- extra train.py args]

Runs ``examples/train.py --model NAME --steps N`` once per preset, in a fresh process, and records
the JSON object it prints last (tokens_per_s, mfu, losses, device, ...). ``tiny`` is the CPU-sized
default; on a build of examples/train.py without ``--model`` the flag is left out for ``tiny``
(its default model) and the other presets are reported as unavailable. The larger presets need an
accelerator: on cpu they are skipped unless named in ``--models`` explicitly.
Writes benchmarks/results/presets-DEVICE.json.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
import rotate

import anydevice as ad

TRAIN = Path(__file__).resolve().parents[1] / "examples" / "train.py"
PRESETS = ("tiny", "125m", "1b", "8b")


def has_model_flag() -> bool:
    """Whether this build of examples/train.py has ``--model``."""
    out = subprocess.run([sys.executable, str(TRAIN), "--help"], capture_output=True, text=True, timeout=300)
    return "--model" in out.stdout


def run_preset(name: str, steps: int, with_flag: bool, extra: list[str]) -> dict[str, Any]:
    cmd = [sys.executable, str(TRAIN), *(["--model", name] if with_flag else []), "--steps", str(steps), *extra]
    start = time.perf_counter()
    out = subprocess.run(cmd, capture_output=True, text=True, env={**os.environ, "ANYDEVICE_QUIET": "1"}, timeout=3600)
    wall = time.perf_counter() - start
    if out.returncode != 0:
        return {"error": f"exit {out.returncode}: {out.stderr.strip().splitlines()[-1] if out.stderr.strip() else ''}"}
    record: dict[str, Any] = json.loads(out.stdout.strip().splitlines()[-1])
    record["wall_s"] = wall
    record["command"] = " ".join(["python", "examples/train.py", *cmd[2:]])
    return record


def main(argv: list[str] | None = None) -> dict[str, Any]:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--models", help=f"comma-separated presets (default: all of {','.join(PRESETS)} the device can run)")
    p.add_argument("--steps", type=int, default=30)
    p.add_argument("--out", type=Path, help="JSON file (default benchmarks/results/presets-DEVICE.json)")
    p.add_argument("extra", nargs="*", help="more examples/train.py arguments (after --)")
    opts = p.parse_args(argv)
    device = ad.backend().device_type
    wanted = opts.models.split(",") if opts.models else list(PRESETS)
    unknown = [m for m in wanted if m not in PRESETS]
    if unknown:
        p.error(f"unknown preset(s) {unknown}; choose from {', '.join(PRESETS)}")
    with_flag = has_model_flag()
    results: dict[str, Any] = {}
    for name in wanted:
        if not with_flag and name != "tiny":
            results[name] = {"skipped": "this examples/train.py has no --model flag (only its default model, tiny)"}
        elif device == "cpu" and name != "tiny" and not opts.models:
            results[name] = {"skipped": "needs an accelerator (run with ANYDEVICE=cuda/tpu/...; or name it in --models)"}
        else:
            results[name] = run_preset(name, opts.steps, with_flag, opts.extra)
        r = results[name]
        if "tokens_per_s" in r:
            mfu = "n/a (peak unknown)" if r.get("mfu") is None else f"{r['mfu']:.4f}"
            print(f"{name:<6} {r['tokens_per_s']:>12.0f} tokens/s  MFU {mfu}  on {r.get('device')}")
        else:
            print(f"{name:<6} {r}")
    result = {
        "benchmark": "presets",
        "device": device,
        "machine": rotate.machine(),
        "steps": opts.steps,
        "model_flag": with_flag,
        "presets": results,
    }
    rotate.write(f"presets-{device}", result, opts.out)
    return result


if __name__ == "__main__":
    main()
