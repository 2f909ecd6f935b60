"""Issue 11, "Cache": an unwritable compile cache falls back to a temporary one, with one warning, and ``ad.compile`` works."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tests.utils import python

# Compiles twice (two cache lookups) and checks the compiled result against eager. One matrix product: inductor
# calls an extern kernel and writes its graph cache and wrapper code into the cache directory without building
# C++ (a fused kernel's gcc build cost 10 s here and proves nothing more about where the cache goes).
COMPILE = """
import torch, anydevice as ad
torch.manual_seed(0)
model = torch.nn.Linear(8, 2, bias=False)
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


# -- issue 18: third-party detection runs in a child process once, then comes from the cache ----------------
def test_third_party_detection_is_cached_until_a_variable_it_reads_changes(noisy_site: Path, tmp_path: Path) -> None:
    import json

    from tests.utils import anydevice_cli

    runs = tmp_path / "detections"
    env = {"ANYDEVICE_CACHE_DIR": str(tmp_path / "cache"), "CHATTY_DETECTIONS": str(runs), "ANYDEVICE_DETECT_TIMEOUT": "30"}
    first = anydevice_cli("list", "--json", env=env, pythonpath=noisy_site)
    assert first.returncode == 0, first.stderr
    [child] = runs.read_text().split()  # detected once, in a child process, never in the CLI's own
    assert int(child) > 0
    cached = list((tmp_path / "cache" / "plugins").glob("vet-*.json"))
    assert len(cached) == 1
    entry = json.loads(cached[0].read_text())
    assert "chatty" in entry["plugins"] and entry["expires"] is None  # no deadline was hit: kept
    again = anydevice_cli("list", "--json", env=env, pythonpath=noisy_site)
    assert again.stdout == first.stdout
    assert len(runs.read_text().split()) == 1  # the second command started no child: the cache answered
    cached[0].write_text(json.dumps({**entry, "expires": 0}))  # as if a deadline had been hit long ago
    anydevice_cli("list", "--json", env=env, pythonpath=noisy_site)
    assert len(runs.read_text().split()) == 2  # an expired outcome is detected again
    changed = anydevice_cli("list", "--json", env={**env, "CHATTY_MODE": "fast"}, pythonpath=noisy_site)
    assert changed.returncode == 0, changed.stderr
    assert len(runs.read_text().split()) == 3  # a variable the device declares changed: detected again


def test_an_outcome_with_a_deadline_hit_expires(hostile_site: Path, tmp_path: Path) -> None:
    import json
    import time

    from tests.utils import anydevice_cli

    env = {"ANYDEVICE_CACHE_DIR": str(tmp_path / "cache"), "ANYDEVICE_DETECT_TIMEOUT": "1"}
    proc = anydevice_cli("list", "--json", env=env, pythonpath=hostile_site)
    assert proc.returncode == 0, proc.stderr
    [cached] = (tmp_path / "cache" / "plugins").glob("vet-*.json")
    expires = json.loads(cached.read_text())["expires"]
    assert 0 < expires - time.time() <= 600  # 'hang' hit the deadline: retried within ten minutes, not cached for good


def test_an_unusable_cache_directory_only_costs_the_cache(noisy_site: Path, tmp_path: Path) -> None:
    from tests.utils import anydevice_cli

    runs = tmp_path / "detections"
    env = {"ANYDEVICE_CACHE_DIR": str(_blocked(tmp_path)), "CHATTY_DETECTIONS": str(runs), "ANYDEVICE_DETECT_TIMEOUT": "30"}
    for expected in (1, 2):
        proc = anydevice_cli("list", "--json", env=env, pythonpath=noisy_site)
        assert proc.returncode == 0, proc.stderr
        assert len(runs.read_text().split()) == expected
