"""Generated documentation stays current; every setting is documented."""

from __future__ import annotations

import subprocess
import sys

from anydevice import settings
from tests.utils import REPO


def test_readme_settings_table_is_current() -> None:
    proc = subprocess.run([sys.executable, str(REPO / "scripts" / "update-readme"), "--check"], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr


def test_every_setting_is_in_the_readme() -> None:
    readme = (REPO / "README.md").read_text()
    declared = (*settings.ALL, *settings.builtin_plugin_settings())
    assert {"PJRT_DEVICE", "CUDA_VISIBLE_DEVICES"} <= {s.name for s in declared}  # vendors' variables, from their plugins
    missing = [s.name for s in declared if f"`{s.name}`" not in readme]
    assert not missing


def test_readme_starts_with_the_two_commands() -> None:
    blocks = (REPO / "README.md").read_text().split("```")
    first = blocks[1]
    assert "examples/train.py" in first and "scripts/test" in first
    assert "exec scripts/test" in (REPO / ".ci" / "run").read_text()


def test_every_hook_and_shim_method_is_documented() -> None:
    import inspect

    from anydevice import hookspecs
    from anydevice.shims import contracts

    hooks = [f for name, f in vars(hookspecs).items() if name.startswith("anydevice_") and callable(f)]
    assert hooks and all(inspect.getdoc(f) for f in hooks)
    for proto in (contracts.Placement, contracts.Compilation, contracts.Collectives, contracts.Profiling):
        methods = [m for m, v in vars(proto).items() if callable(v) and not m.startswith("_")]
        undocumented = [m for m in methods if not inspect.getdoc(getattr(proto, m))]
        assert methods and not undocumented, (proto.__name__, undocumented)
