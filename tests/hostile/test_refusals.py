"""Issue 35: an anydevice refusal that ends the user's program prints as one clear error, not a traceback.

Real programs in subprocesses: ``python script.py`` under cuda-compat, ``anydevice run`` ranks (with and without
cuda-compat), and ``anydevice run -n 2`` (torch elastic). The xla twin (Hogwild's ``model.share_memory()``) is in
tests/xla/test_cuda_compat_xla.py.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.utils import anydevice_cli, python

POOL = "import torch\n\n\ndef main():\n    torch.cuda.graph_pool_handle()\n\n\nmain()\n"
POOL_ERROR = [
    "anydevice: error: torch.cuda.graph_pool_handle() is not available on cpu: it is CUDA-only and has no equivalent there.",
    "Guard the call (or remove it); cuda-compat maps only what the device can answer.",
]
COMPAT = {"ANYDEVICE": "cpu", "ANYDEVICE_CUDA_COMPAT": "1", "ANYDEVICE_QUIET": "1"}


def error_lines(stderr: str) -> list[str]:
    """The lines from anydevice's error line to its location line."""
    lines = stderr.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("anydevice: error:"))
    return lines[start : start + 3]


@pytest.mark.parametrize("launcher", ["python", "anydevice run"])
def test_a_cuda_compat_refusal_ends_the_script_as_one_error_naming_its_line(launcher: str, tmp_path: Path) -> None:
    script = tmp_path / "pool.py"
    script.write_text(POOL)
    args = [str(script)] if launcher == "python" else ["-m", "anydevice", "run", str(script)]
    proc = python(*args, env=COMPAT, timeout=300)
    assert proc.returncode == 1, proc.stderr
    assert "Traceback" not in proc.stderr, proc.stderr
    assert error_lines(proc.stderr) == [*POOL_ERROR, f"(raised at {script}:5; ANYDEVICE_DEBUG=1 shows the traceback)"]


def test_a_bad_selection_in_a_rank_of_anydevice_run_is_one_error(tmp_path: Path) -> None:
    script = tmp_path / "choose.py"
    script.write_text("import anydevice as ad\nad.use(123)\n")
    proc = anydevice_cli("run", str(script), env={"ANYDEVICE": "cpu"}, timeout=300)
    assert proc.returncode == 1, proc.stderr
    assert "Traceback" not in proc.stderr
    assert error_lines(proc.stderr) == [
        "anydevice: error: A device selection must be a string such as 'cpu', 'cuda:1' or 'auto', not int (123).",
        "Pass the device name as a string, e.g. ad.use('cpu').",
        f"(raised at {script}:2; ANYDEVICE_DEBUG=1 shows the traceback)",
    ]
    assert proc.stderr.splitlines()[-1] == "anydevice run: rank 0 failed (exit code 1); the run was stopped."


def test_a_refusal_in_ranks_under_torch_elastic_is_one_error_in_their_output_and_in_the_summary(tmp_path: Path) -> None:
    script = tmp_path / "choose.py"
    script.write_text("import anydevice as ad\nad.use(123)\n")
    proc = anydevice_cli("run", "-n", "2", str(script), env={"ANYDEVICE": "cpu"}, timeout=300)
    assert proc.returncode == 1, proc.stderr
    assert "Traceback" not in proc.stderr and 'File "' not in proc.stderr, proc.stderr
    said = f"(raised at {script}:2; ANYDEVICE_DEBUG=1 shows the traceback)"
    assert said in proc.stderr.splitlines()  # each rank's own line
    assert f"  {said}" in proc.stderr.splitlines()  # torch elastic's summary, indented, in place of a traceback
    assert proc.stderr.splitlines()[-1].startswith("anydevice run: rank ")


def test_debug_shows_the_traceback_and_other_errors_keep_theirs(tmp_path: Path) -> None:
    script = tmp_path / "pool.py"
    script.write_text(POOL)
    debug = python(str(script), env={**COMPAT, "ANYDEVICE_DEBUG": "1"}, timeout=300)
    assert debug.returncode == 1
    assert "Traceback" in debug.stderr and "UnsupportedDeviceFunctionError: torch.cuda.graph_pool_handle()" in debug.stderr
    other = tmp_path / "other.py"
    other.write_text("import torch\ntorch.cuda.synchronize()\nraise ValueError('the script s own bug')\n")
    for args in ([str(other)], ["-m", "anydevice", "run", str(other)]):
        proc = python(*args, env=COMPAT, timeout=300)
        assert proc.returncode == 1, proc.stderr
        assert "Traceback" in proc.stderr and "ValueError: the script s own bug" in proc.stderr, args
        assert "anydevice: error:" not in proc.stderr


def test_python_without_anydevice_in_charge_keeps_pythons_report(tmp_path: Path) -> None:
    # a plain `python script.py` that imports anydevice as a library: its hook is not installed
    script = tmp_path / "choose.py"
    script.write_text("import anydevice as ad\nad.use(123)\n")
    proc = python(str(script), timeout=300)
    assert proc.returncode == 1 and "Traceback" in proc.stderr and "SelectionTypeError" in proc.stderr


def test_disabling_cuda_compat_gives_python_its_hook_back() -> None:
    code = (
        "import sys, torch, anydevice.cuda_compat as compat\n"
        "before = sys.excepthook\n"
        "compat.enable()\n"
        "installed = sys.excepthook is not before\n"
        "compat.disable()\n"
        "print(installed, sys.excepthook is before)\n"
    )
    proc = python("-c", code, env={"ANYDEVICE": "cpu", "ANYDEVICE_QUIET": "1"}, timeout=300)
    assert proc.stdout == "True True\n", proc.stderr
