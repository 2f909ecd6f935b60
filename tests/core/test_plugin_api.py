"""`anydevice.plugin`, the one door: what it serves, that it stays cheap, and the grouped EagerVendor tables."""

from __future__ import annotations

import pytest
import torch

import anydevice.plugin as plugin
from anydevice.errors import UnsupportedFeatureError
from tests.utils import python


def test_every_listed_name_is_served() -> None:
    missing = [name for name in plugin.__all__ if getattr(plugin, name, None) is None]
    assert not missing, missing


def test_importing_the_plugin_api_imports_no_torch() -> None:
    run = python("-c", "import sys, anydevice.plugin; print('torch' in sys.modules)")
    assert run.returncode == 0 and run.stdout.strip() == "False", run.stderr


def test_the_flat_keywords_of_0_3_are_an_error_naming_their_section() -> None:
    """Deprecated in 0.4 with a warning, removed in 0.5 as promised; the error says what to write."""
    with pytest.raises(
        TypeError,
        match=r"EagerVendor\(host=\.\.\.\) was removed in anydevice 0\.5: write placement=PlacementTable\(host=\.\.\.\)",
    ):
        plugin.EagerVendor("cpu", host=True)
    with pytest.raises(TypeError, match="sections by keyword"):
        plugin.EagerVendor("cpu", "inductor", "gloo")
    with pytest.raises(TypeError, match="unexpected keyword argument 'compile_backnd'"):
        plugin.EagerVendor("cpu", compile_backnd="inductor")


def test_inductor_is_declared_never_assumed(tmp_path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A device without inductor gets no inductor backend, cache variable or options; ad.compile says why."""
    bare = plugin.eager_shims(plugin.EagerVendor("cpu")).compilation
    assert bare.backend == "" and bare.cache_dir() is None and not bare.inductor
    with pytest.raises(UnsupportedFeatureError, match="declares no inductor and no backend"):
        bare.compile(torch.nn.Linear(2, 1))
    monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", str(tmp_path))
    with_inductor = plugin.eager_shims(plugin.EagerVendor("cpu", compile=plugin.CompileTable(inductor=True))).compilation
    assert with_inductor.backend == "inductor" and with_inductor.cache_dir() == tmp_path
    named = plugin.eager_shims(plugin.EagerVendor("cpu", compile=plugin.CompileTable(backend="eager"))).compilation
    model = torch.nn.Linear(2, 1)
    compiled = named.compile(model)
    x = torch.ones(3, 2)
    assert named.cache_dir() is None and torch.equal(compiled(x), model(x))


def test_host_and_pinned_memory_are_read_from_the_placement_table() -> None:
    host = plugin.eager_shims(plugin.EagerVendor("cpu", placement=plugin.PlacementTable(host=True))).placement
    assert host.host and not host.pinned_memory and host.device() == torch.device("cpu")
    other = plugin.eager_shims(plugin.EagerVendor("cpu")).placement
    assert not other.host and other.pinned_memory and other.device() == torch.device("cpu", 0)
