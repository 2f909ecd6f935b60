"""Helpers for the distributed tests: run `anydevice run` (or a script) in real subprocesses."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
WORKERS = Path(__file__).parent / "workers"
TRAIN = REPO / "examples" / "train.py"


@dataclass
class Result:
    returncode: int
    stdout: str
    stderr: str

    def json_lines(self) -> list[dict]:
        """Every stdout line that is a JSON object (one per rank for the workers and train.py)."""
        out = []
        for line in self.stdout.splitlines():
            line = line.strip()
            if line.startswith("{"):
                out.append(json.loads(line))
        return out

    def by_rank(self) -> dict[int, dict]:
        return {row["rank"]: row for row in self.json_lines()}


def child_env(**extra: str) -> dict[str, str]:
    """A clean environment for children: cpu, one thread per rank, no stray launch variables."""
    env = {k: v for k, v in os.environ.items() if k not in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT", "LOCAL_WORLD_SIZE")}
    env.update(ANYDEVICE="cpu", OMP_NUM_THREADS="1", ANYDEVICE_QUIET="1", PYTHONUNBUFFERED="1")
    env.update(extra)
    return env


def run(cmd: list[str], timeout: float, **extra_env: str) -> Result:
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=child_env(**extra_env), cwd=REPO)
    return Result(proc.returncode, proc.stdout, proc.stderr)


@pytest.fixture
def anydevice_run() -> Callable[..., Result]:
    """Run ``python -m anydevice run ARGS`` and return its exit status and output."""

    def go(*args: str | Path, timeout: float = 120, **extra_env: str) -> Result:
        return run([sys.executable, "-m", "anydevice", "run", *map(str, args)], timeout, **extra_env)

    return go


@pytest.fixture
def python() -> Callable[..., Result]:
    """Run ``python ARGS`` (one process, no launcher)."""

    def go(*args: str | Path, timeout: float = 120, **extra_env: str) -> Result:
        return run([sys.executable, *map(str, args)], timeout, **extra_env)

    return go
