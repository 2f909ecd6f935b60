""" "Simulated" in the matrix comes from the plugin's evidence, not from words in its source (issue 47, review F8)."""

from __future__ import annotations

from collections.abc import Callable
from types import SimpleNamespace

import pytest

from anydevice.compat_matrix.worker import backend_env
from anydevice.contract.device_spec import Detection, DeviceSpec
from anydevice.contract.evidence import Evidence
from anydevice.contract.hookspecs import hookimpl
from anydevice.plugins import neuron, xla
from anydevice.runtime.registry import Registry, reset_registry


def _described(evidence: Evidence) -> dict[str, object]:
    spec = DeviceSpec(name="chip", detect=lambda: Detection.ok("here"), load=lambda: None, evidence=evidence)  # type: ignore[arg-type,return-value]

    @hookimpl
    def anydevice_register_devices(register: Callable[[DeviceSpec], None]) -> None:
        register(spec)

    reset_registry(Registry(plugins=[("chip", SimpleNamespace(anydevice_register_devices=anydevice_register_devices), None)]))
    backend = SimpleNamespace(
        name="chip", plugin="chip", device_type="chip", chip=None, count=1, versions={}, why="named", distribution=None
    )
    return backend_env(backend)


@pytest.mark.parametrize(
    ("evidence", "simulated"),
    [
        (Evidence.stand_in("a simulated vendor module", simulated=True), True),
        (Evidence.stand_in("the fake-free torch_xla on PJRT CPU"), False),  # the word alone decides nothing
        (Evidence.ran("results/chip.json"), False),
    ],
)
def test_simulated_is_the_evidence_flag(evidence: Evidence, simulated: bool) -> None:
    assert _described(evidence)["simulated"] is simulated


def test_the_built_in_stand_ins_say_which_they_are() -> None:
    assert neuron.EVIDENCE.simulated and not xla.EVIDENCE.simulated
    assert neuron.EVIDENCE.level == xla.EVIDENCE.level == "stand-in"


def test_only_a_stand_in_can_be_simulated() -> None:
    assert Evidence.stand_in("x", simulated=True).problems() == []
    assert Evidence("ran", "results/chip.json", simulated=True).problems() == [
        "level 'ran' cannot be simulated: only a stand-in is (Evidence.stand_in(..., simulated=True))"
    ]
