"""`ad.plan` of a Llama-3-8B-shaped model on meta for TPU slices, composed from 1- and 2-block compiles (docs/plan.md).

    /usr/bin/time -v python benchmarks/plan_llama.py --targets tpu:v5e-8,tpu:v5p-8 [--layers 32] [--budget 2]

The model is benchmarks/tpu_compile_llama.py's (8.03B parameters, bf16, AdamW, sequence 2048, one sequence per
replica, fsdp over the slice). Prints one JSON line per target: seconds, compiles, the verdict and what fits.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import torch

import anydevice as ad

sys.path.insert(0, str(Path(__file__).resolve().parent))
from tpu_compile_llama import Llama


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--targets", default="tpu:v5e-8,tpu:v5p-8")
    parser.add_argument("--layers", type=int, default=32)
    parser.add_argument("--seq", type=int, default=2048)
    parser.add_argument("--budget", type=int, default=2)
    parser.add_argument("--mesh", default="fsdp=-1")
    a = parser.parse_args()
    mesh = {k: int(v) for k, v in (p.split("=") for p in a.mesh.split(","))}
    with torch.device("meta"):
        model = Llama(layers=a.layers, seq=a.seq).to(torch.bfloat16)
        tokens = torch.zeros(1, a.seq, dtype=torch.long)
    optimizer = torch.optim.AdamW(model.parameters(), lr=3e-4, weight_decay=0.1)
    for target in a.targets.split(","):
        started = time.perf_counter()
        row = ad.plan(model, tokens, target=target, optimizer=optimizer, mesh=mesh, compose=True, budget=a.budget)["targets"][0]
        fit = row["fit"]
        compiles = row["as_written"]["compiles"] + sum(
            fit.get(k, {}).get("compiles", 0) for k in ("batch", "checkpointing", "sharding")
        )
        compiles += fit.get("refusal", {}).get("batch_1_layers_fsdp", {}).get("compiles", 0)
        print(
            json.dumps(
                {
                    "target": target,
                    "seconds": round(time.perf_counter() - started, 1),
                    "compiles": compiles,
                    "verdict": row["as_written"]["verdict"],
                    "per_chip_gib": round((row["as_written"]["per_chip_bytes"] or 0) / 2**30, 2),
                    "largest_batch": fit["batch"].get("found"),
                    "checkpointing": fit["checkpointing"].get("level"),
                    "refusal": fit.get("refusal", {}).get("message"),
                    "flops": row["time"].get("flops"),
                    "expected_seconds": row["time"].get("expected_seconds"),
                    "usd_per_million_tokens": row["cost"].get("usd_per_million_tokens"),
                }
            ),
            flush=True,
        )


if __name__ == "__main__":
    main()
