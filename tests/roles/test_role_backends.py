"""A role's device goes through the one loader (issue 47): reset() forgets it, ad.device(role) counts as a use that
use() will not switch under, and ad.step(role) advances the step listeners as ad.step() does."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from types import SimpleNamespace

import pytest

import anydevice as ad
from anydevice.api import add_step_listener
from anydevice.contract.device_spec import DeviceSpec
from anydevice.contract.hookspecs import hookimpl
from anydevice.errors import SelectionError
from anydevice.plugins import cpu
from anydevice.runtime import backend, roles
from anydevice.runtime.registry import Registry, reset_registry


@hookimpl
def _register_host2(register: Callable[[DeviceSpec], None]) -> None:
    register(DeviceSpec(name="host2", detect=cpu.detect, load=cpu.load, priority=0))


@pytest.fixture
def rollout_beside(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """The process on cpu, its rollout role on host2 (the real CPU shims under a second name), loaded beside it."""
    host2 = SimpleNamespace(anydevice_register_devices=_register_host2)
    reset_registry(Registry(plugins=[("cpu", cpu, None), ("host2", host2, None)]))
    monkeypatch.setenv("ANYDEVICE", "cpu")
    monkeypatch.setenv("ANYDEVICE_ROLES", "trainer=cpu,rollout=host2")
    ad.reset()
    yield
    ad.reset()
    reset_registry()


def test_reset_forgets_a_roles_backend(rollout_beside: None) -> None:
    first = roles.backend_for("rollout")
    assert first.name == "host2" and first is not backend.current()
    assert roles.backend_for("rollout") is first  # loaded once
    ad.reset()
    assert roles.backend_for("rollout") is not first


def test_a_roles_device_is_a_use_that_use_will_not_switch_under(rollout_beside: None) -> None:
    assert ad.device("rollout").type == "cpu"
    with pytest.raises(SelectionError, match=r"after ad.device\('rollout'\) was used"):
        ad.use("host2")


def test_a_roles_step_reaches_the_step_listeners(rollout_beside: None) -> None:
    steps: list[str] = []
    remove = add_step_listener(lambda: steps.append("step"))
    try:
        ad.step("rollout")
        ad.step()
    finally:
        remove()
    assert steps == ["step", "step"]
