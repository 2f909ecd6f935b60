"""Regenerate tests/xla/fixtures/fsdp-2rank: a DCP checkpoint saved by 2 FSDP2 ranks in the main lane.

    python scripts/make_checkpoint_fixture.py      # with the main lane's python (torch 2.13, gloo on CPU)

The XLA lane (torch 2.9) loads it in tests/xla/test_checkpoint_xla.py and compares the parameter
digests with expected.json, written here from the saving run itself.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import torch

REPO = Path(__file__).resolve().parents[1]
FIXTURE = REPO / "tests" / "xla" / "fixtures" / "fsdp-2rank"
WORKER = REPO / "tests" / "distributed" / "workers" / "dcp_checkpoint.py"


def main() -> int:
    shutil.rmtree(FIXTURE, ignore_errors=True)
    env = {k: v for k, v in os.environ.items() if k not in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT")}
    env.update(ANYDEVICE="cpu", OMP_NUM_THREADS="1", ANYDEVICE_QUIET="1")
    cmd = [sys.executable, "-m", "anydevice", "run", "-n", "2", str(WORKER), "save", str(FIXTURE / "checkpoint"), "fsdp"]
    run = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=600, check=False)
    if run.returncode != 0:
        sys.stderr.write(run.stderr)
        return run.returncode
    rows = [json.loads(line[line.index("{") :]) for line in run.stdout.splitlines() if "{" in line]
    row = next((r for r in rows if r["rank"] == 0), None)
    if row is None:
        sys.stderr.write(f"no JSON line from rank 0 in:\n{run.stdout}\n{run.stderr}")
        return 1
    expected = {"saved_by": {"world_size": 2, "parallel": "fsdp", "torch": torch.__version__}, **row}
    (FIXTURE / "expected.json").write_text(json.dumps(expected, indent=2) + "\n")
    print(f"wrote {FIXTURE}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
