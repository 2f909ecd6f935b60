"""Each benchmark script runs end to end with tiny settings and writes a well-formed result.

Speed is never asserted here (benchmarks/README.md): only that the scripts work and that what
they write has the fields docs/benchmarks.md and benchmarks/plot.py read.
"""

from __future__ import annotations

import importlib.util
import json
import math
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
BENCH = ROOT / "benchmarks"
sys.path.insert(0, str(BENCH))
import rotate  # noqa: E402


def run(script: str, *args: str, env: dict[str, str] | None = None, timeout: int = 900) -> subprocess.CompletedProcess[str]:
    full = {**os.environ, "ANYDEVICE": "cpu", "ANYDEVICE_QUIET": "1", **(env or {})}
    out = subprocess.run(
        [sys.executable, str(BENCH / script), *args], capture_output=True, text=True, env=full, timeout=timeout, cwd=ROOT
    )
    assert out.returncode == 0, out.stderr[-4000:]
    return out


def finite_positive(x: float) -> bool:
    return math.isfinite(x) and x > 0


def test_rotate_rotates_the_order_each_round_and_pairs_ratios() -> None:
    calls: list[str] = []

    def variant(name: str, value: float):  # type: ignore[no-untyped-def]
        def call() -> float:
            calls.append(name)
            return value

        return call

    samples = rotate.rotate({"a": variant("a", 2.0), "b": variant("b", 3.0), "c": variant("c", 4.0)}, 3, log=False)
    assert calls == ["a", "b", "c", "b", "c", "a", "c", "a", "b"]
    ratios = rotate.ratios(samples, "a")
    assert ratios["b"]["median"] == pytest.approx(1.5) and ratios["a"]["max"] == 1.0
    s = rotate.spread([1.0, 2.0, 3.0, 4.0, 100.0])
    assert (s["median"], s["min"], s["max"]) == (3.0, 1.0, 100.0)


def test_step_overhead_runs_every_installed_way(tmp_path: Path) -> None:
    out = tmp_path / "step.json"
    run("step_overhead.py", "--steps", "1", "--rounds", "2", "--warmup", "1", "--discard", "0", "--no-compile", "--out", str(out))
    result = json.loads(out.read_text())
    eager = result["ratio_to_raw"]["eager"]
    expected = {"raw torch [eager]", "raw torch (control) [eager]", "anydevice [eager]"}
    for peer, module in (("accelerate", "accelerate"), ("fabric", "lightning_fabric")):
        if importlib.util.find_spec(module) is None:
            assert peer in result["skipped"]
        else:
            expected.add(f"{peer} [eager]")
    assert set(eager) == expected
    # each ratio is paired per round against raw torch's time in that round: with two rounds the
    # product of the two per-round ratios (min * max) is the product of the variant's two times over
    # the product of raw torch's two, whatever the pairing (the file keeps only each one's spread)
    times = result["s_per_step"]
    raw = times["raw torch [eager]"]
    for name, ratio in eager.items():
        t = times[name]
        assert all(finite_positive(t[k]) for k in ("min", "max")) and finite_positive(ratio["median"])
        assert ratio["min"] * ratio["max"] == pytest.approx(t["min"] * t["max"] / (raw["min"] * raw["max"]), rel=1e-9)
        assert ratio["median"] == pytest.approx((ratio["min"] + ratio["max"]) / 2)
    assert result["rounds"] == 2 and "loadavg_1_5_15" in result["machine"]
    assert set(result["per_call_us"]) >= {"ad.step", "StepMeter.step"}


@pytest.mark.slow
def test_import_time_discovers_the_dummy_plugins(tmp_path: Path) -> None:
    out = tmp_path / "import.json"
    run("import_time.py", "--rounds", "1", "--plugins", "3", "--out", str(out))
    result = json.loads(out.read_text())
    assert result["plugin_failures_with_dummies"] == 0
    assert result["devices_registered_with_dummies"] >= 4  # cpu plus the three dummies at least
    seconds = result["seconds"]
    assert {"import anydevice", "select cpu (first ad.device())", "discover +3 plugins", "select cpu with +3 plugins"} <= set(
        seconds
    )
    assert all(finite_positive(s["median"]) for name, s in seconds.items() if name != "python")


@pytest.mark.slow
@pytest.mark.long("launches a 2-rank job with torchrun and with anydevice run, in rounds")
def test_launch_overhead_runs_both_launchers(tmp_path: Path) -> None:
    out = tmp_path / "launch.json"
    run("launch_overhead.py", "--steps", "3", "--rounds", "1", "--out", str(out))
    result = json.loads(out.read_text())
    assert set(result["summary"]) == {"torchrun", "anydevice run"}
    for summary in result["summary"].values():
        assert finite_positive(summary["tokens_per_s_per_rank"]["median"])
        assert 0 < summary["group_up_s"]["median"] <= summary["first_step_done_s"]["median"] <= summary["wall_s"]["median"]
    losses = result["last_losses"]
    assert losses["torchrun"] == pytest.approx(losses["anydevice run"], abs=1e-5)  # same script, same data
    # plain torchrun's ranks may abort in torch's teardown at exit (counted, kept); anydevice run's never do
    assert result["aborted_at_exit"]["anydevice run"] == 0


def test_presets_records_the_main_jobs_json(tmp_path: Path) -> None:
    out = tmp_path / "presets.json"
    run("presets.py", "--steps", "2", "--out", str(out))
    result = json.loads(out.read_text())
    tiny = result["presets"]["tiny"]
    assert finite_positive(tiny["tokens_per_s"]) and tiny["steps"] == 2
    assert "mfu" in tiny
    for name in ("125m", "1b", "8b"):
        assert "skipped" in result["presets"][name]  # cpu: the large presets need an accelerator


def test_checkpoint_load_times_the_crc_check_beside_torch_load(tmp_path: Path) -> None:
    out = tmp_path / "checkpoint_load.json"
    run("checkpoint_load.py", "--megabytes", "2", "--rounds", "2", "--out", str(out))
    result = json.loads(out.read_text())
    assert result["file_bytes"] > 2_000_000
    assert set(result["seconds"]) == {"torch.load", "ad.load", "CRC-32 check alone"}
    assert all(finite_positive(s["median"]) for s in result["seconds"].values())
    assert result["ratio_to_torch_load"]["torch.load"]["median"] == 1.0


def test_plot_draws_the_committed_results(tmp_path: Path) -> None:
    pytest.importorskip("matplotlib", reason="matplotlib is in requirements/bench.txt, not in this lane")
    out = tmp_path / "plot.png"
    run("plot.py", "--out", str(out))
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


@pytest.mark.xla
def test_xla_overhead_runs_raw_and_anydevice(tmp_path: Path) -> None:
    pytest.importorskip("torch_xla")
    out = tmp_path / "xla.json"
    run("xla_overhead.py", "--steps", "1", "--rounds", "1", "--warmup", "2", "--discard", "0", "--no-compile", "--out", str(out),
        env={"ANYDEVICE": "xla", "PJRT_DEVICE": "CPU"})  # fmt: skip
    result = json.loads(out.read_text())
    eager = result["ratio_to_raw"]["eager"]
    assert set(eager) == {"raw torch_xla [eager]", "raw torch_xla (control) [eager]", "anydevice [eager]"}
    assert all(finite_positive(r["median"]) for r in eager.values())


def test_cuda_compat_overhead_runs(tmp_path: Path) -> None:
    out = tmp_path / "cc.json"
    run("cuda_compat_overhead.py", "--steps", "1", "--rounds", "2", "--warmup", "1", "--discard", "0", "--out", str(out))
    result = json.loads(out.read_text())
    assert set(result["ratio_to_hand_port"]) == {"hand port [eager]", "hand port (control) [eager]", "cuda-compat [eager]"}
    assert all(finite_positive(r["median"]) for r in result["ratio_to_hand_port"].values())
    assert all(finite_positive(us) for us in result["per_call_us"].values())


def _check_parallelize_overhead(out: Path, lowering: str, tp: int) -> None:
    result = json.loads(out.read_text())
    assert result["lowering"] == lowering and result["mesh"] == {"tp": tp}
    assert set(result["ratio_to_hand"]) == {"hand", "anydevice", "hand (control)"}
    assert all(finite_positive(r["median"]) for r in result["ratio_to_hand"].values())
    per_rank = result["param_bytes_per_rank"]
    assert per_rank["anydevice"] == per_rank["hand"]  # the same split
    assert per_rank["anydevice"] < result["param_bytes_unsplit"] / tp * 1.01  # about 1/tp of the unsplit model


@pytest.mark.slow
def test_parallelize_overhead_runs_on_two_gloo_processes(tmp_path: Path) -> None:
    out = tmp_path / "par.json"
    run("parallelize_overhead.py", "--steps", "1", "--rounds", "1", "--out", str(out))
    _check_parallelize_overhead(out, "dtensor", 2)


@pytest.mark.xla
def test_parallelize_overhead_runs_on_xla_spmd(tmp_path: Path) -> None:
    pytest.importorskip("torch_xla")
    out = tmp_path / "par.json"
    run("parallelize_overhead.py", "--steps", "1", "--rounds", "1", "--out", str(out),
        env={"ANYDEVICE": "xla", "PJRT_DEVICE": "CPU", "CPU_NUM_DEVICES": "4"})  # fmt: skip
    _check_parallelize_overhead(out, "spmd", 4)
