"""Each fact about a device declared once; where a second declaration must stay (read without torch), the two agree.

``DeviceSpec.check`` and ``DeviceSpec.launch`` are read without loading the shims (check, capabilities, run), so
they restate what the shims do. ``anydevice.runtime.backend.disagreements`` compares them when any device is
loaded (built-in, third-party, or one a test registers) and loading refuses a device whose two declarations
disagree; the planted edits below change one side of the cpu plugin alone and show that this is caught.
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

import pytest

from anydevice.contract.device_spec import DeviceSpec
from anydevice.errors import PluginError
from anydevice.runtime.backend import disagreements, load_backend
from anydevice.runtime.registry import Registry, builtin_registry
from anydevice.runtime.selection import resolve

ROOT = Path(__file__).resolve().parents[2]


def _module(path: Path, name: str, text: str | None = None) -> ModuleType:
    """The module at ``path`` (or ``text`` written there), imported under ``name``."""
    if text is not None:
        path.write_text(text)
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


def _specs(module: ModuleType) -> list[DeviceSpec]:
    found: list[DeviceSpec] = []
    module.anydevice_register_devices(register=found.append)
    return found


def _loadable_here() -> list[DeviceSpec]:
    """Every built-in device whose shims load on this machine (cpu everywhere; xla in the xla lane), and the toy plugin."""
    registry = builtin_registry()
    specs = [registry.get(name).spec for name in registry.names() if registry.detect(name).available]
    toy = ROOT / "tests" / "plugins" / "anydevice_toydevice" / "anydevice_toydevice.py"
    return [*specs, *_specs(_module(toy, "anydevice_toydevice_declared_once"))]


def test_every_loadable_device_states_each_fact_the_same_way_twice() -> None:
    specs = _loadable_here()
    assert {"cpu", "toy"} <= {s.name for s in specs}
    for spec in specs:
        assert disagreements(spec, spec.load()) == [], spec.name


PLANTED = [
    ("dist_backend=DIST_BACKEND,", 'dist_backend="nccl",', "CheckFacts.dist_backend is 'nccl' but the collectives"),
    ("lacking_reduce_ops=frozenset(),", 'lacking_reduce_ops=frozenset({"AVG"}),', "CheckFacts.lacking_reduce_ops is ['AVG']"),
    ('compile_backends=("inductor",),', 'compile_backends=("openxla",),', "the compilation shim's backend is 'inductor'"),
    ("PlacementTable(host=True)", "PlacementTable(host=False)", "Launch(ranks='per_core') is for the host CPU"),
]


@pytest.mark.parametrize(("side", "edited", "problem"), PLANTED, ids=["dist_backend", "reduce_ops", "compile", "host"])
def test_editing_one_side_alone_is_caught(tmp_path: Path, side: str, edited: str, problem: str) -> None:
    source = (ROOT / "plugins" / "cpu.py").read_text()
    assert source.count(side) == 1, f"the planted edit no longer applies to plugins/cpu.py: {side}"
    name = f"planted_cpu_{abs(hash(side))}"
    module = _module(tmp_path / f"{name}.py", name, source.replace(side, edited))
    [spec] = _specs(module)
    [found] = disagreements(spec, spec.load())
    assert problem in found
    registry = Registry([("planted", module, None)])  # selected like any plugin: loading refuses it
    with pytest.raises(PluginError, match="declares a fact twice and the two disagree"):
        load_backend(resolve("cpu", registry), registry)


def test_tpu_slices_are_declared_once() -> None:
    from anydevice.plugins import tpu

    assert tpu.CHECK_FACTS.world_sizes == {f"TPU {g}": sizes for g, sizes in tpu.SLICE_SIZES.items()}
    catalogue = (ROOT / "shims" / "tpu_slices.py").read_text()
    assert catalogue.count("(1, 4, 8)") == 1  # v5e and v6e's one-host counts, once, in the chips catalogue
    assert "(1, 4, 8)" not in (ROOT / "plugins" / "tpu.py").read_text()


def test_lockstep_pairing_is_read_from_paired_packages() -> None:
    from anydevice.plugins import neuron, tpu

    xla_releases = {p: (r("2.1.2") if callable(r) else r) for p, r in neuron.PAIRED_PACKAGES.items()}
    assert set(neuron.xla_vendor().lockstep) == {p for p, r in xla_releases.items() if r == "lockstep"}
    assert tpu.xla_vendor().lockstep == tuple(p for p, r in tpu.PAIRED_PACKAGES.items() if r == "lockstep")
