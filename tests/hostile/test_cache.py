"""Issue 11, "Cache": an unwritable compile cache falls back to a temporary one, with one warning, and ``ad.compile`` works."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tests.utils import python

# Compiles twice (two cache lookups) and checks the compiled result against eager.
COMPILE = """
import torch, anydevice as ad
torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.ReLU(), torch.nn.Linear(8, 2))
x = torch.randn(4, 8)
for _ in range(2):
    out = ad.compile(model)(x)
torch.testing.assert_close(out, model(x))
print(ad.backend().shims.compilation.cache_dir())
"""

# torch's inductor writes its default into TORCHINDUCTOR_CACHE_DIR of the process that compiled first
# (the test runner, when an earlier test compiled): the child must not inherit that choice.
NO_INHERITED_CACHE = {"TORCHINDUCTOR_CACHE_DIR": ""}


def _blocked(tmp_path: Path) -> Path:
    """A path no one can create: its parent is a regular file (permission bits do not stop root; this does)."""
    blocker = tmp_path / "blocker"
    blocker.write_text("not a directory")
    return blocker / "dir"


def _check(proc_stdout: str, proc_stderr: str, returncode: int, tmp: Path, unwritable: str) -> None:
    assert returncode == 0, proc_stderr
    fallback = Path(proc_stdout.strip().splitlines()[-1])
    assert fallback == tmp / f"anydevice-cache-{os.getuid()}" / "inductor"
    assert any(fallback.iterdir())  # the compiled graph really was cached there
    warnings = [line for line in proc_stderr.splitlines() if "RuntimeWarning" in line]
    assert len(warnings) == 1, proc_stderr
    prefix = f"RuntimeWarning: anydevice: the compile cache directory {unwritable} is not writable (NotADirectoryError: "
    suffix = (
        f"); caching in {tmp / f'anydevice-cache-{os.getuid()}'} instead: point ANYDEVICE_CACHE_DIR at a writable "
        "directory to keep it"
    )
    assert prefix in warnings[0] and warnings[0].endswith(suffix), warnings[0]
    assert "Traceback" not in proc_stderr


@pytest.mark.slow
def test_an_unwritable_cache_dir_falls_back_with_one_warning(tmp_path: Path) -> None:
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    cache = _blocked(tmp_path)
    proc = python(
        "-c", COMPILE, env={**NO_INHERITED_CACHE, "ANYDEVICE": "cpu", "ANYDEVICE_CACHE_DIR": str(cache), "TMPDIR": str(tmp)}
    )
    _check(proc.stdout, proc.stderr, proc.returncode, tmp, str(cache))


@pytest.mark.slow
def test_a_read_only_home_falls_back_with_one_warning(tmp_path: Path) -> None:
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    home = _blocked(tmp_path)
    proc = python("-c", COMPILE, env={**NO_INHERITED_CACHE, "ANYDEVICE": "cpu", "HOME": str(home), "TMPDIR": str(tmp)})
    _check(proc.stdout, proc.stderr, proc.returncode, tmp, "~/.cache/anydevice")
