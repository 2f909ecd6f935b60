"""Helpers for the distributed tests: `anydevice run` and scripts in real subprocesses."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tests.utils import CHILD_DEFAULTS, CLEARED, REPO, TRAIN

WORKERS = Path(__file__).parent / "workers"
__all__ = ["REPO", "TRAIN", "WORKERS", "Result", "anydevice_run", "python"]


@dataclass
class Result:
    """A finished subprocess: exit status and output."""

    returncode: int
    stdout: str
    stderr: str

    def json_lines(self) -> list[dict[str, Any]]:
        """Every stdout line that is a JSON object (one per rank for the workers and train.py)."""
        return [json.loads(line) for line in self.stdout.splitlines() if line.strip().startswith("{")]

    def by_rank(self) -> dict[int, dict[str, Any]]:
        return {row["rank"]: row for row in self.json_lines()}


def _env(extra: dict[str, str]) -> dict[str, str]:
    env = {**CHILD_DEFAULTS, **{k: v for k, v in os.environ.items() if k not in CLEARED and not k.startswith("TORCHELASTIC_")}}
    env.pop("PYTHONUNBUFFERED", None)  # buffered stdout: each JSON line leaves in one write, not interleaved
    env.update(ANYDEVICE="cpu", OMP_NUM_THREADS="1", ANYDEVICE_QUIET="1")
    env.update(extra)
    return env


def _run(cmd: list[str], timeout: float, extra: dict[str, str]) -> Result:
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=_env(extra), cwd=REPO)
    return Result(proc.returncode, proc.stdout, proc.stderr)


def anydevice_run(*args: str | Path, timeout: float = 120, **extra_env: str) -> Result:
    """``python -m anydevice run ARGS`` on cpu, one thread per rank."""
    return _run([sys.executable, "-m", "anydevice", "run", *map(str, args)], timeout, extra_env)


def python(*args: str | Path, timeout: float = 120, **extra_env: str) -> Result:
    """``python ARGS`` (one process, no launcher) on cpu."""
    return _run([sys.executable, *map(str, args)], timeout, extra_env)
