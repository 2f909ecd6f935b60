"""Issue 25, plugins: a registration hook that calls back into the registry is reported as such (not as a hang),
a probe hook that hangs is named by ``anydevice matrix probe``, and ten slow plugins are vetted concurrently.

Real plugin packages pip-installed into a site (tests/hostile/plugins/anydevice_reentrant, anydevice_tenslow),
real ``anydevice`` commands in subprocesses, a fresh detection cache per test.
"""

from __future__ import annotations

import json
from pathlib import Path

from tests.utils import anydevice_cli


def fresh_cache(tmp_path: Path, timeout: str, **extra: str) -> dict[str, str]:
    return {"ANYDEVICE_DETECT_TIMEOUT": timeout, "ANYDEVICE_CACHE_DIR": str(tmp_path / "cache"), **extra}


def test_a_registration_hook_calling_back_into_the_registry_is_reported_as_reentrant(
    reentrant_site: Path, tmp_path: Path
) -> None:
    proc = anydevice_cli("list", "--json", env=fresh_cache(tmp_path, "30"), pythonpath=reentrant_site)
    assert proc.returncode == 0, proc.stderr
    failures = {f["plugin"]: f for f in json.loads(proc.stdout)["broken_plugins"]}
    assert failures["reentrant"]["stage"] == "register"
    assert failures["reentrant"]["error"] == (
        "RegistryReentryError: called back into the registry while it was loading plugins (from a plugin's import or "
        "registration hook), which can never finish; read the registry from detect() or load() instead"
    )


def test_a_hanging_probe_hook_is_named_by_matrix_probe(reentrant_site: Path, tmp_path: Path) -> None:
    out = tmp_path / "results.json"
    env = fresh_cache(tmp_path, "2", ANYDEVICE="cpu")
    proc = anydevice_cli("matrix", "probe", "--only", "sanity", "--out", str(out), env=env, pythonpath=reentrant_site)
    assert proc.returncode == 0, proc.stderr
    named = "plugin hangprobes: its anydevice_register_probes hook did not finish within 2 s; its probes (if any) were not added"
    assert f"warning: {named}" in proc.stderr.splitlines()


def import_spans(log: Path) -> dict[str, tuple[float, float]]:
    """Each slow plugin's import, as (start, end) times from its log lines (the parent's own import is ignored)."""
    starts: dict[str, float] = {}
    spans: dict[str, tuple[float, float]] = {}
    for line in log.read_text().splitlines():
        kind, name, when, _pid = line.split()
        if kind == "start":
            starts.setdefault(name, float(when))
        elif name not in spans:
            spans[name] = (starts[name], float(when))
    return spans


def test_ten_slow_plugins_are_vetted_concurrently_each_under_its_own_deadline(tenslow_site: Path, tmp_path: Path) -> None:
    log = tmp_path / "imports.log"
    env = fresh_cache(tmp_path, "30", ANYDEVICE_TEST_SLOW_LOG=str(log))
    proc = anydevice_cli("list", "--json", env=env, pythonpath=tenslow_site)
    assert proc.returncode == 0, proc.stderr
    listed = json.loads(proc.stdout)
    devices = {d["name"]: d for d in listed["devices"]}
    assert all(devices[f"slow{i}dev"]["available"] for i in range(10)), listed
    assert listed["broken_plugins"] == []
    spans = import_spans(log)
    assert sorted(spans) == [f"slow{i}" for i in range(10)]
    overlapping = max(sum(1 for start, end in spans.values() if start <= at < end) for at, _ in spans.values())
    assert overlapping >= 5, f"at most {overlapping} plugin imports ran at once: {spans}"
