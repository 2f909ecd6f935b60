"""Generated documentation stays current; every setting is documented."""

from __future__ import annotations

import re
import subprocess
import sys

import tomllib

from anydevice import settings
from tests.utils import REPO


def test_readme_settings_table_is_current() -> None:
    proc = subprocess.run([sys.executable, str(REPO / "scripts" / "update-readme"), "--check"], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr


def test_every_setting_is_in_the_readme() -> None:
    readme = (REPO / "README.md").read_text()
    from anydevice.runtime.registry import builtin_plugin_settings

    declared = (*settings.ALL, *builtin_plugin_settings())
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

    from anydevice.contract import hookspecs
    from anydevice.shims import contracts

    hooks = [f for name, f in vars(hookspecs).items() if name.startswith("anydevice_") and callable(f)]
    assert hooks and all(inspect.getdoc(f) for f in hooks)
    for proto in (contracts.Placement, contracts.Compilation, contracts.Collectives, contracts.Profiling):
        methods = [m for m, v in vars(proto).items() if callable(v) and not m.startswith("_")]
        undocumented = [m for m in methods if not inspect.getdoc(getattr(proto, m))]
        assert methods and not undocumented, (proto.__name__, undocumented)


def test_readme_names_every_lane_scripts_test_runs() -> None:
    from tests.core.test_lanes import lane_table

    lanes = list(lane_table())
    readme = (REPO / "README.md").read_text()
    named = re.search(r"`scripts/test` runs ruff, mypy and these lanes \(([a-z0-9., -]+)\)", readme)
    assert named is not None, "README: say which lanes scripts/test runs"
    assert named.group(1).split(", ") == lanes  # the list, in the table's order (no count in words to keep in step)
    for lane in lanes:  # each lane's venv has a row in the table
        assert re.search(rf"^\| {lane} \|", readme, re.M), lane


def test_readme_lists_every_runtime_dependency() -> None:
    deps = tomllib.loads((REPO / "pyproject.toml").read_text(encoding="utf-8"))["project"]["dependencies"]
    section = (REPO / "README.md").read_text().split("## Dependencies")[1].split("\n## ")[0]
    names = [re.match(r"[A-Za-z0-9_.-]+", d).group(0) for d in deps]  # type: ignore[union-attr]
    missing = [n for n in names if f"`{n}" not in section]
    assert not missing, f"README's Dependencies section does not name {missing}"
