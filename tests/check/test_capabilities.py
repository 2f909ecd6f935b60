"""ad.capabilities() and the CheckFacts declaration: from the plugin, shown by `anydevice info`."""

from __future__ import annotations

import json
from collections.abc import Callable

import anydevice as ad
from anydevice.contract.check_facts import DEFAULT_FACTS
from anydevice.contract.device_spec import Detection, DeviceSpec
from anydevice.contract.hookspecs import hookimpl
from anydevice.runtime.registry import Registry, get_registry, reset_registry
from tests.utils import anydevice_cli


def test_cpu_capabilities_come_from_its_declaration() -> None:
    ad.use("cpu")
    caps = ad.capabilities()
    assert caps.device == "cpu"
    assert caps.bf16 is True and "float64" in (caps.dtypes or ())
    assert caps.fp8 == ("float8_e4m3fn", "float8_e5m2")
    assert caps.compile_backends[0] == "inductor" and caps.collectives_backend == "gloo"
    assert caps.static_shapes is False and caps.memory_per_chip is None
    assert "capabilities" in ad.__all__ and "cpu plugin's declaration" in caps.sources[0]


def test_builtin_static_shape_devices_declare_their_facts() -> None:
    registry = get_registry()
    tpu, neuron, xla = (registry.get(n).spec.check for n in ("tpu", "neuron", "xla"))
    assert tpu.static_shapes and neuron.static_shapes and xla.static_shapes
    assert "float64" not in (tpu.dtypes or ()) and "bfloat16" in (tpu.dtypes or ())
    assert tpu.world_sizes["TPU v5e"] == (1, 4, 8) and tpu.world_sizes["TPU v7"] == (2, 4, 8)
    assert tpu.memory_per_chip["TPU v5e"] == 16 << 30
    assert xla.op_table is not None and xla.op_table.dispatch_key == "XLA"


class _Bare:
    """A third-party plugin that declares no CheckFacts: it gets the defaults, every fact unknown."""

    @hookimpl
    def anydevice_register_devices(self, register: Callable[[DeviceSpec], None]) -> None:
        def load() -> object:
            from anydevice.shims.eager import EagerVendor, PlacementTable, eager_shims

            return eager_shims(EagerVendor(device_type="cpu", placement=PlacementTable(host=True)))

        register(DeviceSpec(name="bare", detect=lambda: Detection.ok("host"), load=load))  # type: ignore[arg-type]


def test_undeclared_facts_are_unknown_not_guessed() -> None:
    reset_registry(Registry(plugins=[("bare", _Bare(), "bare-dist")]))
    assert get_registry().get("bare").spec.check is DEFAULT_FACTS
    ad.use("bare")
    caps = ad.capabilities()
    assert caps.dtypes is None and caps.bf16 is None and caps.fp8 is None and caps.memory_per_chip is None


def test_info_shows_capabilities() -> None:
    done = anydevice_cli("info", env={"ANYDEVICE": "cpu"})
    assert done.returncode == 0, done.stderr
    assert "dtypes     bfloat16" in done.stdout and "shapes dynamic" in done.stdout
    data = json.loads(anydevice_cli("info", "--json", env={"ANYDEVICE": "cpu"}).stdout)
    assert data["capabilities"]["bf16"] is True and data["capabilities"]["collectives_backend"] == "gloo"
