"""cuda-compat's promises, each shown on the case that broke it (real interpreters, the start-up hook alone).

One answer (eager = compiled = workers = children), compat on exactly when asked (never switched off
by ``find_spec``, never re-entered by anydevice's own imports or processes), host-device ranks,
clear refusals, and bad input to the start-up hook (a bad value, a hostile report path).
"""

from __future__ import annotations

import json
import os
import shutil
import sys
from pathlib import Path

import pytest

from tests.utils import REPO, python, run

pytestmark = pytest.mark.torch_version_sensitive  # docs/architecture.md, "Which tests the core lanes run"

ON = {"ANYDEVICE": "cpu", "ANYDEVICE_CUDA_COMPAT": "1"}


def lines(done: object) -> list[str]:
    return [line for line in getattr(done, "stdout", "").splitlines() if line.strip()]


def test_compiled_code_gets_the_answer_eager_code_gets(tmp_path: Path) -> None:
    script = tmp_path / "answers.py"
    script.write_text(
        "import torch\n"
        "def answers(x):\n"
        "    return x + torch.cuda.device_count() + (10 if torch.cuda.is_available() else 0) + torch.cuda.current_device()\n"
        "eager = answers(torch.zeros(1)).item()\n"
        "compiled = torch.compile(answers, backend='eager', fullgraph=True)(torch.zeros(1)).item()\n"
        "loader = torch.utils.data.DataLoader(range(2), num_workers=2, collate_fn=lambda b: torch.cuda.is_available())\n"
        "print(eager, compiled, list(loader))\n"
    )
    done = python(str(script), env=ON)
    assert done.returncode == 0, done.stderr[-3000:]
    assert lines(done)[-1] == "11.0 11.0 [True, True]"


def test_find_spec_before_import_torch_keeps_compat_on() -> None:
    done = python(
        "-c", "import importlib.util; importlib.util.find_spec('torch'); import torch; print(torch.cuda.is_available())", env=ON
    )
    assert done.returncode == 0 and lines(done)[-1] == "True", done.stderr[-3000:]
    assert "cuda-compat is active" in done.stderr


def test_anydevice_used_before_torch_is_not_reentrant() -> None:
    code = "import anydevice as ad; print(ad.device()); import torch; print(torch.cuda.is_available(), torch.ones(1, device='cuda').device)"  # noqa: E501
    done = python("-c", code, env=ON)
    assert done.returncode == 0, done.stderr[-3000:]
    assert lines(done)[-2:] == ["cpu", "True cpu"] and "broken" not in done.stderr


def test_anydevice_cli_under_any_name_is_exempt(tmp_path: Path) -> None:
    renamed = tmp_path / "my-devices"
    renamed.write_text(f"#!{sys.executable}\nimport sys\nfrom anydevice.cli import main\nsys.exit(main())\n")
    renamed.chmod(0o755)
    for args in ([str(renamed), "info", "--json"], [sys.executable, "-m", "anydevice", "info", "--json"]):
        done = run(args, env=ON)
        assert done.returncode == 0, done.stderr[-3000:]
        assert json.loads(done.stdout)["backend"]["name"] == "cpu"
        assert "cuda-compat is active" not in done.stderr and "Traceback" not in done.stderr


def test_third_party_detection_that_imports_torch_is_not_taken_for_a_hang(tmp_path_factory: pytest.TempPathFactory) -> None:
    site = install_plugin(tmp_path_factory)
    done = python("-m", "anydevice", "list", "--json", env={**ON, "ANYDEVICE_DETECT_TIMEOUT": "60"}, pythonpath=site)
    assert done.returncode == 0, done.stderr[-3000:]
    rows = {row["name"]: row for row in json.loads(done.stdout)["devices"]}
    assert rows["torchdetect"]["available"] is True, rows["torchdetect"]


def install_plugin(factory: pytest.TempPathFactory) -> Path:
    import subprocess

    target, build = factory.mktemp("torchdetect-site"), factory.mktemp("torchdetect-build")
    shutil.copytree(Path(__file__).parent / "plugins" / "anydevice_torchdetect", build / "pkg")
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "install",
            "-q",
            "--no-deps",
            "--no-build-isolation",
            "--target",
            str(target),
            str(build / "pkg"),
        ],
        check=True,
        capture_output=True,
    )
    return target


@pytest.mark.slow
def test_device_count_is_the_local_ranks_under_anydevice_run(tmp_path: Path) -> None:
    script = tmp_path / "ranks.py"
    script.write_text(
        "import os, torch\n"
        "rank = int(os.environ['LOCAL_RANK'])\n"
        "if torch.cuda.device_count() < 2:\n"
        "    raise SystemExit('Unable to locate sufficient 2 gpus')\n"
        "where = torch.zeros(1, device=f'cuda:{rank}').device\n"
        "print('RANK', rank, torch.cuda.device_count(), torch.cuda.current_device(), where)\n"
    )
    done = run(
        [sys.executable, "-m", "anydevice", "run", "-n", "2", "--cuda-compat", str(script)], env={"ANYDEVICE": "cpu"}, timeout=300
    )
    assert done.returncode == 0, done.stderr[-3000:]
    rows = sorted(line for line in lines(done) if line.startswith("RANK"))
    assert rows == ["RANK 0 2 0 cpu", "RANK 1 2 1 cpu"], done.stdout


@pytest.mark.parametrize("kind", ["symlink", "directory", "missing-parent"])
def test_a_hostile_report_path_is_refused_and_the_exit_status_kept(tmp_path: Path, kind: str) -> None:
    victim = tmp_path / "victim.txt"
    victim.write_text("keep me\n")
    path = tmp_path / "report.json"
    if kind == "symlink":
        path.symlink_to(victim)
    elif kind == "directory":
        path.mkdir()
    else:
        path = victim / "report.json"  # its parent is a file
    done = python(
        "-c", "import torch; torch.zeros(1).cuda(); raise SystemExit(3)", env={**ON, "ANYDEVICE_CUDA_COMPAT_REPORT": str(path)}
    )
    assert done.returncode == 3, done.stderr
    assert victim.read_text() == "keep me\n" and "Traceback" not in done.stderr
    refused = [line for line in done.stderr.splitlines() if "report not written" in line]
    assert len(refused) == 1 and str(path) in refused[0], done.stderr
    assert not [p for p in tmp_path.rglob(".report.json.*")], "a temporary was left behind"


def test_the_report_replaces_an_old_report_but_not_another_file(tmp_path: Path) -> None:
    path, other = tmp_path / "report.json", tmp_path / "notes.json"
    path.write_text('{"device": "cpu", "calls": []}')
    other.write_text('{"mine": true}')
    for target in (path, other):
        done = python("-c", "import torch; torch.zeros(1).cuda()", env={**ON, "ANYDEVICE_CUDA_COMPAT_REPORT": str(target)})
        assert done.returncode == 0, done.stderr
    calls = {row["call"] for row in json.loads(path.read_text())["calls"]}
    assert "Tensor.cuda()" in calls and not path.is_symlink()
    assert other.read_text() == '{"mine": true}' and "report not written" in done.stderr


def test_off_costs_no_import(tmp_path: Path) -> None:
    for value in ("", "0"):
        done = python(
            "-c",
            "import sys; print(sorted(m for m in sys.modules if m.startswith(('anydevice', 'torch'))))",
            env={"ANYDEVICE_CUDA_COMPAT": value},
        )
        assert done.returncode == 0 and lines(done)[-1] == "[]", (value, done.stdout, done.stderr)
    assert os.path.exists(REPO / "anydevice" / "anydevice-cuda-compat.pth")


ACCELERATE = """
import torch
from accelerate import Accelerator

accelerator = Accelerator()
model = torch.nn.Linear(4, 2)
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
model, optimizer = accelerator.prepare(model, optimizer)
x = torch.randn(8, 4, generator=torch.Generator().manual_seed(0)).to(accelerator.device)
loss = model(x).pow(2).mean()
accelerator.backward(loss)
optimizer.step()
print("DEVICE", accelerator.device.type, next(model.parameters()).device.type)
"""


def test_accelerate_picks_the_selected_device_under_cuda_compat(tmp_path: Path) -> None:
    pytest.importorskip("accelerate")
    script = tmp_path / "accelerate_script.py"
    script.write_text(ACCELERATE)
    done = run([sys.executable, "-m", "anydevice", "run", "--cuda-compat", str(script)], env={"ANYDEVICE": "cpu"}, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "DEVICE cpu cpu" in done.stdout


def test_custom_cuda_extensions_are_refused_at_the_call() -> None:
    code = (
        "import torch\n"
        "from torch.utils.cpp_extension import load_inline\n"
        "load_inline('kernels', cpp_sources='', cuda_sources='__global__ void k() {}')\n"
    )
    done = python("-c", code, env=ON)
    assert done.returncode == 1
    assert "load_inline(cuda_sources=...) is not available on cpu: CUDA kernels are compiled for NVIDIA GPUs only" in done.stderr
