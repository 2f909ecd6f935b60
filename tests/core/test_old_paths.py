"""0.3's import paths keep working for one release: the same module object, with a DeprecationWarning."""

from __future__ import annotations

import importlib
import os
import subprocess
import sys

import pytest

from anydevice import old_paths
from anydevice.old_paths import MOVED


@pytest.mark.parametrize("old", sorted(MOVED))
def test_an_old_path_warns_and_serves_the_new_module(old: str) -> None:
    sys.modules.pop(old, None)
    targets = MOVED[old]
    with pytest.warns(DeprecationWarning, match=rf"{old} moved to {targets[0]}"):
        module = importlib.import_module(old)
    if len(targets) == 1 and not isinstance(module, old_paths._Joined):
        new = importlib.import_module(targets[0])
        assert module is new
        assert new.__spec__ is not None and new.__spec__.name == targets[0]  # the new module's spec is left as it was


def test_names_of_a_split_module_come_from_where_they_live_now() -> None:
    sys.modules.pop("anydevice.device_module", None)
    with pytest.warns(DeprecationWarning):
        from anydevice.device_module import SURFACE, device_module  # type: ignore[attr-defined]
    import anydevice as ad
    from anydevice.shims import cuda_shaped

    assert SURFACE is cuda_shaped.SURFACE
    # Python binds ``anydevice.device_module`` to the imported module; it still works as the function it hides
    assert device_module is ad.api.device_module
    assert ad.device_module() is device_module()
    with pytest.raises(ImportError):
        from anydevice.device_module import no_such_name  # type: ignore[attr-defined]  # noqa: F401


def test_from_package_import_old_name_works_in_a_fresh_process() -> None:
    """What a 0.3 user wrote, run as they would run it: the warning names the new path, the code works."""
    code = (
        "import warnings; warnings.simplefilter('always')\n"
        "from anydevice import registry, slurm_env\n"
        "import anydevice.runtime.registry as new\n"
        "assert registry is new and slurm_env.__name__ == 'anydevice.distributed.slurm'\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert "anydevice.registry moved to anydevice.runtime.registry" in done.stderr
    assert "anydevice.slurm_env moved to anydevice.distributed.slurm" in done.stderr


def test_unknown_names_are_not_served() -> None:
    with pytest.raises(ModuleNotFoundError):
        importlib.import_module("anydevice.no_such_module")


def test_an_old_module_named_like_a_function_does_not_take_the_function_away() -> None:
    """``import anydevice.backend`` (0.3) binds ``anydevice.backend`` to the module; ``ad.backend()`` keeps working."""
    code = (
        "import warnings; warnings.simplefilter('ignore')\n"
        "import anydevice as ad\n"
        "from anydevice.backend import select, Backend\n"
        "import anydevice.runtime.backend as new\n"
        "assert select is new.select and Backend is new.Backend\n"
        "assert isinstance(ad.backend(), new.Backend)\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120, env={**os.environ, "ANYDEVICE": "cpu"}
    )
    assert done.returncode == 0, done.stderr
