"""ad.export and `anydevice export` without litert-torch (the main lane): clear errors, nothing written, cheap import."""

from __future__ import annotations

import importlib.util
import json
import os
import stat
from pathlib import Path

import pytest
import torch

import anydevice as ad
from anydevice.errors import ExportError
from tests.export.conftest import entries
from tests.utils import anydevice_cli, python

LITERT_INSTALLED = importlib.util.find_spec("litert_torch") is not None


@pytest.mark.skipif(LITERT_INSTALLED, reason="litert-torch is installed here: this checks the error where it is not")
def test_without_litert_torch_the_error_says_how_to_install_it(tmp_path: Path) -> None:
    with pytest.raises(ExportError) as caught:
        ad.export(torch.nn.Linear(4, 4), torch.randn(2, 4), target="litert", path=tmp_path / "m.tflite")
    assert str(caught.value).startswith("litert-torch is not installed; pip install litert-torch==0.10.0 ai-edge-litert==2.3.0")
    assert entries(tmp_path) == []


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"target": "onnx"}, "Unknown export target 'onnx'"),
        ({"quantize": "int3"}, "Unknown quantize='int3' for target 'litert'"),
        ({"example_inputs": ()}, "ad.export needs example inputs: got none"),
        ({"example_inputs": ([1, 2],)}, "Example input 0 is a list, not a tensor"),
        ({"model": lambda x: x}, "ad.export needs a torch.nn.Module, got function"),
    ],
)
def test_bad_input_is_one_clear_error_before_any_work(tmp_path: Path, kwargs: dict[str, object], message: str) -> None:
    call: dict[str, object] = {"model": torch.nn.Linear(4, 4), "example_inputs": torch.randn(2, 4), "path": tmp_path / "m.tflite"}
    call.update(kwargs)
    with pytest.raises(ExportError, match=message.replace("(", r"\(")):
        ad.export(**call)  # type: ignore[arg-type]
    assert entries(tmp_path) == []


def test_a_directory_or_another_file_at_the_path_is_refused_and_left_alone(tmp_path: Path) -> None:
    notes = tmp_path / "notes.txt"
    notes.write_text("mine")
    with pytest.raises(ExportError, match="it is a directory"):
        ad.export(torch.nn.Linear(4, 4), torch.randn(2, 4), path=tmp_path)
    with pytest.raises(ExportError, match="a file that is not a LiteRT model is there"):
        ad.export(torch.nn.Linear(4, 4), torch.randn(2, 4), path=notes)
    assert notes.read_text() == "mine"


def test_import_anydevice_imports_nothing_of_litert() -> None:
    code = "import json, sys\nimport anydevice as ad\nad.export\nprint(json.dumps(sorted(sys.modules)))"
    proc = python("-c", code)
    assert proc.returncode == 0, proc.stderr
    loaded = {name.split(".")[0] for name in json.loads(proc.stdout.strip().splitlines()[-1])}
    assert not {"litert_torch", "ai_edge_litert", "torch", "jax"} & loaded


def test_cli_errors_are_one_message_and_exit_2(tmp_path: Path) -> None:
    checkpoint = tmp_path / "step-1.pt"
    torch.save({"model": {}}, checkpoint)
    no_hook = tmp_path / "nohook.py"
    no_hook.write_text("x = 1\n")
    cases = [
        ([str(tmp_path / "missing.pt")], "no such file"),
        ([str(checkpoint)], "is a checkpoint: anydevice export needs the script that builds its model"),
        ([str(checkpoint), "--script", str(no_hook)], "defines no anydevice_export()"),
        ([str(tmp_path)], "it is a directory"),
    ]
    for args, message in cases:
        proc = anydevice_cli("export", *args, "--out", str(tmp_path / "m.tflite"))
        assert proc.returncode == 2 and message in proc.stderr and "Traceback" not in proc.stderr, (args, proc.stderr)
    assert not (tmp_path / "m.tflite").exists()


class _ValueBranch(torch.nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if x.sum() > 0:  # BRANCH: Python control flow on a tensor's value
            return x * 2
        return x


def test_what_torch_export_refuses_is_the_finding_check_reports() -> None:
    from anydevice.edge.diagnose import conversion_error, source_files
    from anydevice.preflight.text import finding_line

    model = _ValueBranch()
    with pytest.raises(Exception) as caught:  # torch.export itself, the converter's first step (no litert-torch needed)
        torch.export.export(model, (torch.randn(4, 4),))
    error = conversion_error(caught.value, source_files([model]), "litert")
    line = next(n for n, text in enumerate(Path(__file__).read_text().splitlines(), 1) if "# BRANCH:" in text)
    assert error.finding is not None
    assert (error.finding.check, error.finding.severity, error.finding.line) == ("capture", "error", f"{__file__}:{line}")
    assert error.construct == "a data-dependent branch (Python control flow on a tensor's value)" == error.finding.message
    where = f"{__file__}:{line}"
    assert str(error).startswith(f"Cannot export the model to litert: {error.construct} at {where}. Nothing was written.")
    assert finding_line(error.finding) == f"  error   capture     {error.construct}  ({__file__}:{line})"


def test_a_fifo_or_a_pipe_as_the_destination_is_refused_without_opening_it(tmp_path: Path) -> None:
    # issue 35: the destination's first bytes were read before its type was known: a FIFO (or /dev/stdout
    # on a pipe) blocked forever waiting for a writer.
    fifo = tmp_path / "model.tflite"
    os.mkfifo(fifo)
    code = "import sys, torch, anydevice as ad\nad.export(torch.nn.Linear(4, 4), torch.randn(2, 4), path=sys.argv[1])"
    proc = python("-c", code, str(fifo), timeout=120)
    assert proc.returncode == 1 and "Traceback" in proc.stderr  # an uncaught ExportError, raised at once
    assert f"ExportError: Cannot export to {fifo}: it is a FIFO (named pipe), not a regular file" in proc.stderr
    checkpoint = tmp_path / "step-1.pt"
    torch.save({"model": {}}, checkpoint)
    for out in (str(fifo), "/dev/stdout"):  # the test's capture makes stdout a pipe
        proc = anydevice_cli("export", str(checkpoint), "--out", out, timeout=120)
        assert proc.returncode == 2 and "Traceback" not in proc.stderr, proc.stderr
        link = "a symbolic link to /proc/self/fd/1, " if out == "/dev/stdout" else ""
        assert f"Cannot export to {out}: it is {link}a FIFO (named pipe), not a regular file" in proc.stderr
    assert stat.S_ISFIFO(fifo.stat().st_mode)


def test_a_link_to_dev_zero_as_the_destination_is_refused_naming_the_link(tmp_path: Path) -> None:
    # issue 46: `--out` a link to /dev/zero said only "a character device", not that the path is a link
    out = tmp_path / "model.tflite"
    out.symlink_to("/dev/zero")
    checkpoint = tmp_path / "step-1.pt"
    torch.save({"model": {}}, checkpoint)
    proc = anydevice_cli("export", str(checkpoint), "--out", str(out), timeout=120)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr, proc.stderr
    assert proc.stderr.splitlines()[0] == (
        f"anydevice: error: Cannot export to {out}: it is a symbolic link to /dev/zero, a character device, not a regular "
        "file; it was left as it was."
    )
    assert os.readlink(out) == "/dev/zero"
