"""anydevice.runtime.autoload: torch's backend autoload is turned off unless the selection may need it."""

from __future__ import annotations

import pytest

from anydevice.runtime import autoload

pytestmark = pytest.mark.torch_version_sensitive  # docs/architecture.md, "Which tests the core lanes run"

VAR = "TORCH_DEVICE_BACKEND_AUTOLOAD"


@pytest.mark.parametrize("selection", ["cpu", "cpu,cuda", "xla", "auto"])
def test_turned_off_when_no_autoloaded_device_can_be_chosen(selection: str) -> None:
    env: dict[str, str] = {}
    assert autoload.apply(env, selection) is True  # no TPU chip / Neuron device on this machine
    assert env == {VAR: "0"}


@pytest.mark.parametrize("selection", ["tpu", "neuron", "trainium"])
def test_kept_when_an_autoloaded_device_is_named(selection: str) -> None:
    env: dict[str, str] = {}
    assert autoload.apply(env, selection) is False
    assert env == {}


def test_autoload_already_off_is_left_alone() -> None:
    env = {VAR: "0"}
    assert autoload.apply(env, "cpu") is False and env == {VAR: "0"}


def test_an_inherited_on_value_is_not_a_choice() -> None:
    """torch_tpu writes TORCH_DEVICE_BACKEND_AUTOLOAD=1 into every process that imported it; children inherit it."""
    env = {VAR: "1"}
    assert autoload.apply(env, "cpu") is True and env == {VAR: "0"}


def test_keep_autoload_setting(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ANYDEVICE_KEEP_AUTOLOAD", "1")
    env: dict[str, str] = {}
    assert autoload.apply(env, "cpu") is False and env == {}


def test_selection_comes_from_the_target_environment() -> None:
    env = {"ANYDEVICE": "tpu"}
    assert autoload.apply(env) is False
    env = {"ANYDEVICE": "cpu"}
    assert autoload.apply(env) is True and env[VAR] == "0"
