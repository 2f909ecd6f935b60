"""``anydevice run -n 2`` against ``torchrun --nproc-per-node 2`` on the same raw DDP script.

    ANYDEVICE=cpu python benchmarks/launch_overhead.py [--steps 20] [--rounds 4]
    ANYDEVICE=cpu python benchmarks/launch_overhead.py --single [--rounds 8]

``--single``: the start-up ``anydevice run script.py`` (one process: no torch and no elastic agent in
the parent) and ``torchrun --nproc-per-node 1 script.py`` add to ``python script.py`` for a trivial
script that imports torch and makes one tensor (benchmarks/trivial.py): each round runs the three
once, in rotated order, after a discarded warm-up round; reported are the wall times and the paired
differences (medians). Compiled bytecode is cached under a temporary ``PYTHONPYCACHEPREFIX`` (as an
installed package has its ``.pyc``), also where ``PYTHONDONTWRITEBYTECODE`` is set. Writes
benchmarks/results/launch_single.json.

benchmarks/raw_ddp.py is plain torch (gloo, DistributedDataParallel): both launchers start it
unchanged. Each round launches it once with each launcher, in rotated order. Reported per
launcher: start-up (launch to every rank's group up, and to the first step done), wall time of
the whole launch, and tokens/s per rank after the first step; ratios are anydevice's over
torchrun's in the same round. Writes benchmarks/results/launch_overhead.json.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
import rotate

SCRIPT = Path(__file__).resolve().parent / "raw_ddp.py"
BIN = Path(sys.executable).parent


# On torch 2.13 and later a rank can abort in torch's C++ teardown at exit after its work is done ("terminate called
# without an active exception", SIGABRT), and plain torchrun then reports the launch as failed (anydevice run ends
# its ranks past that teardown: anydevice/cli/rank_end.py). A launch whose every rank wrote its record still counts;
# the abort is kept in the result and printed, never dropped.
ABORTED = re.compile(r"exitcode\s*:\s*-6\b")


def launch(cmd: list[str], steps: int, threads: int) -> dict[str, Any]:
    """Run one launch; returns the ranks' records, the launch's wall time and whether a rank aborted at exit."""
    env = {**os.environ, "ANYDEVICE_QUIET": "1", "OMP_NUM_THREADS": str(threads)}
    t0 = time.time()
    args = [str(SCRIPT), "--steps", str(steps), "--t0", repr(t0), "--threads", str(threads)]
    out = subprocess.run([*cmd, *args], capture_output=True, text=True, env=env, timeout=600)
    wall = time.time() - t0
    ranks = [json.loads(line) for line in out.stdout.splitlines() if line.startswith('{"rank"')]
    complete = len(ranks) == 2 and {r["world_size"] for r in ranks} == {2}
    aborted_at_exit = out.returncode != 0 and complete and ABORTED.search(out.stderr) is not None
    if out.returncode != 0 and not aborted_at_exit:
        raise RuntimeError(f"{' '.join(cmd)} failed ({out.returncode}):\n{out.stderr[-3000:]}")
    if not complete:
        raise RuntimeError(f"expected 2 ranks of one world of 2, got {ranks}\n{out.stderr[-3000:]}")
    return {"wall_s": wall, "ranks": sorted(ranks, key=lambda r: r["rank"]), "aborted_at_exit": aborted_at_exit}


TRIVIAL = Path(__file__).resolve().parent / "trivial.py"


def single(rounds: int, out: Path | None, script: Path = TRIVIAL) -> dict[str, Any]:
    """``anydevice run`` and ``torchrun -n 1`` of ``script`` against ``python script``: walls and paired differences.

    trivial.py (the default) imports torch, as a real script does; ``--script benchmarks/bare.py`` (imports
    nothing) shows the launcher's own cost without the variance of torch's import.
    """
    import tempfile

    cache = tempfile.mkdtemp(prefix="launch-single-pyc-")
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    env.update({"ANYDEVICE_QUIET": "1", "PYTHONPYCACHEPREFIX": cache})
    commands = {
        "python": [sys.executable, str(script)],
        "anydevice run": [str(BIN / "anydevice"), "run", str(script)],
        "torchrun -n 1": [str(BIN / "torchrun"), "--nproc-per-node", "1", str(script)],
    }

    def one(cmd: list[str]) -> float:
        start = time.perf_counter()
        done = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=600)
        wall = time.perf_counter() - start
        if done.returncode != 0 or not done.stdout.strip():
            raise RuntimeError(f"{' '.join(cmd)} failed ({done.returncode}):\n{done.stderr[-3000:]}")
        return wall

    wall = rotate.rotate({name: (lambda c=cmd: one(c)) for name, cmd in commands.items()}, rounds, discard=1)

    def over_python(name: str) -> dict[str, float]:
        return rotate.spread([a - p for a, p in zip(wall[name], wall["python"], strict=True)])

    result: dict[str, Any] = {
        "benchmark": "launch_single",
        "script": f"benchmarks/{script.name}",
        "machine": rotate.machine(),
        "rounds": rounds,
        "device": os.environ.get("ANYDEVICE", "auto"),
        "summary": {name: rotate.spread(v) for name, v in wall.items()},
        "anydevice_run_minus_python_s": over_python("anydevice run"),
        "torchrun_minus_python_s": over_python("torchrun -n 1"),
    }
    summary = result["summary"]
    print(
        f"python {summary['python']['median']:.2f} s, anydevice run {summary['anydevice run']['median']:.2f} s "
        f"(+{result['anydevice_run_minus_python_s']['median']:.2f} s), torchrun -n 1 {summary['torchrun -n 1']['median']:.2f} s "
        f"(+{result['torchrun_minus_python_s']['median']:.2f} s), medians of {rounds} paired rounds"
    )
    rotate.write("launch_single" if script == TRIVIAL else f"launch_single-{script.stem}", result, out)
    return result


def main(argv: list[str] | None = None) -> dict[str, Any]:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--steps", type=int, default=20)
    p.add_argument("--rounds", type=int, default=4)
    p.add_argument("--threads", type=int, default=1, help="torch threads per rank")
    p.add_argument("--single", action="store_true", help="one process: anydevice run script.py against python script.py")
    p.add_argument("--script", type=Path, default=TRIVIAL, help="with --single: the script (default benchmarks/trivial.py)")
    p.add_argument("--out", type=Path, help="JSON file (default benchmarks/results/launch_overhead.json)")
    opts = p.parse_args(argv)
    if opts.single:
        return single(opts.rounds, opts.out, opts.script.resolve())
    launchers = {
        "torchrun": [str(BIN / "torchrun"), "--nproc-per-node", "2", "--standalone"],
        "anydevice run": [str(BIN / "anydevice"), "run", "-n", "2"],
    }
    runs: dict[str, list[dict[str, Any]]] = {name: [] for name in launchers}

    def one(name: str) -> float:
        run = launch(launchers[name], opts.steps, opts.threads)
        runs[name].append(run)
        return float(run["wall_s"])

    wall = rotate.rotate({name: (lambda n=name: one(n)) for name in launchers}, opts.rounds)
    metrics: dict[str, dict[str, list[float]]] = {}
    for name, rs in runs.items():
        metrics[name] = {
            "wall_s": wall[name],
            "group_up_s": [max(r["group_up_s"] for r in run["ranks"]) for run in rs],
            "first_step_done_s": [max(r["first_step_done_s"] for r in run["ranks"]) for run in rs],
            "interpreter_start_s": [max(r["interpreter_start_s"] for r in run["ranks"]) for run in rs],
            "tokens_per_s_per_rank": [sum(r["tokens_per_s"] for r in run["ranks"]) / 2 for run in rs],
        }
    result: dict[str, Any] = {
        "benchmark": "launch_overhead",
        "script": "benchmarks/raw_ddp.py",
        "machine": rotate.machine(),
        "nproc": 2,
        "steps": opts.steps,
        "rounds": opts.rounds,
        "threads_per_rank": opts.threads,
        "commands": {name: " ".join(Path(c).name if i == 0 else c for i, c in enumerate(cmd)) for name, cmd in launchers.items()},
        "summary": {name: {k: rotate.spread(v) for k, v in m.items()} for name, m in metrics.items()},
        "ratio_anydevice_to_torchrun": {
            k: rotate.ratios({"a": metrics["anydevice run"][k], "t": metrics["torchrun"][k]}, "t", ["a"])["a"]
            for k in metrics["torchrun"]
        },
        "last_losses": {name: [r["last_loss"] for r in rs[-1]["ranks"]] for name, rs in runs.items()},
        "aborted_at_exit": {name: sum(run["aborted_at_exit"] for run in rs) for name, rs in runs.items()},
    }
    for name, summ in result["summary"].items():
        print(
            f"{name:<14} start-up {summ['group_up_s']['median']:.2f} s to group, {summ['first_step_done_s']['median']:.2f} s "
            f"to first step, wall {summ['wall_s']['median']:.2f} s, {summ['tokens_per_s_per_rank']['median']:.0f} tokens/s/rank"
        )
    for name, aborted in result["aborted_at_exit"].items():
        if aborted:
            print(f"{name}: {aborted} of {opts.rounds} launches had a rank abort in torch's teardown after its work")
    rotate.write("launch_overhead", result, opts.out)
    return result


if __name__ == "__main__":
    main()
