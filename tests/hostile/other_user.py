"""Acting as a second user: a shared sticky directory like /tmp, and commands run there as uid 65534."""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

OTHER = 65534
"""The second user (``nobody``)."""

needs_root = pytest.mark.skipif(
    os.geteuid() != 0 or shutil.which("setpriv") is None,
    reason="acting as a second user (uid 65534) needs root and setpriv; as a plain user there is no other uid to become",
)


def as_other(*command: str) -> None:
    """Run ``command`` (coreutils: ``ln``, ``sh -c``, ``mkfifo``) as uid/gid 65534 with no supplementary groups."""
    subprocess.run(
        ["setpriv", f"--reuid={OTHER}", f"--regid={OTHER}", "--clear-groups", *command],
        check=True,
        capture_output=True,
        timeout=60,
        cwd="/",
    )


def make_shared() -> Iterator[Path]:
    """A fresh sticky, world-writable directory directly under /tmp (reachable by the second user, unlike tmp_path)."""
    path = Path(tempfile.mkdtemp(prefix="anydevice-shared-", dir="/tmp"))
    path.chmod(0o1777)
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)
