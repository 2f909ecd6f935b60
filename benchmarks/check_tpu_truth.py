"""The CPU estimate against libtpu's compiled answer: check's memory figure per replica beside the compiler's
per-chip bytes, for the same step, on two TPU generations (docs/check.md's truth table).

    python benchmarks/check_tpu_truth.py [--targets tpu:v5e-8,tpu:v6e-8]

Each row is one model checked twice in one run: ``anydevice check`` with a plain ``--target tpu`` (the CPU
estimate: parameters + gradients + the optimizer's state after one step + the tensors saved for backward)
and with slice targets (the compiler, data parallel: every chip holds a whole replica, so the two answer
the same question). Prints a Markdown table. Needs the tpu-check lane.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

import torch

import anydevice as ad

ROOT = Path(__file__).resolve().parents[1]
SCRIPTS = [ROOT / "examples" / "train.py", ROOT / "tests" / "tpu_compile" / "scripts" / "lm_step.py"]


def wide() -> tuple[torch.nn.Module, torch.Tensor]:
    with torch.device("meta"):
        return torch.nn.Sequential(*[torch.nn.Linear(16384, 16384, bias=False) for _ in range(5)]), torch.empty(2, 16384)


def mlp() -> tuple[torch.nn.Module, torch.Tensor]:
    model = torch.nn.Sequential(torch.nn.Linear(1024, 4096), torch.nn.GELU(), torch.nn.Linear(4096, 1024))
    return model, torch.randn(64, 1024)


def gib(n: int | None) -> str:
    return "-" if n is None else f"{n / 2**30:.3f}"


def row(name: str, report: dict, targets: list[str]) -> str:
    by = {t["target"]: t for t in report["targets"]}
    memory = report["observation"]["memory"]
    estimate = sum(memory[k] for k in ("parameters", "gradients", "optimizer_state", "activations"))
    cells = [name, gib(estimate)]
    for t in targets:
        step = by[t]["compile"]
        total = step["per_chip_bytes"].get("total") if step["ok"] else step.get("required_bytes")
        verdict = "fits" if step["fits"] else "will not fit" if step["fits"] is False else "error"
        ratio = f"{total / estimate:.2f}" if total and estimate else "-"
        cells += [gib(total), ratio, verdict]
    return "| " + " | ".join(cells) + " |"


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--targets", default="tpu:v5e-8,tpu:v6e-8")
    targets = parser.parse_args().targets.split(",")
    head = ["model", "CPU estimate GiB"] + [f"{t} {c}" for t in targets for c in ("GiB/chip", "ratio", "verdict")]
    print("| " + " | ".join(head) + " |\n|" + "---|" * len(head))
    for script in SCRIPTS:
        done = subprocess.run(
            [sys.executable, "-m", "anydevice", "check", str(script), "--target", ",".join(targets), "--json", "--steps", "2"],
            capture_output=True,
            text=True,
            cwd=ROOT,
        )
        print(row(str(script.relative_to(ROOT)), json.loads(done.stdout), targets), flush=True)
    for name, build in (("MLP 1024-4096-1024, batch 64 (CPU)", mlp), ("5 x Linear(16384), batch 2 (meta)", wide)):
        model, x = build()
        report = ad.check(model, x, target=",".join(targets), optimizer=torch.optim.AdamW(model.parameters()))
        print(row(name, json.loads(report.model_dump_json()), targets), flush=True)


if __name__ == "__main__":
    main()
