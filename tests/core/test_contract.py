"""The plugin contract's declarations: subsystem facts asked for where they are used, in the registry they belong to."""

from __future__ import annotations

import pytest

from anydevice.contract.device_spec import DeviceSpec, Hardware, Launch
from anydevice.plugins import cpu, cuda, tpu, xla
from anydevice.runtime.registry import Registry

pytestmark = pytest.mark.torch_version_sensitive  # docs/architecture.md, "Which tests the core lanes run"


def registry_of(*modules: object) -> Registry:
    return Registry(plugins=[(m.__name__.rsplit(".", 1)[-1], m, "anydevice") for m in modules], timeout=30)


def test_xla_finds_the_hardware_behind_pjrt_device_in_its_own_registry_only() -> None:
    """An explicit registry without cuda knows no CUDA hardware, even though the process-wide one has cuda."""
    registry = registry_of(cpu, tpu, xla)
    assert xla.owner("TPU", registry) == ("tpu", registry.get("tpu").spec.hardware)
    assert xla.owner("CUDA", registry) is None
    assert xla.hardware_present("CUDA", registry) == (True, "CUDA hardware not checked (no installed plugin scans for it)")
    with_cuda = registry_of(cpu, cuda, xla)
    present, seen = xla.hardware_present("CUDA", with_cuda)
    assert present == bool(cuda.gpu_nodes()) and "CUDA" in seen


def test_the_xla_ray_resource_is_the_owning_devices(monkeypatch: pytest.MonkeyPatch) -> None:
    registry = registry_of(cpu, tpu, xla)
    monkeypatch.setenv("PJRT_DEVICE", "TPU")
    assert xla.ray_resource(registry) == "TPU"
    monkeypatch.setenv("PJRT_DEVICE", "CUDA")
    assert xla.ray_resource(registry) is None  # no cuda plugin in this registry


def test_devicespec_needs_only_identity_detection_and_loading() -> None:
    """Three required fields; subsystem facts live in sections (Hardware) and settings, with defaults."""
    spec = DeviceSpec(name="x", detect=cpu.detect, load=cpu.load)
    assert spec.hardware is None and spec.settings == () and spec.environment == ()
    assert not hasattr(spec, "description") and not hasattr(spec, "processes_per_core")
    assert Hardware().pjrt_names == () and Hardware().scan is None and not hasattr(Hardware(), "host")
    assert spec.launch == Launch() and Launch().launcher_name() == "torchrun" and Launch().ranks == "per_device"


def test_vendor_variables_are_declared_by_their_plugins() -> None:
    """What doctor judges comes from the plugin; core's settings name none of them."""
    from anydevice import settings

    assert cuda.CUDA_VISIBLE_DEVICES.name in registry_of(cuda).get("cuda").spec.environment
    assert "PJRT_DEVICE" in registry_of(xla).get("xla").spec.environment
    assert not hasattr(settings, "PJRT_DEVICE") and not hasattr(settings, "CUDA_VISIBLE_DEVICES")
    from anydevice.runtime.registry import builtin_plugin_settings

    table = settings.markdown_table(builtin_plugin_settings())
    assert table.count("`PJRT_DEVICE`") == 1  # declared by xla, tpu and neuron: listed once


def test_the_required_members_are_the_ones_docs_architecture_lists() -> None:
    """Without a default: DeviceSpec's name, detect and load, and the device type the shims are built with."""
    import dataclasses
    import inspect

    from anydevice.shims import contracts
    from tests.utils import REPO

    required = [
        f.name
        for f in dataclasses.fields(DeviceSpec)
        if f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING
    ]
    assert required == ["name", "detect", "load"]
    for shim, argument in [
        (contracts.Placement, "device_type"),
        (contracts.Compilation, "device_type"),
        (contracts.Profiling, "device_type"),
        (contracts.Collectives, "placement"),
    ]:
        assert list(inspect.signature(shim.__init__).parameters) == ["self", argument]
    doc = (REPO / "docs" / "architecture.md").read_text()
    listed = doc.split("**no default**", 1)[1].split("Everything else has a default", 1)[0]
    assert all(f"`DeviceSpec.{name}`" in listed for name in required) and "Collectives(placement)" in listed
