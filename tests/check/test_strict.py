"""Strict mode off the XLA lane: the switch, devices that never fall back, devices that cannot tell, doctor."""

from __future__ import annotations

from collections.abc import Callable

import pytest

import anydevice as ad
from anydevice.contract.check_facts import CheckFacts
from anydevice.contract.device_spec import Detection, DeviceSpec
from anydevice.contract.hookspecs import hookimpl
from anydevice.errors import AnyDeviceError, UnsupportedFeatureError
from anydevice.runtime import strict
from anydevice.runtime.registry import Registry, reset_registry
from tests.utils import anydevice_cli


def test_off_by_default_and_on_by_variable_or_use(monkeypatch: pytest.MonkeyPatch) -> None:
    assert strict.enabled() is False
    monkeypatch.setenv("ANYDEVICE_STRICT", "1")
    assert strict.enabled() is True
    ad.use("cpu", strict=False)
    assert strict.enabled() is False
    ad.reset()
    monkeypatch.setenv("ANYDEVICE_STRICT", "maybe")
    with pytest.raises(AnyDeviceError, match="ANYDEVICE_STRICT='maybe' is not a yes/no value"):
        strict.enabled()


def test_cpu_never_falls_back_so_strict_steps_run() -> None:
    import torch

    ad.use("cpu", strict=True)
    x = ad.to(torch.randn(4, 8))
    torch.median(x, dim=-1)
    for _ in range(2):
        ad.step()
    assert ad.fallback_ops() == {}


class _Silent:
    """A third-party device whose plugin declares no way to notice CPU fallback."""

    @hookimpl
    def anydevice_register_devices(self, register: Callable[[DeviceSpec], None]) -> None:
        def load() -> object:
            from anydevice.shims.eager import EagerVendor, PlacementTable, eager_shims

            return eager_shims(EagerVendor(device_type="cpu", placement=PlacementTable(host=True)))

        register(DeviceSpec(name="silent", detect=lambda: Detection.ok("host"), load=load, check=CheckFacts()))  # type: ignore[arg-type]


def test_a_device_that_cannot_tell_refuses_strict_instead_of_pretending() -> None:
    reset_registry(Registry(plugins=[("silent", _Silent(), "silent-dist")]))
    with pytest.raises(UnsupportedFeatureError, match="Strict mode cannot watch silent"):
        ad.use("silent", strict=True)
    ad.reset()
    ad.use("silent")  # without strict it is selected as before


def test_doctor_says_whether_strict_is_on() -> None:
    off = anydevice_cli("doctor", env={"ANYDEVICE": "cpu"})
    on = anydevice_cli("doctor", env={"ANYDEVICE": "cpu", "ANYDEVICE_STRICT": "1"})
    assert "strict mode      off" in off.stdout, off.stdout
    assert "strict mode      on: an op that runs on the CPU instead of the device is an error (cpu: never)" in on.stdout


def test_neuron_refuses_strict_saying_why_and_what_to_use_instead() -> None:
    from anydevice.plugins import neuron

    facts = neuron.CHECK_FACTS  # what the registered neuron device declares
    assert facts.fallback == "unknown"  # nothing in its documented API notices a CPU fallback
    error = strict.refusal("neuron", facts)
    assert isinstance(error, UnsupportedFeatureError)
    text = str(error)
    assert "Strict mode cannot watch neuron: TorchNeuron runs the ops it has no Neuron kernel for on the CPU" in text
    assert "CPU_FALLBACK" in text and "does not guess a variable name" in text  # why, exactly
    assert "anydevice check SCRIPT --target neuron" in text and "Unset ANYDEVICE_STRICT" in text  # what instead
    generic = str(strict.refusal("silent", CheckFacts()))
    assert "declares no way to notice" in generic and "CheckFacts.fallback" in generic
