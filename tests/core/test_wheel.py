"""A wheel built from the repo installs into a fresh venv and works (not only the editable install)."""

from __future__ import annotations

import json
import subprocess
import sys
import sysconfig
import zipfile
from pathlib import Path

import pytest

from tests.utils import REPO, child_env

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("dist")
    src = tmp_path_factory.mktemp("src") / "anydevice"
    # build from a clean copy of the tracked tree, so local build litter cannot leak into the wheel
    files = subprocess.run(["git", "ls-files", "-co", "--exclude-standard"], cwd=REPO, capture_output=True, text=True, check=True)
    for rel in files.stdout.splitlines():
        if (REPO / rel).is_file():
            (src / rel).parent.mkdir(parents=True, exist_ok=True)
            (src / rel).write_bytes((REPO / rel).read_bytes())
    subprocess.run(
        [sys.executable, "-m", "build", "--wheel", "--no-isolation", "--outdir", str(out), str(src)],
        check=True,
        capture_output=True,
        text=True,
    )
    (whl,) = out.glob("anydevice-*.whl")
    return whl


def test_wheel_maps_plugins_and_shims_under_the_anydevice_namespace(wheel: Path) -> None:
    names = zipfile.ZipFile(wheel).namelist()
    assert "anydevice/plugins/cpu.py" in names and "anydevice/shims/eager.py" in names
    assert "anydevice/compat_matrix/__init__.py" in names and "anydevice/py.typed" in names
    templates = {f"anydevice/compat_matrix/templates/{n}" for n in ("page.html.j2", "page.css", "page.js")}
    assert templates <= set(names)  # the matrix page's templates ship as package data
    assert "anydevice/cuda_compat/redirect.py" in names and "anydevice-cuda-compat.pth" in names
    assert "anydevice/compat_matrix/lanes/core-torch2.15.json" in names  # doctor's "tested here" ships with the package
    assert not [n for n in names if n.split("/")[0] in {"plugins", "shims", "compat_matrix", "tests", "examples"}]
    entry_points = next(n for n in names if n.endswith("entry_points.txt"))
    text = zipfile.ZipFile(wheel).read(entry_points).decode()
    assert "[anydevice]" in text and "cpu = anydevice.plugins.cpu" in text


def test_wheel_installs_into_a_fresh_venv_and_works(wheel: Path, tmp_path: Path) -> None:
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    py = venv / "bin" / "python"
    site = Path(
        subprocess.run(
            [str(py), "-c", "import sysconfig; print(sysconfig.get_path('purelib'))"], capture_output=True, text=True, check=True
        ).stdout.strip()
    )
    # dependencies (torch, pluggy, pydantic) come from the test venv, anydevice only from the wheel
    deps = tmp_path / "deps"
    deps.mkdir()
    for entry in Path(sysconfig.get_path("purelib")).iterdir():
        if not entry.name.lower().startswith(("anydevice", "__editable__", "_anydevice")):
            (deps / entry.name).symlink_to(entry)
    (site / "deps.pth").write_text(str(deps) + "\n")
    subprocess.run(
        [sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--target", str(site), str(wheel)],
        check=True,
        capture_output=True,
        text=True,
    )
    code = (
        "import json, anydevice as ad, torch\n"
        "m = ad.to(torch.nn.Linear(2, 2)); ad.step()\n"
        "print(json.dumps({'file': ad.__file__, 'backend': ad.backend().name, 'device': str(ad.device())}))"
    )
    env = child_env({"ANYDEVICE": "cpu"})
    env.pop("PYTHONPATH", None)
    proc = subprocess.run([str(py), "-c", code], capture_output=True, text=True, env=env, cwd=tmp_path, timeout=120)
    assert proc.returncode == 0, proc.stderr
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    assert result["file"].startswith(str(site)) and result["backend"] == "cpu" and result["device"] == "cpu"
    listing = subprocess.run(
        [str(py), "-m", "anydevice", "list", "--json"], capture_output=True, text=True, env=env, cwd=tmp_path
    )
    assert listing.returncode == 0, listing.stderr
    assert {"cpu", "cuda", "tpu", "neuron", "xla", "mps", "xpu"} <= {d["name"] for d in json.loads(listing.stdout)["devices"]}
    fixture = REPO / "tests" / "compat_matrix" / "fixtures" / "cpu-new.json"
    render = subprocess.run(
        [str(py), "-m", "anydevice", "matrix", "render", str(fixture), "--out", str(tmp_path / "page")],
        capture_output=True,
        text=True,
        env=env,
        cwd=tmp_path,
    )
    assert render.returncode == 0, render.stderr  # the page renders from the wheel's own templates
    assert 'id="summary-grid"' in (tmp_path / "page" / "index.html").read_text(encoding="utf-8")
    # the start-up hook came with the wheel: ANYDEVICE_CUDA_COMPAT=1 alone redirects an unmodified script
    assert (site / "anydevice-cuda-compat.pth").is_file()
    script = "import torch; print(torch.cuda.is_available(), torch.ones(1, device='cuda').device)"
    compat = subprocess.run(
        [str(py), "-c", script], capture_output=True, text=True, env={**env, "ANYDEVICE_CUDA_COMPAT": "1"}, cwd=tmp_path
    )
    assert compat.returncode == 0 and compat.stdout.split() == ["True", "cpu"], compat.stderr[-2000:]
