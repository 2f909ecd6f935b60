"""The version preflight against a real mismatching pair in a throwaway venv.

The venv is made for this module: torch 2.13.0 (CPU) installed from the local wheel in
/opt/wheels, layered over this lane's site-packages by a ``.pth`` file, so it sees torch 2.13
*and* this lane's real torch_xla 2.9.0 (plus anydevice, pluggy, ...). Nothing is simulated:
``import torch_xla`` there really dies with an undefined symbol, and anydevice must refuse
before that import with one error naming both versions and the pair to install.
"""

from __future__ import annotations

import glob
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest

from tests.utils import child_env

pytestmark = pytest.mark.xla
pytest.importorskip("torch_xla")

WHEELS = "/opt/wheels"
TORCH = "2.13.0"


@pytest.fixture(scope="module")
def mismatched(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The python of a venv with torch 2.13 over this lane's torch_xla 2.9."""
    if not glob.glob(f"{WHEELS}/torch-{TORCH}*.whl"):
        pytest.skip(f"no local torch {TORCH} wheel in {WHEELS} (a download would be ~200 MB)")
    venv = tmp_path_factory.mktemp("mismatch") / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    site = Path(
        subprocess.run(
            [str(venv / "bin" / "python"), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
            check=True,
            capture_output=True,
            text=True,
        ).stdout.strip()
    )
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "install",
            "-q",
            "--no-deps",
            "--no-index",
            "--find-links",
            WHEELS,
            "--target",
            str(site),
            f"torch=={TORCH}",
        ],
        check=True,
        capture_output=True,
        text=True,
        timeout=300,
    )
    lane = sysconfig.get_paths()["purelib"]  # this lane's site-packages: torch_xla 2.9.0, anydevice
    (site / "zz_lane.pth").write_text(f"import site; site.addsitedir({lane!r})\n")
    return venv / "bin" / "python"


def run(python: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = child_env({"ANYDEVICE": "xla", "ANYDEVICE_QUIET": "1"})
    env.pop("PJRT_DEVICE", None)
    return subprocess.run([str(python), *args], env=env, capture_output=True, text=True, timeout=180)


def test_the_pair_really_is_broken(mismatched: Path) -> None:
    versions = run(mismatched, "-c", "from importlib.metadata import version as v; print(v('torch'), v('torch_xla'))")
    torch_version, xla_version = versions.stdout.split()
    assert torch_version.startswith(TORCH) and xla_version == "2.9.0", versions.stderr
    crash = run(mismatched, "-c", "import torch, torch_xla")
    assert crash.returncode != 0 and "undefined symbol" in crash.stderr


def test_selecting_xla_names_both_versions_and_the_fix(mismatched: Path) -> None:
    done = run(mismatched, "-m", "anydevice", "info")
    out = done.stdout + done.stderr
    assert done.returncode != 0
    assert "torch_xla 2.9.0" in out and f"torch {TORCH}" in out and "pip install torch==2.9.* torch_xla==2.9.0" in out
    assert "undefined symbol" not in out and "Traceback" not in out


def test_the_factory_raises_before_importing_torch_xla(mismatched: Path) -> None:
    script = (
        "import sys\n"
        "from anydevice.errors import VersionMismatchError\n"
        "from anydevice.shims.lazy_xla import XlaVendor, xla_shims\n"
        "try:\n"
        "    xla_shims(XlaVendor(name='xla', pjrt_device='CPU'))\n"
        "except VersionMismatchError as e:\n"
        "    print(e.package, e.package_version, e.torch_version, 'torch_xla' in sys.modules)\n"
        "    print(e)\n"
    )
    done = run(mismatched, "-c", script)
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    package, package_version, torch_version, imported = lines[0].split()
    assert (package, package_version, imported) == ("torch_xla", "2.9.0", "False") and torch_version.startswith(TORCH)
    assert "needs torch 2.9.x but torch" in lines[1] and "pip install torch==2.9.*" in done.stdout
