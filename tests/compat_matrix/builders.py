"""Build valid result files for tests (and regenerate the committed fixtures: ``python -m tests.compat_matrix.builders``)."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

from anydevice.compat_matrix.claims import SUPPORTED
from anydevice.compat_matrix.schema import (
    SCHEMA_VERSION,
    AnydeviceInfo,
    Claim,
    EnvInfo,
    Hardware,
    Health,
    Invocation,
    Numerics,
    PluginInfo,
    ProbeResult,
    Run,
    Stage,
    Status,
    dump_run,
)

FIXTURES = Path(__file__).parent / "fixtures"
BASE = datetime(2026, 3, 1, 12, 0, 0, tzinfo=timezone.utc)


def result(probe: str, status: Status = Status.PASS, shim: str = "ops", **kw: Any) -> ProbeResult:
    """A probe result; a failure gets a stage and reason unless given."""
    if status is Status.FAIL:
        kw.setdefault("failure_stage", Stage.EXECUTE)
        kw.setdefault("reason", "RuntimeError at execute: boom")
        kw.setdefault("message", "RuntimeError: boom")
        kw.setdefault("exception_type", "RuntimeError")
    elif status in (Status.SKIP, Status.UNTESTED, Status.HARNESS_ERROR, Status.PARTIAL):
        kw.setdefault("reason", f"{status.value} for a reason")
    return ProbeResult(probe=probe, shim=shim, status=status, description=kw.pop("description", f"{probe} check"), **kw)


def run(
    results: list[ProbeResult],
    *,
    plugin: str = "cpu",
    chip: str | None = "Test CPU",
    torch: str = "2.13.0",
    vendor: tuple[str, str] | None = None,
    day: int = 0,
    run_id: str | None = None,
    sanity: bool = True,
    available: bool = True,
    simulated: bool = False,
    note: str | None = None,
) -> Run:
    """A run with a fixed environment; ``day`` shifts its date."""
    started = BASE + timedelta(days=day)
    return Run(
        schema_version=SCHEMA_VERSION,
        run_id=run_id or f"{plugin}-{started:%Y%m%dT%H%M%SZ}",
        started_at=started,
        finished_at=started + timedelta(seconds=42),
        anydevice=AnydeviceInfo(version="0.1.0", git_sha="abc123def456"),
        plugin=PluginInfo(
            name=plugin,
            version="0.1.0",
            vendor_package=vendor[0] if vendor else None,
            vendor_version=vendor[1] if vendor else None,
        ),
        env=EnvInfo(python="3.11.7", torch=torch, os="Linux-6.1-x86_64", runtimes={}),
        hardware=Hardware(device_type=plugin, chip=chip, device_count=1 if available else 0, simulated=simulated),
        invocation=Invocation(
            argv=["--out", f"{plugin}.json"],
            ANYDEVICE=plugin,
            command=f"ANYDEVICE={plugin} anydevice matrix probe --out {plugin}.json",
        ),
        health=Health(sanity_passed=sanity, device_available=available, note=note),
        results=results,
    )


def _common(**overrides: Status) -> list[ProbeResult]:
    statuses = {
        "sanity": Status.PASS,
        "matmul": Status.PASS,
        "conv2d": Status.PASS,
        "sdpa": Status.FAIL,
        "all_reduce": Status.PASS,
    }
    statuses.update(overrides)
    shims = {"sanity": "sanity", "all_reduce": "collectives"}
    out = []
    for name, status in statuses.items():
        extra: dict[str, Any] = {}
        if name == "matmul" and status is Status.PASS:
            extra = {"numerics": Numerics(max_abs_err=1.5e-6, atol=1e-4, rtol=1e-4), "log": "matmul ok\n", "duration_s": 0.01}
        out.append(result(name, status, shims.get(name, "ops"), **extra))
    return out


def fixture_runs() -> dict[str, Run]:
    """The committed fixture set: versions, a disagreement, a diff, unhealthy, unavailable, fake, hostile text."""
    evil = "<script>alert('x')</script> | *bold* `tick` & </details>"
    return {
        "cpu-old.json": run(_common(sdpa=Status.PASS, conv2d=Status.FAIL), torch="2.12.0", day=0),
        "cpu-new.json": run(_common(), day=7),
        "cpu-other-machine.json": run(_common(matmul=Status.FALLBACK), day=7, run_id="cpu-machine2"),
        "xla-unhealthy.json": run(
            [result("sanity", Status.FAIL, "sanity", failure_stage=Stage.COMPARE, reason="mismatch vs CPU")]
            + [result(n, Status.UNTESTED, reason="not run: sanity probe fail") for n in ("matmul", "conv2d")],
            plugin="xla",
            chip="CPU (PJRT)",
            torch="2.9.0",
            vendor=("torch_xla", "2.9.0"),
            day=3,
            sanity=False,
            note="sanity probe fail: mismatch vs CPU",
        ),
        "tpu-nochip.json": run(
            [result(n, Status.SKIP, reason="device not available: no TPU chip was found") for n in ("sanity", "matmul")],
            plugin="tpu",
            chip=None,
            vendor=("torch_tpu", "0.2.0"),
            day=4,
            sanity=False,
            available=False,
            note="device not available: no TPU chip was found",
        ),
        "neuron-fake.json": run(
            [result("sanity", Status.FAKE, "sanity"), result("matmul", Status.FAKE), result("conv2d", Status.PARTIAL)],
            plugin="neuron",
            chip="trn1 (simulated)",
            vendor=("torch-neuronx", "2.9.0"),
            day=5,
            simulated=True,
        ),
        "hostile.json": run(
            [
                result("sanity", Status.PASS, "sanity"),
                result("matmul", Status.FAIL, message=evil, reason=evil, log=evil + "\n" + evil, description=evil),
            ],
            plugin="cuda",
            chip=evil,
            day=6,
        ),
        "mps-claims.json": claims_run(),
    }


def claims_run() -> Run:
    """An mps run with claims: declared unsupported and failing, declared unsupported and passing, supported and failing."""
    unsupported = Claim(supported=False, reason="FSDP2 is not offered on mps.")
    pinned = Claim(supported=False, reason="pinned memory is not offered on mps.")
    return run(
        [
            result("sanity", Status.PASS, "sanity", expected=SUPPORTED),
            result("fsdp_step", Status.FAIL, "collectives", failure_stage=Stage.PLACE, expected=unsupported),
            result("pin_memory", Status.PASS, "placement", expected=pinned),
            result("sdpa", Status.FAIL, expected=SUPPORTED),
            result("conv2d", Status.PASS, expected=SUPPORTED),
        ],
        plugin="mps",
        chip="Apple M3",
        day=2,
    )


def write_fixtures(directory: Path = FIXTURES) -> None:
    """(Re)write the committed fixture files, plus one malformed file."""
    directory.mkdir(parents=True, exist_ok=True)
    for name, value in fixture_runs().items():
        dump_run(value, directory / name)
    (directory / "malformed.json").write_text('{"schema_version": 1, "run_id": "truncated', encoding="utf-8")


if __name__ == "__main__":
    write_fixtures()
