"""``anydevice doctor`` against real environments: healthy here, broken by real variables, venvs and plugins."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Mapping
from pathlib import Path

import pytest

from anydevice.cli.doctor import Check, disk_check, render
from anydevice.plugins.cuda import hides_every_gpu
from tests.utils import REPO, child_env

pytestmark = pytest.mark.torch_version_sensitive  # docs/architecture.md, "Which tests the core lanes run"

# Variables doctor judges: each test starts without them and sets the ones it breaks.
JUDGED = (
    "PJRT_DEVICE",
    "CUDA_VISIBLE_DEVICES",
    "TORCH_DEVICE_BACKEND_AUTOLOAD",
    "NEURON_RT_VISIBLE_CORES",
    "NEURON_RT_NUM_CORES",
    "CXX",
    "ANYDEVICE_KEEP_AUTOLOAD",
)


def doctor(
    *args: str, env: Mapping[str, str] | None = None, python: str = sys.executable, pythonpath: Path | None = None
) -> subprocess.CompletedProcess[str]:
    """Run ``python -m anydevice doctor`` for real, in a clean environment plus ``env``."""
    base = {k: v for k, v in child_env(pythonpath=pythonpath).items() if k not in JUDGED}
    return subprocess.run(
        [python, "-m", "anydevice", "doctor", *args],
        env={**base, **(env or {})},
        capture_output=True,
        text=True,
        timeout=300,
        cwd=REPO,
    )


def line(out: subprocess.CompletedProcess[str], name: str) -> str:
    """The report's line for check ``name``."""
    found = [ln for ln in out.stdout.splitlines() if ln[6:].split("  ", 1)[0].strip() == name]
    assert found, f"no line for {name!r} in:\n{out.stdout}"
    return found[0]


def test_the_main_lane_is_healthy() -> None:
    out = doctor()
    assert out.returncode == 0, out.stdout + out.stderr
    assert out.stdout.rstrip().endswith("healthy")
    assert line(out, "selection").startswith("ok") and "selects cpu" in line(out, "selection")
    for name in ("torch", "device cpu", "settings", "C++ compiler", "compile cache"):
        assert line(out, name).startswith("ok")


def test_json_for_tools_and_nothing_heavy_imported() -> None:
    out = doctor("--json")
    data = json.loads(out.stdout)
    assert out.returncode == 0 and data["healthy"] is True and data["problems"] == 0
    assert {"name", "status", "message", "fix"} <= set(data["checks"][0])
    assert data["imported"] == []  # neither torch nor a vendor library was imported to diagnose


def test_pjrt_device_against_anydevice_fails_with_the_fix() -> None:
    out = doctor(env={"ANYDEVICE": "cpu", "PJRT_DEVICE": "TPU"})
    assert out.returncode == 1
    assert line(out, "PJRT_DEVICE").startswith("FAIL")
    fix = "fix: unset PJRT_DEVICE, or run on TPU through torch_xla with ANYDEVICE=xla PJRT_DEVICE=TPU"
    assert fix in line(out, "PJRT_DEVICE")


def test_pjrt_device_against_what_auto_picked_warns() -> None:
    out = doctor(env={"PJRT_DEVICE": "TPU"})
    assert out.returncode == 0 and line(out, "PJRT_DEVICE").startswith("WARN")
    assert "but ANYDEVICE=auto picked cpu" in line(out, "PJRT_DEVICE")


def test_pjrt_device_that_agrees_is_fine() -> None:
    out = doctor(env={"ANYDEVICE": "cpu", "PJRT_DEVICE": "CPU"})
    assert out.returncode == 0 and line(out, "PJRT_DEVICE").startswith("ok")


def test_cuda_visible_devices_hiding_every_gpu() -> None:
    asked = doctor(env={"ANYDEVICE": "cuda", "CUDA_VISIBLE_DEVICES": ""})
    assert asked.returncode == 1
    assert "hides every GPU" in line(asked, "CUDA_VISIBLE_DEVICES") and line(asked, "CUDA_VISIBLE_DEVICES").startswith("FAIL")
    assert "fix: unset CUDA_VISIBLE_DEVICES, or list the GPUs to use" in line(asked, "CUDA_VISIBLE_DEVICES")
    not_asked = doctor(env={"CUDA_VISIBLE_DEVICES": "-1"})  # auto on a machine with no GPU: only a note
    assert not_asked.returncode == 0 and "hides every GPU" in line(not_asked, "CUDA_VISIBLE_DEVICES")


def test_autoload_values_torch_does_not_understand_warn() -> None:
    out = doctor(env={"TORCH_DEVICE_BACKEND_AUTOLOAD": "true"})
    text = line(out, "TORCH_DEVICE_BACKEND_AUTOLOAD")
    assert out.returncode == 0 and text.startswith("WARN") and "every value but '1' as off" in text
    assert doctor("--strict", env={"TORCH_DEVICE_BACKEND_AUTOLOAD": "true"}).returncode == 1


@pytest.mark.parametrize(
    ("cores", "num", "fix"),
    [
        ("0-3", "2", "set NEURON_RT_NUM_CORES=4"),
        ("zero", None, "write cores as 0, 0-3 or 0,2"),
        ("3-1", None, "write it as 1-3"),
    ],
)
def test_neuron_visible_cores_that_cannot_work(cores: str, num: str | None, fix: str) -> None:
    env = {"NEURON_RT_VISIBLE_CORES": cores, **({"NEURON_RT_NUM_CORES": num} if num else {})}
    out = doctor(env=env)
    assert out.returncode == 1 and line(out, "NEURON_RT_VISIBLE_CORES").startswith("FAIL")
    assert fix in line(out, "NEURON_RT_VISIBLE_CORES")


def test_neuron_visible_cores_that_agree() -> None:
    out = doctor(env={"NEURON_RT_VISIBLE_CORES": "0,2-3", "NEURON_RT_NUM_CORES": "3"})
    assert out.returncode == 0 and "3 NeuronCore(s)" in line(out, "NEURON_RT_VISIBLE_CORES")


def test_a_missing_cpp_compiler_fails(tmp_path: Path) -> None:
    out = doctor(env={"CXX": str(tmp_path / "no-such-g++")})
    assert out.returncode == 1 and line(out, "C++ compiler").startswith("FAIL")
    assert "fix: install a C++ compiler" in line(out, "C++ compiler")


def test_an_unwritable_cache_dir_fails(tmp_path: Path) -> None:
    blocker = tmp_path / "a-file"
    blocker.write_text("not a directory")
    out = doctor(env={"ANYDEVICE_CACHE_DIR": str(blocker / "cache")})
    assert out.returncode == 1 and line(out, "compile cache").startswith("FAIL")
    assert "fix: point ANYDEVICE_CACHE_DIR at a writable directory" in line(out, "compile cache")


def test_free_disk_thresholds(tmp_path: Path) -> None:
    assert disk_check(tmp_path, 512 * 2**20).status == "fail"
    assert disk_check(tmp_path, 3 * 2**30).status == "warn"
    assert disk_check(tmp_path, 50 * 2**30).status == "ok"
    assert "fix" not in render([disk_check(tmp_path, 50 * 2**30)])


def test_a_typo_in_anydevice_fails_the_selection() -> None:
    out = doctor(env={"ANYDEVICE": "cpuu"})
    assert out.returncode == 1 and "Did you mean 'cpu'?" in line(out, "selection")


def test_broken_plugins_fail_and_say_how_to_exclude_them(plugin_site: Path) -> None:
    out = doctor(pythonpath=plugin_site)
    assert out.returncode == 1
    broken = line(out, "plugin broken_import")
    assert broken.startswith("FAIL") and "ANYDEVICE_PLUGINS" in broken
    assert line(out, "device toy").startswith("ok") and "ToyChip-1" in line(out, "device toy")
    fixed = doctor(env={"ANYDEVICE_PLUGINS": "cpu,toy"}, pythonpath=plugin_site)  # the fix it gives, applied
    assert fixed.returncode == 0, fixed.stdout


def test_gpu_visibility_parsing() -> None:
    assert hides_every_gpu("") and hides_every_gpu("-1") and hides_every_gpu("none") and hides_every_gpu("-1,0")
    assert hides_every_gpu("NoDevFiles")  # what Slurm sets when a job has no GPU
    assert not hides_every_gpu("0") and not hides_every_gpu("1,0") and not hides_every_gpu("GPU-5c2a")


def test_each_problem_is_one_line_with_its_fix() -> None:
    text = render([Check("a", "ok", "fine"), Check("b", "fail", "broken", "do this")])
    assert text.splitlines() == [
        "ok    a  fine",
        "FAIL  b  broken  -> fix: do this",
        "1 problem(s), 0 warning(s): apply the fixes above and run `anydevice doctor` again",
    ]


@pytest.mark.slow
@pytest.mark.long("builds the mismatch venv (torch 2.13 + torch_xla 2.9, ~3 GB) on its first run")
def test_a_venv_with_mismatched_torch_and_torch_xla_fails_with_the_exact_fix() -> None:
    """requirements/mismatch.txt: torch 2.13 with torch_xla 2.9, built (once, then reused) by scripts/venv."""
    venv = subprocess.run([str(REPO / "scripts" / "venv"), "mismatch"], capture_output=True, text=True, timeout=900, check=True)
    python = str(Path(venv.stdout.strip()) / "bin" / "python")
    out = doctor(python=python)
    assert out.returncode == 1, out.stdout + out.stderr
    torch_xla = line(out, "torch_xla")
    assert torch_xla.startswith("FAIL")
    assert "torch_xla 2.9.0 needs torch 2.9.x but torch 2.13.0" in torch_xla
    assert torch_xla.endswith("fix: pip install torch==2.9.* torch_xla==2.9.0  (or the torch_xla built for torch 2.13)")
    data = json.loads(doctor("--json", python=python).stdout)
    assert data["healthy"] is False and data["imported"] == []  # found before importing (it would crash)


@pytest.mark.tpu_lane
def test_torch_tpu_import_cost_when_tpu_is_not_selected() -> None:
    """In the TPU lane (real torch_tpu, no chip): autoload would import it into every CPU run."""
    out = doctor(env={"ANYDEVICE": "cpu"})
    cost = line(out, "import cost torch_tpu")
    assert out.returncode == 0 and cost.startswith("WARN")
    assert "fix: export TORCH_DEVICE_BACKEND_AUTOLOAD=0" in cost
    assert doctor("--strict", env={"ANYDEVICE": "cpu"}).returncode == 1
    off = doctor(env={"ANYDEVICE": "cpu", "TORCH_DEVICE_BACKEND_AUTOLOAD": "0"})
    assert off.returncode == 0 and line(off, "import cost torch_tpu").startswith("ok")
    assert json.loads(doctor("--json").stdout)["imported"] == []


@pytest.mark.tpu_lane
@pytest.mark.slow
def test_measuring_the_import_cost_shows_progress_and_numbers() -> None:
    out = doctor("--measure-imports", env={"ANYDEVICE": "cpu"})
    assert "measuring `import torch` [4/4]" in out.stderr  # a long command shows progress (plain lines: not a tty)
    assert "s with autoload," in line(out, "import cost torch_tpu")


def test_every_diagnosis_has_one_shape() -> None:
    """Issue 14: an unavailable named device gave `-> fix: Fix: ...` and an unindented continuation line."""
    out = doctor(env={"ANYDEVICE": "tpu"})
    report = out.stdout.splitlines()
    for text in report[:-1]:
        assert text[:6] in ("ok    ", "--    ", "WARN  ", "FAIL  "), text
        assert "fix: Fix:" not in text and text.count("-> fix:") <= 1, text
    selection = line(out, "selection")
    assert selection.startswith("FAIL") and "Available here:" in selection and "-> fix: pip install" in selection


def test_plugins_judge_their_own_settings_through_the_hook() -> None:
    """PJRT_DEVICE, CUDA_VISIBLE_DEVICES and NEURON_RT_VISIBLE_CORES are judged by the xla, cuda and neuron plugins."""
    from anydevice.contract.diagnosis import DoctorContext
    from anydevice.runtime.registry import Registry

    registry = Registry()
    registry.load()
    impls = {impl.plugin_name for impl in registry.pm.hook.anydevice_doctor_checks.get_hookimpls()}
    assert {"xla", "cuda", "neuron"} <= impls
    out = doctor(env={"ANYDEVICE_PLUGINS": "cpu", "PJRT_DEVICE": "TPU"})  # without the xla plugin nobody judges it
    assert not [ln for ln in out.stdout.splitlines() if ln[6:].startswith("PJRT_DEVICE")]
    assert DoctorContext(registry, "cpu", ["cpu"]).concerns("cpu")
