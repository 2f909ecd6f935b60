"""Run the probe suite in worker subprocesses and assemble the :class:`Run`.

Probes run in batches in one worker; a probe that crashes the worker or outlives its time limit
is recorded as failed and a fresh worker picks up the remaining probes. The runner itself imports torch
(the probe catalogue is written with it) but never a vendor's library, so it survives whatever a vendor
stack does.
"""

from __future__ import annotations

import os
import platform
import shlex
import subprocess
import sys
import time
import uuid
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from anydevice.compat_matrix import catalog, claims, worker
from anydevice.compat_matrix.probe import Probe
from anydevice.compat_matrix.progress import ProbeProgress
from anydevice.compat_matrix.schema import (
    MAX_LOG,
    MAX_MESSAGE,
    RESULT_KEYS,
    SCHEMA_VERSION,
    AnydeviceInfo,
    EnvInfo,
    ExportTarget,
    Hardware,
    Health,
    Invocation,
    PluginInfo,
    ProbeResult,
    Run,
    Stage,
    Status,
    bounded,
    dump_run,
    load_run,
)
from anydevice.files.safe_files import check_replaceable, json_with
from anydevice.runtime.child import Child, signal_name
from anydevice.runtime.untrusted import clean_tree

SETUP_TIMEOUT_MIN = 180.0
MAX_WORKER_STARTS_WITHOUT_PROGRESS = 2
_OK = (Status.PASS, Status.FALLBACK, Status.FAKE)


@dataclass
class _State:
    """What the runner learned from its workers so far."""

    env: dict[str, Any] = field(default_factory=dict)
    backend: dict[str, Any] | None = None
    results: dict[str, ProbeResult] = field(default_factory=dict)
    setup_error: dict[str, Any] | None = None
    gated: str | None = None
    notices: list[str] = field(default_factory=list)


def _earlier_durations(out: Path | None) -> dict[str, float]:
    """Seconds each probe took in the run ``out`` holds from last time (for the ETA); empty when none loads."""
    if out is None or not out.is_file():
        return {}
    try:
        return {r.probe: r.duration_s for r in load_run(out).results}
    except Exception:  # an unreadable earlier file only costs the ETA its weights
        return {}


def run_probes(
    out: Path | None,
    *,
    only: str | None = None,
    timeout: float = 120.0,
    seed: int = 0,
    simulated: bool | None = None,
    argv: Sequence[str] = (),
    modules: Sequence[str] = (),
    progress: ProbeProgress | None = None,
    python: str = sys.executable,
    force: bool = False,
    target: str | None = None,
) -> Run:
    """Run the probes (``only``: see :func:`catalog.matches`) on the selected device; write ``out``.

    :param timeout: seconds one probe may take before its worker is killed.
    :param simulated: force (or deny) "fake" results; None reads the plugin's declaration.
    :param modules: extra importable modules whose ``PROBES`` lists join the catalogue.
    :param force: replace ``out`` even when it is not an earlier result file.
    :param target: an export target (``"litert"``): its export probes instead of the device's, on the host CPU.
    """
    worker_env = _export_env(target)
    if out is not None:
        check_out(out, force=force)  # before any probe runs: an hour of probes must not end in "cannot write"
    started = datetime.now(timezone.utc)
    clock = time.perf_counter()
    problems: list[str] = []
    every = catalog.all_probes(problems, modules=modules)
    probes = catalog.select(every, only, target)
    progress = progress or ProbeProgress(len(probes))
    progress.total = len(probes)
    progress.expect([(p.name, p.group) for p in probes], _earlier_durations(out))
    state = _State(notices=list(problems))
    pending = [p.name for p in probes]
    starts_without_progress = 0
    while pending and state.setup_error is None and state.gated is None:
        done_before = len(state.results)
        request = {"seed": seed, "simulated": simulated, "modules": list(modules), "target": target}
        _run_worker(pending, state, probes, timeout, request, progress, python, worker_env)
        pending = [p.name for p in probes if p.name not in state.results]
        starts_without_progress = 0 if len(state.results) > done_before else starts_without_progress + 1
        if pending and starts_without_progress >= MAX_WORKER_STARTS_WITHOUT_PROGRESS:
            state.notices.append("the probe worker failed to start twice; remaining probes not run")
            break
        if pending and state.setup_error is None and state.gated is None:
            progress.note(f"respawning the probe worker for {len(pending)} remaining probes")
    unsupported = dict((state.backend or {}).get("unsupported") or {})
    unknown = sorted(set(unsupported) - {p.name for p in every})
    if unknown:
        state.notices.append(f"the plugin declares unsupported probes that do not exist: {', '.join(unknown)}")
    run = _assemble(state, probes, started, argv, seed, simulated)
    if out is not None:
        dump_run(run, out, force=force)
    progress.summary(run, time.perf_counter() - clock, str(out) if out else None)
    return run


def _export_env(target: str | None) -> dict[str, str]:
    """The worker's extra environment: a target's probes convert and interpret (export) or compile (a slice) on
    the host CPU. An unknown target, a slice no plugin compiles, or a compiler not installed is refused here."""
    if target is None:
        return {}
    from anydevice.compat_matrix.probe import COMPILE_GROUP, EXPORT_TARGETS, target_group
    from anydevice.errors import AnyDeviceError
    from anydevice.runtime.selection import example_ref

    group = target_group(target)
    if group is None:
        raise AnyDeviceError(
            f"Unknown target {target!r}.",
            "Targets: " + ", ".join(EXPORT_TARGETS) + f" (export), or a slice to compile for, such as {example_ref()}.",
        )
    if group == COMPILE_GROUP:
        from anydevice.preflight.compiled import canonical_slice, require_compiler, split_target

        device, slice_name = split_target(target)
        canonical_slice(device, slice_name or "")  # an unknown generation or size lists the valid ones
        require_compiler([target])
    selected = os.environ.get("ANYDEVICE", "").strip()
    if selected not in ("", "cpu"):
        raise AnyDeviceError(
            f"--target {target} probes {group} on the host CPU, but ANYDEVICE={selected} selects another device.",
            f"Unset ANYDEVICE (or set ANYDEVICE=cpu) for --target {target}; run the device's own probes without --target.",
        )
    return {"ANYDEVICE": "cpu"}


def check_out(out: Path, *, force: bool = False) -> None:
    """Raise :class:`~anydevice.errors.AnyDeviceError` unless ``out`` can be written as a result file.

    ``out`` must not be a directory, nor a file that is not an earlier result file (a link, a FIFO, a hand-written
    file) unless ``force``, and its folder (the nearest one that exists, since missing
    folders are created) must take a new file: tried for real, as permission bits do not stop root.
    """
    import tempfile

    from anydevice.errors import AnyDeviceError

    fix = "Give --out a file path in a folder you can write, e.g. --out results/mine.json."
    if out.is_dir():
        raise AnyDeviceError(f"--out {out} is a directory, not a result file.", fix)
    folder = out.parent
    while not folder.exists() and folder != folder.parent:
        folder = folder.parent
    try:
        if not folder.is_dir():
            raise NotADirectoryError(f"{folder} is not a directory")
        fd, name = tempfile.mkstemp(prefix=".anydevice-out-", dir=folder)
        os.close(fd)
        os.unlink(name)
    except OSError as exc:
        raise AnyDeviceError(f"--out {out} cannot be written: {exc.strerror or exc} ({folder}); no probe was run.", fix) from None
    check_replaceable(out, ours=json_with(RESULT_KEYS), force=force, force_hint="pass --force")


def _run_worker(
    names: list[str],
    state: _State,
    probes: list[Probe],
    timeout: float,
    request: dict[str, Any],
    progress: ProbeProgress,
    python: str,
    extra_env: dict[str, str],
) -> None:
    """One worker over ``names``; returns when it finishes, crashes or is killed for a timeout.

    Messages come on a private channel (:class:`~anydevice.runtime.child.Child`); what
    the worker's stdout and stderr carry is the running probe's log, and a result counts only for
    the probe that is running.
    """
    by_name = {p.name: p for p in probes}
    env = dict(os.environ, PYTHONUNBUFFERED="1", **extra_env)
    message = worker.encode("request", probes=names, **request)
    current: str | None = None
    stage = Stage.EXECUTE
    stray: list[str] = []
    deadline = time.monotonic() + max(timeout, SETUP_TIMEOUT_MIN)
    # closing kills also a worker that exited: what a probe left running in its group ends then
    with Child("anydevice.compat_matrix.worker", message, env=env, channel=True, python=python) as child:
        while True:
            event = child.next(deadline - time.monotonic())
            if event is None:
                child.close()
                if current is not None:
                    _lost(
                        state, by_name[current], stage, "Timeout", f"timed out after {timeout:g}s; worker killed", stray, progress
                    )
                else:
                    state.notices.append(f"probe worker setup timed out: {_tail(stray)}")
                return
            kind, line = event
            if kind == "end":  # the worker exited
                code = child.wait()
                if current is not None:
                    why = f"worker died with exit code {code}" + (f" ({signal_name(-code)})" if code < 0 else "")
                    _lost(state, by_name[current], stage, "WorkerCrash", why, stray, progress)
                elif state.setup_error is None and state.gated is None and code != 0:
                    state.notices.append(f"probe worker exited with code {code}: {_tail(stray)}")
                return
            decoded = worker.decode(line) if kind == "message" else None
            if decoded is None:  # output: the running probe's log, whatever it says
                stray.append(line)
                continue
            what = decoded["type"]
            if what == "env":
                state.env = state.env or decoded["env"]
            elif what == "backend":  # the plugin's own text (chip, versions, unsupported reasons): made safe here
                state.backend = state.backend or clean_tree(decoded["backend"])
            elif what == "setup_error":
                state.setup_error = decoded
            elif what == "notice":
                state.notices.append(str(decoded["message"]))
            elif what == "missing" and decoded["probe"] in names:
                state.notices.append(f"probe {decoded['probe']} is not known to the worker")
                state.results[decoded["probe"]] = _synthetic(
                    by_name[decoded["probe"]], Status.HARNESS_ERROR, "probe not found in the worker"
                )
            elif what == "start":
                if decoded["probe"] in names and decoded["probe"] not in state.results:
                    current, stage, stray = decoded["probe"], Stage.EXECUTE, []
                    deadline = time.monotonic() + timeout
                child.go_ahead()  # the worker waited: all output before this is the previous probe's
            elif what == "stage":
                stage = Stage(decoded["stage"])
            elif what == "result" and current is not None:
                result = ProbeResult.model_validate(decoded["result"])
                if result.probe != current:  # only the probe that is running reports, and only its own result
                    state.notices.append(f"a result for {result.probe!r} came while {current!r} ran; it was ignored")
                    continue
                if stray:
                    log = result.log + "".join(f"[native] {s}" for s in stray)
                    result = result.model_copy(update={"log": bounded(log, MAX_LOG) or ""})
                state.results[result.probe] = result
                progress.result(result)
                current, stray = None, []
                deadline = time.monotonic() + timeout
            elif what == "gated":
                state.gated = str(decoded["reason"])
            elif what == "done":
                child.wait()
                return


def _tail(lines: list[str], chars: int = 500) -> str:
    return "".join(lines)[-chars:].strip() or "no output"


def _lost(state: _State, probe: Probe, stage: Stage, exc_type: str, why: str, stray: list[str], progress: ProbeProgress) -> None:
    """Record a probe whose worker crashed or hung."""
    result = ProbeResult(
        probe=probe.name,
        shim=probe.group,
        description=probe.description,
        params=dict(probe.params),
        status=Status.FAIL,
        failure_stage=stage,
        reason=f"{why} (at {stage.value})",
        exception_type=exc_type,
        message=bounded(why, MAX_MESSAGE),
        log=bounded("".join(stray), MAX_LOG) or "",
    )
    state.results[probe.name] = result
    progress.result(result)


def _synthetic(probe: Probe, status: Status, reason: str, stage: Stage | None = None, message: str | None = None) -> ProbeResult:
    return ProbeResult(
        probe=probe.name,
        shim=probe.group,
        description=probe.description,
        params=dict(probe.params),
        status=status,
        failure_stage=stage,
        reason=bounded(reason, 1000),
        message=bounded(message, MAX_MESSAGE),
    )


def _assemble(
    state: _State, probes: list[Probe], started: datetime, argv: Sequence[str], seed: int, simulated: bool | None
) -> Run:
    """Fill in every probe (untested / skipped where nothing ran), set the plugin's claims, describe the environment."""
    results: list[ProbeResult] = []
    setup = state.setup_error
    for probe in probes:
        if probe.name in state.results:
            results.append(state.results[probe.name])
        elif setup is not None:
            message = str(setup.get("message", ""))
            reason = "device not available: " + (message.splitlines() or [""])[0]
            if setup.get("verdict") == "skip":
                results.append(_synthetic(probe, Status.SKIP, reason, message=message))
            else:
                results.append(_synthetic(probe, Status.FAIL, "vendor stack broken: " + message[:300], Stage.IMPORT, message))
        elif state.gated is not None:
            results.append(_synthetic(probe, Status.UNTESTED, f"not run: {state.gated}"))
        else:
            results.append(
                _synthetic(probe, Status.HARNESS_ERROR, "not run: " + (state.notices[-1] if state.notices else "worker stopped"))
            )
    backend = state.backend or {}
    env = state.env
    if state.backend is not None and not env.get("export"):  # a device's run: set its plugin's claims against every probe
        results = claims.with_claims(results, backend.get("unsupported") or {})
    requested = env.get("ANYDEVICE") or os.environ.get("ANYDEVICE")
    sanity = state.results.get(catalog.SANITY_NAME)
    sanity_ok = sanity is not None and sanity.status in _OK
    note = None
    if setup is not None:
        note = "device not available: " + str(setup.get("message", "")).strip()
    elif not sanity_ok:
        note = state.gated or ("sanity probe did not run" if sanity is None else f"sanity probe {sanity.status.value}")
    if state.notices:
        note = "; ".join([*(n for n in [note] if n), *state.notices])
    versions: dict[str, str] = dict(backend.get("versions") or {})
    versions.pop("torch", None)
    export = env.get("export")
    versions.update(export["versions"] if export else {})
    is_fake = backend.get("simulated", False) if simulated is None else simulated
    target_name = f"{export['target'].replace(':', '-')}-{export['kind']}" if export else None
    name = target_name or backend.get("name") or requested or "auto"
    return Run(
        schema_version=SCHEMA_VERSION,
        run_id=f"{name}-{started:%Y%m%dT%H%M%SZ}-{uuid.uuid4().hex[:6]}",
        started_at=started,
        finished_at=datetime.now(timezone.utc),
        anydevice=AnydeviceInfo(version=str(env.get("anydevice") or "unknown"), git_sha=_git_sha()),
        plugin=PluginInfo(
            name=str(backend.get("name") or requested or "auto"),
            version=backend.get("plugin_version"),
            vendor_package=backend.get("vendor_package"),
            vendor_version=backend.get("vendor_version"),
        ),
        env=EnvInfo(
            python=str(env.get("python") or platform.python_version()),
            torch=env.get("torch"),
            os=str(env.get("os") or platform.platform(terse=True)),
            runtimes=versions,
            packages={str(k): str(v) for k, v in dict(env.get("packages") or {}).items()},
        ),
        hardware=Hardware(
            device_type=str(backend.get("device_type") or requested or "unknown"),
            chip=backend.get("chip"),
            device_count=int(backend.get("count") or 0),
            memory_bytes=backend.get("memory_bytes"),
            simulated=bool(is_fake),
            evidence=backend.get("evidence"),
        ),
        invocation=Invocation(argv=list(argv), ANYDEVICE=requested, seed=seed, command=reproduce_command(requested, argv)),
        health=Health(sanity_passed=sanity_ok, device_available=setup is None, note=bounded(note, MAX_MESSAGE)),
        results=results,
        export=ExportTarget.model_validate(export) if export else None,
    )


def reproduce_command(anydevice_env: str | None, argv: Sequence[str]) -> str:
    """The one-line shell command that reruns a probe invocation."""
    prefix = f"ANYDEVICE={shlex.quote(anydevice_env)} " if anydevice_env else ""
    return prefix + shlex.join(["anydevice", "matrix", "probe", *argv])


def probe_command(run: Run, probe: str) -> str:
    """The command that reruns one probe of ``run`` the way it ran (on its device, or for its export target)."""
    target = ["--target", run.export.target] if run.export is not None else []
    return reproduce_command(run.invocation.ANYDEVICE or run.plugin.name, [*target, "--only", probe])


def _git_sha() -> str | None:
    here = Path(__file__).resolve().parent
    try:
        done = subprocess.run(
            ["git", "-C", str(here), "rev-parse", "--short=12", "HEAD"], capture_output=True, text=True, timeout=10
        )
    except (OSError, subprocess.SubprocessError):
        return None
    sha = done.stdout.strip()
    return sha if done.returncode == 0 and sha else None
