"""Run ``examples/rl.py`` as a user does (a subprocess) and read its last stdout line: the JSON result."""

from __future__ import annotations

import json
import subprocess
import sys
from typing import Any

from tests.utils import REPO, child_env

RL = REPO / "examples" / "rl.py"
RTOL = 1e-4
"""Losses across placements agree to about 1e-7 on this machine (float32, the same sampled tokens)."""


def run_rl(
    roles: str | None, *args: str, python: str = sys.executable, check: bool = True
) -> dict[str, Any] | subprocess.CompletedProcess[str]:
    env = child_env({"ANYDEVICE_QUIET": "1", **({"ANYDEVICE_ROLES": roles} if roles else {})})
    done = subprocess.run([python, str(RL), *args], capture_output=True, text=True, env=env, timeout=900, cwd=REPO)
    if not check:
        return done
    assert done.returncode == 0, done.stderr[-3000:]
    result: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


def assert_same_curves(a: dict[str, Any], b: dict[str, Any]) -> None:
    assert a["rewards"] == b["rewards"]  # the same sampled tokens: rewards are exact
    for x, y in zip(a["losses"], b["losses"], strict=True):
        assert abs(x - y) <= RTOL * max(abs(y), 1e-2), (a["losses"], b["losses"])
