"""Roles (ANYDEVICE_ROLES): the grammar, the fallback to ANYDEVICE, did-you-mean, pairing refusals and weight-sync names."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from types import SimpleNamespace

import pytest

from anydevice.contract.device_spec import Detection, DeviceSpec, Hardware
from anydevice.contract.hookspecs import hookimpl
from anydevice.errors import DeviceUnavailableError, SelectionError, UnknownDeviceError
from anydevice.runtime import roles
from anydevice.runtime.registry import Registry
from tests.utils import REPO


def _no_load() -> object:
    raise AssertionError("planning roles must not load shims")


def _spec(name: str, available: bool = True, **hardware: bool) -> DeviceSpec:
    det = (
        Detection.ok(f"{name} is here", count=4)
        if available
        else Detection.missing(f"no {name}", f"install {name}", "no_hardware")
    )
    return DeviceSpec(name=name, detect=lambda: det, load=_no_load, hardware=Hardware(**hardware))  # type: ignore[arg-type]


def _plugin(spec: DeviceSpec) -> object:
    @hookimpl
    def anydevice_register_devices(register: Callable[[DeviceSpec], None]) -> None:
        register(spec)

    return SimpleNamespace(anydevice_register_devices=anydevice_register_devices)


@pytest.fixture
def registry() -> Registry:
    specs = [
        _spec("cpu", host_memory=True),
        _spec("gpu"),
        _spec("chip", exclusive=True),
        _spec("gone", available=False),
    ]
    return Registry(plugins=[(s.name, _plugin(s), None) for s in specs])


def test_grammar_lists_continue_their_role() -> None:
    assert roles.parse_roles("trainer=chip,gpu,rollout=cpu") == {"trainer": "chip,gpu", "rollout": "cpu"}
    assert roles.parse_roles(" Trainer = xla:1 , rollout=cpu ") == {"trainer": "xla:1", "rollout": "cpu"}
    assert roles.parse_roles("") == {} and roles.parse_roles(None) == {}


@pytest.mark.parametrize(
    ("text", "says"),
    [
        ("cpu,trainer=cpu", "belongs to no role"),
        ("trainer=cpu,trainer=xla", "given twice"),
        ("trainer=", "names no device"),
        ("Tr@iner=cpu", "not a role name"),
        ("trainer=cpu,,rollout=cpu", "belongs to no role"),
        ("trainer=cpu:x", "role 'trainer': Bad device index"),
        ("trainer=auto,cpu", "role 'trainer': Malformed device list"),
    ],
)
def test_malformed_roles_are_refused_naming_the_entry(text: str, says: str) -> None:
    with pytest.raises(SelectionError, match="ANYDEVICE_ROLES") as info:
        roles.parse_roles(text)
    assert says in str(info.value)


def test_a_role_without_an_entry_follows_anydevice(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ANYDEVICE_ROLES", "trainer=chip")
    monkeypatch.setenv("ANYDEVICE", "gpu")
    assert roles.request_for("trainer") == "chip"
    assert roles.request_for("reward") == "gpu"  # not close to 'trainer': follows ANYDEVICE


def test_a_role_one_typo_away_is_an_error_with_did_you_mean(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ANYDEVICE_ROLES", "trainer=chip,rollout=cpu")
    with pytest.raises(SelectionError, match="Did you mean 'rollout'"):
        roles.request_for("rollot")


def test_an_unusable_role_device_is_an_error_naming_the_role(monkeypatch: pytest.MonkeyPatch, registry: Registry) -> None:
    monkeypatch.setenv("ANYDEVICE_ROLES", "trainer=gone,rollout=cpu")
    with pytest.raises(DeviceUnavailableError, match=r"role 'trainer' \(gone\): .*no gone"):
        roles.plan(registry=registry)
    monkeypatch.setenv("ANYDEVICE_ROLES", "trainer=chp,rollout=cpu")
    with pytest.raises(UnknownDeviceError, match=re.escape("role 'trainer' (chp): Unknown device 'chp'. Did you mean 'chip'")):
        roles.plan(registry=registry)


def test_a_list_falls_back_and_says_so(monkeypatch: pytest.MonkeyPatch, registry: Registry) -> None:
    monkeypatch.setenv("ANYDEVICE_ROLES", "trainer=gone,gpu")
    placed = roles.plan(registry=registry).placements["trainer"]
    assert placed.device == "gpu" and placed.choice.fell_back and "gone" in placed.choice.why


def test_exclusive_chips_are_refused_for_two_roles_on_one_host(monkeypatch: pytest.MonkeyPatch, registry: Registry) -> None:
    monkeypatch.setenv("ANYDEVICE_ROLES", "trainer=chip,rollout=chip")
    with pytest.raises(SelectionError, match="belongs to a single process") as info:
        roles.plan(registry=registry)
    assert "own slice" in str(info.value.hint)
    assert roles.plan(registry=registry, same_process=True).syncs[0].transport == roles.SAME_PROCESS
    across_hosts = roles.plan(registry=registry, one_host=False, weights_from="trainer")
    assert [s.transport for s in across_hosts.syncs] == [roles.OBJECT_STORE]
    monkeypatch.setenv("ANYDEVICE_ROLES", "trainer=chip:0,rollout=chip:1")  # separate chips, named
    assert roles.plan(registry=registry).placements["rollout"].device == "chip:1"
    monkeypatch.setenv("ANYDEVICE_ROLES", "trainer=gpu,rollout=gpu")  # a shareable device may be shared
    assert roles.plan(registry=registry, weights_from="trainer").syncs[0].transport == roles.COLLECTIVE


@pytest.mark.parametrize(
    ("trainer", "rollout", "same_process", "transport"),
    [
        ("gpu", "cpu", True, roles.SAME_PROCESS),
        ("cpu", "cpu", False, roles.SHARED_MEMORY),
        ("gpu", "gpu", False, roles.COLLECTIVE),
        ("gpu", "cpu", False, roles.OBJECT_STORE),
        ("chip", "gpu", False, roles.OBJECT_STORE),
    ],
)
def test_weight_sync_is_chosen_per_device_pair(
    monkeypatch: pytest.MonkeyPatch, registry: Registry, trainer: str, rollout: str, same_process: bool, transport: str
) -> None:
    monkeypatch.setenv("ANYDEVICE_ROLES", f"trainer={trainer},rollout={rollout}")
    plan = roles.plan(registry=registry, same_process=same_process, weights_from="trainer")
    assert [(s.source, s.target, s.transport) for s in plan.syncs] == [("trainer", "rollout", transport)]
    assert plan.as_dict()["weight_sync"][0]["why"]  # type: ignore[index]


def test_no_roles_to_place_is_an_error(monkeypatch: pytest.MonkeyPatch, registry: Registry) -> None:
    monkeypatch.delenv("ANYDEVICE_ROLES", raising=False)
    with pytest.raises(SelectionError, match="No roles to place"):
        roles.plan(registry=registry)


def _anydevice(args: list[str], **env: str) -> subprocess.CompletedProcess[str]:
    full = {**os.environ, "ANYDEVICE_QUIET": "1", **env}
    return subprocess.run(
        [sys.executable, "-m", "anydevice", *args], capture_output=True, text=True, env=full, timeout=120, cwd=REPO
    )


def test_run_role_takes_the_role_device_and_checks_pairings(tmp_path: Path) -> None:
    script = tmp_path / "show.py"
    script.write_text("import os, anydevice as ad\nprint(os.environ['ANYDEVICE'], ad.device(), ad.device(role='rollout'))\n")
    done = _anydevice(["run", "--role", "rollout", str(script)], ANYDEVICE="cpu", ANYDEVICE_ROLES="rollout=cpu,trainer=cpu")
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["cpu", "cpu", "cpu"]
    typo = _anydevice(["run", "--role", "rollot", str(script)], ANYDEVICE_ROLES="rollout=cpu")
    assert typo.returncode == 2 and "Did you mean 'rollout'" in typo.stderr
    unknown = _anydevice(["run", "--role", "rollout", str(script)], ANYDEVICE_ROLES="rollout=cpuu")
    assert unknown.returncode == 2 and "role 'rollout' (cpuu): Unknown device 'cpuu'. Did you mean 'cpu'?" in unknown.stderr


def test_doctor_shows_the_roles_and_their_weight_sync() -> None:
    done = _anydevice(["doctor", "--json"], ANYDEVICE_ROLES="trainer=cpu,rollout=cpu")
    assert '"roles"' in done.stdout and "trainer=cpu, rollout=cpu" in done.stdout and "shared memory" in done.stdout
    bad = _anydevice(["doctor", "--json"], ANYDEVICE_ROLES="trainer=cpuu")
    assert bad.returncode == 1 and "Did you mean 'cpu'" in bad.stdout


def test_ray_role_options_carry_the_role_device_and_the_roles(monkeypatch: pytest.MonkeyPatch) -> None:
    pytest.importorskip("ray")
    from anydevice.integrations.ray import role_options

    monkeypatch.setenv("ANYDEVICE_ROLES", "trainer=cpu,rollout=cpu")
    monkeypatch.setenv("ANYDEVICE", "cpu")
    env = role_options("rollout")["runtime_env"]["env_vars"]
    assert env["ANYDEVICE"] == "cpu" and env["ANYDEVICE_ROLES"] == "trainer=cpu,rollout=cpu"
