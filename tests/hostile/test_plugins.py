"""Issue 11, "Plugins": a third-party plugin never takes the others down.

Real subprocesses against real plugin packages pip-installed into a target directory on
PYTHONPATH (tests/hostile/plugins), plus in-process registries for the declaration rules.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from anydevice.device_spec import Detection, DeviceSpec, detection_problems, spec_problems
from anydevice.errors import AnyDeviceError
from anydevice.hookspecs import hookimpl
from anydevice.registry import Registry
from anydevice.selection import resolve
from tests.utils import anydevice_cli, python

FIX = "report this to the maintainers of the '{0}' plugin, or exclude it with ANYDEVICE_PLUGINS"
QUICK = {"ANYDEVICE_DETECT_TIMEOUT": "1"}  # the hang costs one second per process, not five


def listing(site: Path, env: dict[str, str] | None = None) -> dict[str, Any]:
    proc = anydevice_cli("list", "--json", env=env or QUICK, pythonpath=site)
    assert proc.returncode == 0, proc.stderr
    data: dict[str, Any] = json.loads(proc.stdout)
    return data


def broken(data: dict[str, Any], plugin: str) -> list[tuple[str, str]]:
    return [(b["stage"], b["error"]) for b in data["broken_plugins"] if b["plugin"] == plugin]


def devices(data: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {d["name"]: d for d in data["devices"]}


# -- a detection that hangs ---------------------------------------------------------------------
def test_list_with_a_hanging_plugin_finishes_within_the_deadline_plus_a_second_and_names_it(hostile_site: Path) -> None:
    others = "cpu,cuda,tpu,neuron,xla,mps,xpu,exit_import,exit_detect,base_register,bad_priority,bad_count,bad_name,impostor"
    baseline_start = time.monotonic()
    without = anydevice_cli("list", "--json", env={"ANYDEVICE_PLUGINS": others}, pythonpath=hostile_site)
    baseline = time.monotonic() - baseline_start  # the same command and plugins, but for the hanging one
    assert without.returncode == 0 and "hang" not in devices(json.loads(without.stdout))
    start = time.monotonic()
    proc = anydevice_cli("list", "--json", pythonpath=hostile_site)  # the default deadline: 5 s
    elapsed = time.monotonic() - start
    assert proc.returncode == 0, proc.stderr
    hang = devices(json.loads(proc.stdout))["hang"]
    assert (hang["available"], hang["problem"], hang["plugin"]) == (False, "plugin_error", "hang")
    assert hang["reason"] == "plugin 'hang' did not finish detection within 5 s"
    assert hang["fix"] == FIX.format("hang") + "; if it is only slow, raise ANYDEVICE_DETECT_TIMEOUT"
    # The hanging plugin costs the deadline plus at most a second over the same command without it
    # (about 0.7 s of python, imports and the other plugins on an idle machine; seconds on a shared one).
    print(f"list with a hanging plugin: {elapsed:.2f} s; without: {baseline:.2f} s; deadline 5 s")
    assert elapsed - baseline <= 5 + 1, (elapsed, baseline)


def test_the_deadline_is_a_setting(hostile_site: Path) -> None:
    hang = devices(listing(hostile_site, {"ANYDEVICE_DETECT_TIMEOUT": "0.5"}))["hang"]
    assert hang["reason"] == "plugin 'hang' did not finish detection within 0.5 s"


@pytest.mark.parametrize("value", ["soon", "0", "-1", "inf", "nan"])
def test_a_malformed_deadline_is_a_clear_error(value: str) -> None:
    proc = anydevice_cli("list", env={"ANYDEVICE_DETECT_TIMEOUT": value})
    assert proc.returncode == 2
    assert proc.stderr == (
        f"anydevice: error: ANYDEVICE_DETECT_TIMEOUT={value!r} is not a positive number of seconds.\n"
        "Set it to e.g. ANYDEVICE_DETECT_TIMEOUT=5, or unset it.\n"
    )


def test_auto_passes_over_a_hanging_plugin_and_the_process_exits(hostile_site: Path) -> None:
    # `hang` has priority 500, so auto asks it first; the abandoned daemon thread must not keep the process alive
    proc = python("-c", "import anydevice as ad; print(ad.device())", env=QUICK, pythonpath=hostile_site, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == "cpu\n"
    info = anydevice_cli("info", "--json", env=QUICK, pythonpath=hostile_site)
    backend = json.loads(info.stdout)["backend"]
    assert backend["name"] == "cpu" and "hang: plugin 'hang' did not finish detection within 1 s" in backend["why"]


def test_hangs_at_import_and_registration_are_reported_by_stage(slow_site: Path) -> None:
    start = time.monotonic()
    data = listing(slow_site)
    elapsed = time.monotonic() - start
    assert broken(data, "hang_import") == [("import", "did not finish within 1 s")]
    assert broken(data, "hang_register") == [("register", "did not finish within 1 s")]
    assert devices(data)["cpu"]["available"]
    assert elapsed < 60  # two one-second deadlines, not two ten-minute sleeps


# -- plugins that exit ------------------------------------------------------------------------
def test_sys_exit_at_import_is_reported_and_cpu_still_works(hostile_site: Path) -> None:
    proc = python("-c", "import anydevice as ad; print(ad.device())", env={"ANYDEVICE": "cpu"}, pythonpath=hostile_site)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == "cpu\n"
    assert broken(listing(hostile_site), "exit_import") == [("import", "called sys.exit(3)")]


def test_system_exit_in_detection_is_reported_and_the_others_keep_working(hostile_site: Path) -> None:
    data = listing(hostile_site)
    exits = devices(data)["exitdetect"]
    assert (exits["available"], exits["problem"]) == (False, "plugin_error")
    assert exits["reason"] == "plugin 'exit_detect' called sys.exit(4) during detection"
    assert devices(data)["cpu"]["available"]
    named = anydevice_cli("info", env={"ANYDEVICE": "exitdetect", **QUICK}, pythonpath=hostile_site)
    assert named.returncode == 2
    assert named.stderr == (
        "anydevice: error: Device 'exitdetect' is not available: plugin 'exit_detect' called sys.exit(4) during detection.\n"
        f"Fix: {FIX.format('exit_detect')}\n"
        "Available here: cpu, imp.\n"
    )


def test_a_base_exception_at_registration_is_reported(hostile_site: Path) -> None:
    assert broken(listing(hostile_site), "base_register") == [("register", "PluginPanic: registration gave up")]


# -- declarations, validated at registration ------------------------------------------------------
GRAMMAR = "must be lower-case ASCII letters, digits, '_' or '-', starting with a letter (e.g. 'mychip')"


def test_priority_high_is_rejected_naming_the_plugin_and_the_field(hostile_site: Path) -> None:
    data = listing(hostile_site)
    assert broken(data, "bad_priority") == [
        (
            "validate",
            "device 'badprio' is declared with invalid values: field 'priority' = 'high': Input should be a valid integer",
        )
    ]
    assert "badprio" not in devices(data)
    auto = anydevice_cli("info", "--json", env=QUICK, pythonpath=hostile_site)  # auto sorts by priority: no TypeError
    assert auto.returncode == 0 and json.loads(auto.stdout)["backend"]["name"] == "cpu"


def test_count_many_makes_the_device_unavailable_naming_the_plugin_and_the_field(hostile_site: Path) -> None:
    bad = devices(listing(hostile_site))["badcount"]
    assert (bad["available"], bad["problem"], bad["count"]) == (False, "plugin_error", None)
    assert bad["reason"] == (
        "plugin 'bad_count' returned an invalid detection: field 'count' = 'many': Input should be a valid integer"
    )


def test_a_bad_name_or_alias_is_rejected_not_listed(hostile_site: Path) -> None:
    data = listing(hostile_site)
    assert broken(data, "bad_name") == [
        ("validate", f"device 'Bad Name' is declared with invalid values: field 'name' = 'Bad Name': {GRAMMAR}"),
        ("validate", f"device 'goodname' is declared with invalid values: field 'aliases' = 'Bad Alias': {GRAMMAR}"),
    ]
    assert not {"Bad Name", "goodname"} & set(devices(data))


def test_list_text_shows_every_broken_plugin_with_its_stage(hostile_site: Path) -> None:
    proc = anydevice_cli("list", env=QUICK, pythonpath=hostile_site)
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    for plugin, stage in [("exit_import", "import"), ("base_register", "register"), ("bad_priority", "validate")]:
        assert any(line.split()[0] == plugin and f"plugin failed at {stage}: " in line for line in lines), plugin
    assert any(line.startswith("hang ") and "did not finish detection within 1 s" in line for line in lines)


def _plugin(*specs: object) -> object:
    @hookimpl
    def anydevice_register_devices(register: Callable[[object], None]) -> None:
        for spec in specs:
            register(spec)

    return SimpleNamespace(anydevice_register_devices=anydevice_register_devices)


def _spec(**changes: Any) -> DeviceSpec:
    values: dict[str, Any] = {"name": "mychip", "detect": lambda: Detection.ok("here", count=1), "load": lambda: None}
    return DeviceSpec(**{**values, **changes})


@pytest.mark.parametrize(
    ("changes", "problem"),
    [
        ({"priority": "high"}, "field 'priority' = 'high': Input should be a valid integer"),
        ({"priority": True}, "field 'priority' = True: Input should be a valid integer"),
        ({"priority": 1.5}, "field 'priority' = 1.5: Input should be a valid integer"),
        ({"priority": 10**6}, "field 'priority' = 1000000: must be between -1000 and 1000"),
        ({"name": "Bad Name"}, f"field 'name' = 'Bad Name': {GRAMMAR}"),
        ({"name": "cpu\n"}, f"field 'name' = 'cpu\\n': {GRAMMAR}"),
        ({"name": "ｃｐｕ"}, f"field 'name' = 'ｃｐｕ': {GRAMMAR}"),
        ({"name": 7}, "field 'name' = 7: Input should be a valid string"),
        ({"aliases": ["gpu"]}, "field 'aliases' = ['gpu']: Input should be a valid tuple"),
        ({"aliases": ("GPU",)}, f"field 'aliases' = 'GPU': {GRAMMAR}"),
        ({"detect": "detect"}, "field 'detect' = 'detect': Input should be callable"),
        ({"unsupported": {"sdpa": 1}}, "field 'unsupported.sdpa' = 1: Input should be a valid string"),
        ({"verified_on_hardware": "yes"}, "field 'verified_on_hardware' = 'yes': Input should be a valid boolean"),
    ],
)
def test_each_bad_field_is_named(changes: dict[str, Any], problem: str) -> None:
    assert spec_problems(_spec(**changes)) == [problem]
    registry = Registry([("third", _plugin(_spec(**changes)), "some-dist")])
    assert registry.names() == []
    [failure] = registry.failures
    assert (failure.plugin, failure.stage) == ("third", "validate") and failure.error.endswith(problem)


@pytest.mark.parametrize(
    ("detection", "problem"),
    [
        (Detection(True, "here", count=-1), "field 'count' = -1: must be 0 or more"),
        (Detection(True, "here", count="many"), "field 'count' = 'many': Input should be a valid integer"),  # type: ignore[arg-type]
        (Detection("yes", "here"), "field 'available' = 'yes': Input should be a valid boolean"),  # type: ignore[arg-type]
        (Detection(False, "gone", problem="broken"), "field 'problem' = 'broken': Input should be 'package_missing', "),  # type: ignore[arg-type]
    ],
)
def test_each_bad_detection_field_is_named(detection: Detection, problem: str) -> None:
    [found] = detection_problems(detection)
    assert found.startswith(problem)
    registry = Registry([("third", _plugin(_spec(detect=lambda: detection)), "some-dist")])
    det = registry.detect("mychip")
    assert not det.available and det.problem == "plugin_error"
    assert det.reason.startswith(f"plugin 'third' returned an invalid detection: {problem}")


def test_every_built_in_declaration_is_valid() -> None:
    # built-in plugins skip the per-process validation (it costs ~0.3 s of pydantic); this keeps them honest
    registry = Registry()
    assert [f for f in registry.failures if f.plugin in registry.names()] == []
    for name in registry.names():
        entry = registry.get(name)
        assert entry.builtin and spec_problems(entry.spec) == [], name
    for name, detection in registry.detect_all().items():
        assert detection_problems(detection) == [], name


def test_a_plugin_hanging_in_process_is_abandoned_within_the_deadline() -> None:
    import threading

    release = threading.Event()
    slow = _spec(detect=lambda: release.wait(60) and Detection.ok("late"))
    registry = Registry([("slow", _plugin(slow), "some-dist")], timeout=0.2)
    start = time.monotonic()
    det = registry.detect("mychip")
    assert time.monotonic() - start < 5
    release.set()
    assert det.reason == "plugin 'slow' did not finish detection within 0.2 s"
    assert registry.detect("mychip") is det  # decided once, not waited for again


def test_keyboard_interrupt_is_the_users_and_is_not_swallowed() -> None:
    def interrupted() -> Detection:
        raise KeyboardInterrupt

    registry = Registry([("third", _plugin(_spec(detect=interrupted)), "some-dist")])
    with pytest.raises(KeyboardInterrupt):
        registry.detect("mychip")


def test_a_malformed_plugin_never_reaches_selection() -> None:
    registry = Registry([("third", _plugin(_spec(name="Bad Name")), "some-dist"), ("cpu", _plugin(_spec(name="cpu")), None)])
    with pytest.raises(AnyDeviceError, match="Malformed device name"):
        resolve("Bad Name", registry)
    assert resolve("auto", registry).name == "cpu"
