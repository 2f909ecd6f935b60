"""``anydevice.integrations.torchtitan`` is importable anywhere and imports neither torch nor torchtitan."""

from __future__ import annotations

import subprocess
import sys


def test_importing_the_integration_imports_neither_torch_nor_torchtitan() -> None:
    code = (
        "import sys, anydevice.integrations.torchtitan as t; "
        "print(sorted(m for m in sys.modules if m.split('.')[0] in ('torch', 'torchtitan'))); print(callable(t.patch))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=120)
    assert out.stdout.split("\n")[:2] == ["[]", "True"]
