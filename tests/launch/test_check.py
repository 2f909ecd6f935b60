"""``anydevice launch --check``: the step is checked for the target before a spec is written, and a step that will
not compile, fit or launch there writes no spec (``--force``: written, with the verdict in a comment)."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

from tests.utils import REPO, cli_in_process

CASES = REPO / "tests" / "check" / "scripts" / "cases.py"  # small models made to fail one check each
yaml = pytest.importorskip("yaml")


def _launch(case: str, *extra: str) -> tuple[int, str, str]:
    result = cli_in_process(
        "launch", str(CASES), case, "--steps", "2", "--target", "neuron:trn2-16", "--emit", "skypilot", "--check", *extra
    )
    return result.returncode, result.stdout, result.stderr


@pytest.mark.slow  # a real check: its CPU run of the script (~5 CPU-s, 20 s on the shared machine)
def test_a_step_that_will_not_compile_writes_no_spec(tmp_path: Path) -> None:
    out = tmp_path / "task.yaml"
    code, stdout, stderr = _launch("float64", "--out", str(out))
    assert code == 1
    assert not out.exists() and stdout == ""
    first, *rest = stderr.splitlines()
    assert first.startswith(f"anydevice: error: {CASES} will not compile on neuron, so no spec was written: float64")
    assert any(line.startswith("  fix: use float32 or bfloat16") for line in rest)
    assert "--force writes it anyway" in stderr


@pytest.mark.slow  # a real check: its CPU run of the script (~5 CPU-s, 20 s on the shared machine)
def test_force_writes_it_with_the_verdict_in_a_comment() -> None:
    code, stdout, stderr = _launch("float64", "--force")
    assert code == 0, stderr
    comments = [line for line in stdout.splitlines() if line.startswith("#")]
    assert any(line.startswith("# anydevice check --target neuron: WILL NOT COMPILE: float64") for line in comments)
    assert any(line.startswith("#   fix: use float32 or bfloat16") for line in comments)
    assert yaml.safe_load(stdout)["resources"]["accelerators"] == "Trainium2:16"


@pytest.mark.slow  # a real check: its CPU run of the script (~5 CPU-s, 20 s on the shared machine)
def test_a_step_that_runs_is_written_with_its_verdict() -> None:
    code, stdout, stderr = _launch("clean")
    assert code == 0, stderr
    assert "# anydevice check --target neuron: RUNS" in stdout


@pytest.mark.skipif(importlib.util.find_spec("jax") is not None, reason="this venv has the TPU compiler")
def test_a_tpu_slice_is_checked_by_default_and_says_when_it_cannot_be() -> None:
    """Without the tpu-check extra the compiled check cannot run: one error naming --no-check, no spec."""
    result = cli_in_process("launch", str(CASES), "clean", "--target", "tpu:v5e-16", "--emit", "jobset")
    assert result.returncode == 2 and result.stdout == ""
    assert result.stderr.startswith("anydevice: error: The check before the spec could not run: ")
    assert "pass --no-check to write the spec unchecked" in result.stderr
    unchecked = cli_in_process("launch", str(CASES), "clean", "--target", "tpu:v5e-16", "--emit", "jobset", "--no-check")
    assert unchecked.returncode == 0 and "# not checked (--no-check)" in unchecked.stdout
