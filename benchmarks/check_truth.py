"""Truth test of ``anydevice check --target xla``: its prediction against a real run on torch_xla's PJRT CPU.

    PJRT_DEVICE=CPU python benchmarks/check_truth.py [--steps 5] [--out PATH]   # in the XLA lane's venv

For each script, ``anydevice check SCRIPT --target xla --json --steps N`` predicts; then the script runs
with ``ANYDEVICE=xla`` (and cuda-compat for CUDA-written scripts), stopped after step N+1, and torch_xla's
own metrics are read: the ops it ran on the CPU (``executed_fallback_ops``), graphs compiled
(``CompileTime``) and executed (``ExecuteTime``) after each optimizer step. Compared:

- CPU fallbacks: the predicted ops (by base name) against the executed ones;
- steady-state compiles (steps 3..N, after the first steps built the step graph and the optimizer state):
  predicted = graphs per step x batches among 3..N with a signature not seen before; actual = compiles there;
- graphs per step: predicted 1 + host reads + CPU-fallback calls per step (each cuts the lazy graph);
  actual = executions per steady-state step.

Prints a Markdown table (docs/check.md carries it) and writes JSON to --out.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
SCRIPTS: list[tuple[str, list[str], list[str]]] = [  # script, its arguments, more arguments for the xla run only
    ("examples/train.py", ["--steps", "20", "--log-every", "0"], []),
    ("tests/cuda_compat/scripts/loader_cuda.py", [], []),
    ("tests/cuda_compat/scripts/loader_port.py", [], ["--device=xla"]),  # ported by hand: it picks torch_xla itself
    ("tests/check/scripts/median_model.py", ["--steps", "20"], []),
    ("tests/check/scripts/cases.py", ["branch", "--steps", "20"], []),
    ("tests/check/scripts/cases.py", ["nonzero", "--steps", "20"], []),
    ("tests/check/scripts/cases.py", ["varying", "--steps", "20"], []),
]
MEASURE = """
import json, runpy, sys
import torch
from torch.optim.optimizer import register_optimizer_step_post_hook
import torch_xla.debug.metrics as met
steps, limit = [], int(sys.argv[1])
class Enough(BaseException):
    pass
def count(name):
    data = met.metric_data(name)
    return int(data[0]) if data else 0
def post(opt, args, kwargs):
    steps.append([count("CompileTime"), count("ExecuteTime")])
    if len(steps) > limit:
        raise Enough
register_optimizer_step_post_hook(post)
sys.argv = sys.argv[2:]
try:
    runpy.run_path(sys.argv[0], run_name="__main__")
except Enough:
    pass
print("TRUTH " + json.dumps({"steps": steps, "fallbacks": sorted(met.executed_fallback_ops())}))
"""


READ = "aten::_local_scalar_dense"


def base(op: str) -> str:
    return op.removeprefix("aten::").split(".", 1)[0]


def predict(script: str, args: list[str], steps: int) -> dict[str, Any]:
    command = [
        sys.executable,
        "-m",
        "anydevice",
        "check",
        script,
        "--target",
        "xla",
        "--json",
        "--steps",
        str(steps),
        "--",
        *args,
    ]
    done = subprocess.run(command, capture_output=True, text=True, cwd=REPO, timeout=900)
    if done.returncode not in (0, 1):
        raise RuntimeError(f"check failed on {script}: {done.stderr[-2000:]}")
    report = json.loads(done.stdout)
    obs, (xla,) = report["observation"], report["targets"]
    fallbacks = [o for o in xla["ops"] if o["status"] == "cpu_fallback"]
    sequence = obs["sequence"]
    # the first step's graph also creates the optimizer state: a later batch compiles unless steps 2.. saw its shape
    new_late = sum(1 for i in range(2, len(sequence)) if sequence[i] not in sequence[1:i])
    graphs = xla["graphs_per_step"]
    return {
        "verdict": xla["summary"],
        # torch_xla counts a host read (.item(), `if tensor:`) among its fallback ops as _local_scalar_dense
        "fallbacks": sorted(
            {base(o["op"]) for o in fallbacks} | {"_local_scalar_dense" for o in obs["data_dependent"] if o["op"] == READ}
        ),
        "graph_breaks": obs["capture"]["graph_break_count"],
        "graphs_per_step": graphs,
        "steady_compiles": graphs * new_late,
        "signatures": len(obs["signatures"]),
    }


def measure(script: str, args: list[str], steps: int) -> dict[str, Any]:
    env = {k: v for k, v in os.environ.items() if k not in ("ANYDEVICE_STRICT", "RANK", "WORLD_SIZE", "LOCAL_RANK")}
    env.update(ANYDEVICE="xla", PJRT_DEVICE="CPU", ANYDEVICE_QUIET="1")
    if "cuda" in Path(script).name:
        env["ANYDEVICE_CUDA_COMPAT"] = "1"
    command = [sys.executable, "-c", MEASURE, str(steps), script, *args]
    done = subprocess.run(command, capture_output=True, text=True, cwd=REPO, env=env, timeout=900)
    line = next((x for x in done.stdout.splitlines() if x.startswith("TRUTH ")), None)
    if line is None:
        raise RuntimeError(f"the xla run of {script} failed: {done.stderr[-2000:]}")
    data = json.loads(line.removeprefix("TRUTH "))
    per_step = data["steps"]  # [compiles, executions] at each optimizer step's post hook
    first, last = per_step[2], per_step[min(steps, len(per_step) - 1)]  # step 3's hook .. step N+1's hook
    windows = max(min(steps, len(per_step) - 1) - 2, 1)
    return {
        "fallbacks": sorted({base(op) for op in data["fallbacks"]}),
        "steady_compiles": last[0] - first[0],
        "graphs_per_step": round((last[1] - first[1]) / windows, 2),
    }


def row(script: str, args: list[str], steps: int, xla_args: tuple[str, ...] = ()) -> dict[str, Any]:
    predicted, actual = predict(script, args, steps), measure(script, [*args, *xla_args], steps)
    agree = {
        "fallbacks": predicted["fallbacks"] == actual["fallbacks"],
        "steady_compiles": predicted["steady_compiles"] == actual["steady_compiles"],
        "graphs_per_step": predicted["graphs_per_step"] == actual["graphs_per_step"],
    }
    name = " ".join([script, *[a for a in args if not a.startswith("-") and not a.isdigit()]])
    return {"script": name, "predicted": predicted, "actual": actual, "agree": agree}


def markdown(rows: list[dict[str, Any]]) -> str:
    head = (
        "| script | check's xla verdict | CPU fallbacks: predicted / actual | steady-state compiles: predicted / actual "
        "| graphs per step: predicted / actual | graph breaks (dynamo) |\n|---|---|---|---|---|---|"
    )
    lines = [head]
    for r in rows:
        p, a, ok = r["predicted"], r["actual"], r["agree"]
        mark = {True: "✓", False: "✗"}
        lines.append(
            f"| `{r['script']}` | {p['verdict']} | {', '.join(p['fallbacks']) or 'none'} / {', '.join(a['fallbacks']) or 'none'} "
            f"{mark[ok['fallbacks']]} | {p['steady_compiles']} / {a['steady_compiles']} {mark[ok['steady_compiles']]} | "
            f"{p['graphs_per_step']} / {a['graphs_per_step']} {mark[ok['graphs_per_step']]} | {p['graph_breaks']} |"
        )
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=5)
    parser.add_argument("--only", help="run only scripts whose path contains this text")
    parser.add_argument("--out", type=Path, default=REPO / "benchmarks" / "results" / "check_truth.json")
    args = parser.parse_args()
    chosen = [(s, a, x) for s, a, x in SCRIPTS if not args.only or args.only in " ".join([s, *a])]
    rows = [row(s, a, args.steps, tuple(x)) for s, a, x in chosen]
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(rows, indent=2) + "\n")
    print(markdown(rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
