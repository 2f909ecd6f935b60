"""The README's first command: a clean run of examples/train.py prints no warning before its JSON line."""

from __future__ import annotations

import json
import re

import tomllib

from tests.utils import REPO, TRAIN, python

WARNING = re.compile(r"\b\w*Warning\b|Failed to initialize NumPy")


def test_numpy_is_a_runtime_dependency() -> None:
    # torch prints "UserWarning: Failed to initialize NumPy" on every import when NumPy is missing.
    deps = tomllib.loads((REPO / "pyproject.toml").read_text(encoding="utf-8"))["project"]["dependencies"]
    assert any(re.match(r"numpy\b", d) for d in deps), deps


def test_main_job_prints_no_warning() -> None:
    proc = python("-W", "always", str(TRAIN), "--steps", "4", "--batch-size", "4", "--log-every", "2", timeout=600)
    assert proc.returncode == 0, proc.stderr
    warnings = [line for line in proc.stderr.splitlines() if WARNING.search(line)]
    assert warnings == [], "\n".join(warnings)
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    assert result["steps"] == 4 and result["backend"] == "cpu"
