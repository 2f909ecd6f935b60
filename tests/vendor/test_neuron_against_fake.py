"""The neuron plugin against the FAKE torch-neuronx (tests/support/fake_torch_neuronx).

torch-neuronx is not installable here and there is no Trainium: these tests prove the plugin's
logic against a faithful fake of the documented surface, installed as a real distribution in a
temp dir on a subprocess's PYTHONPATH. Nothing here is verified on hardware.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from anydevice.contract import detect as d
from anydevice.contract.versions import PairCheck
from anydevice.plugins import neuron
from tests.support.fake_torch_neuronx import NATIVE, XLA_BASED, install
from tests.utils import anydevice_cli, python

pytestmark = pytest.mark.torch_version_sensitive  # docs/architecture.md, "Which tests the core lanes run"

# The fake registers its device the way native TorchNeuron does, through torch's python-backend
# registration (torch.utils.backend_registration._setup_privateuseone_for_python_backend), which torch
# 2.9 lacks; native TorchNeuron itself exists only for torch 2.13 and 2.14 (on 2.9 Neuron is XLA-based).
NATIVE_TORCH = d.major_minor(d.torch_version() or "0.0") >= neuron.NATIVE_SINCE
needs_native_torch = pytest.mark.skipif(
    not NATIVE_TORCH, reason=f"native TorchNeuron needs torch >= 2.10 (torch {d.torch_version()} here: Neuron is XLA-based)"
)


@pytest.fixture(scope="module")
def fake_native(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return install(tmp_path_factory.mktemp("fake-neuronx-native"), NATIVE)


@pytest.fixture(scope="module")
def fake_xla(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return install(tmp_path_factory.mktemp("fake-neuronx-xla"), XLA_BASED, "torch==2.9.*")


def _json(proc: object) -> dict[str, object]:
    assert proc.returncode == 0, proc.stderr  # type: ignore[attr-defined]
    return json.loads(proc.stdout.strip().splitlines()[-1])  # type: ignore[attr-defined, no-any-return]


def test_version_branch() -> None:
    assert neuron.is_native("2.14.0") and neuron.is_native("2.13.3.0") and neuron.is_native("2.15.1")
    assert not neuron.is_native(XLA_BASED) and not neuron.is_native("2.1.2.2.3.0")


def test_reasons_are_distinct() -> None:
    reasons = {
        neuron.classify(None, []).problem: neuron.classify(None, []).reason,
        neuron.classify(NATIVE, []).problem: neuron.classify(NATIVE, []).reason,
        neuron.classify(None, ["/dev/neuron0"]).problem: neuron.classify(None, ["/dev/neuron0"]).reason,
    }
    assert set(reasons) == {"package_and_hardware_missing", "no_hardware", "hardware_without_package"}
    assert "native TorchNeuron" in reasons["no_hardware"]
    mismatch = PairCheck(
        "torch-neuronx", XLA_BASED, "2.13.0", False, "torch-neuronx needs torch 2.9.x", "pip install torch==2.9.*"
    )
    assert neuron.classify(XLA_BASED, ["/dev/neuron0"], mismatch).problem == "version_mismatch"
    ok = neuron.classify(NATIVE, ["/dev/neuron0", "/dev/neuron1"])
    assert ok.available and ok.count == 2 and "native TorchNeuron" in ok.reason


def test_detection_reads_the_fake_metadata_without_importing_it(fake_native: Path, fake_xla: Path) -> None:
    code = (
        "import json, sys\nfrom anydevice.plugins import neuron\nr = neuron.detect()\n"
        "print(json.dumps({'reason': r.reason, 'problem': r.problem, 'imported': 'torch_neuronx' in sys.modules}))"
    )
    native = _json(python("-c", code, pythonpath=fake_native))
    assert native == {
        "reason": "torch-neuronx 2.14.0 (native TorchNeuron) installed, no Neuron device found (/dev/neuron*)",
        "problem": "no_hardware",
        "imported": False,
    }
    old = _json(python("-c", code, pythonpath=fake_xla))
    assert "XLA-based torch-neuronx (PJRT_DEVICE=NEURON)" in str(old["reason"]) and old["imported"] is False


LOAD_NATIVE = """
import json, os, sys, torch
from pathlib import Path
from anydevice.contract import detect as d
from anydevice.plugins import neuron
neuron.prepare_environment()
shims = neuron.load()
import torch_neuronx, torch._dynamo
shims.placement.synchronize()
shims.placement.set_device(0)
mem = shims.placement.memory_stats()
print(json.dumps({
    "fake": torch_neuronx.FAKE,
    "device": str(shims.placement.device()),
    "count": shims.placement.device_count(),
    "compile_backend": shims.compilation.backend,
    "compile_backend_registered": "neuron" in torch._dynamo.list_backends(),
    "cache_dir": str(shims.compilation.cache_dir()),
    "neff_env": os.environ.get("TORCH_NEURONX_NEFF_CACHE_DIR"),
    "dist_backend": shims.collectives.backend,
    "init_method": shims.collectives.init_method,
    "launch_env": neuron.LAUNCH.rank_env(3, 4),
    "rank_env": {k: os.environ.get(k) for k in ("NEURON_RT_VISIBLE_CORES", "NEURON_RT_NUM_CORES")},
    "calls": torch_neuronx.calls,
    "memory": dict(mem),
    "profiler_config": type(neuron._profiler_config(Path("."))).__qualname__,
    "autocast": str(shims.placement.autocast_dtype()),
    "peak": shims.profiling.peak_flops(torch.bfloat16),
    "versions": shims.versions,
}))
"""


@needs_native_torch
def test_native_load_uses_the_documented_calls(fake_native: Path, tmp_path: Path) -> None:
    env = {"ANYDEVICE_CACHE_DIR": str(tmp_path), "LOCAL_RANK": "1", "LOCAL_WORLD_SIZE": "2", "FAKE_NEURON_CORES": "2"}
    out = _json(python("-c", LOAD_NATIVE, pythonpath=fake_native, env=env))
    assert out["fake"] is True  # proof these results come from the fake, not hardware
    assert out["device"] == "neuron:1" and out["count"] == 2
    assert out["compile_backend"] == "neuron" and out["compile_backend_registered"] is True
    assert out["neff_env"] == str(tmp_path / "neuron-neff")
    assert out["dist_backend"] == "neuron" and out["init_method"] == "env://"
    assert out["launch_env"] == {"NEURON_RT_VISIBLE_CORES": "3", "NEURON_RT_NUM_CORES": "1"}
    assert out["rank_env"] == {"NEURON_RT_VISIBLE_CORES": "1", "NEURON_RT_NUM_CORES": "1"}  # set before import
    assert out["calls"] == {"synchronize": 1, "set_device": 1, "memory_stats": 1}  # torch.neuron.*, torch_neuronx.memory_stats
    memory: dict[str, int] = out["memory"]  # type: ignore[assignment]  # the simulated allocator's live counters
    assert set(memory) == {"allocated_bytes", "reserved_bytes", "peak_allocated_bytes"}
    assert 0 <= memory["allocated_bytes"] <= memory["peak_allocated_bytes"]
    assert out["profiler_config"] == "NeuronConfig"
    assert out["autocast"] == "torch.bfloat16"
    assert out["peak"] is None  # chip unknown without the runtime: MFU unknown, never guessed
    assert out["versions"]["torch-neuronx"] == NATIVE


def test_user_set_core_variables_win(fake_native: Path, tmp_path: Path) -> None:
    env = {
        "ANYDEVICE_CACHE_DIR": str(tmp_path),
        "LOCAL_RANK": "1",
        "WORLD_SIZE": "2",
        "NEURON_RT_VISIBLE_CORES": "4-5",
        "NEURON_RT_NUM_CORES": "2",
        "TORCH_NEURONX_NEFF_CACHE_DIR": str(tmp_path / "mine"),
    }
    code = (
        "import json, os\nfrom anydevice.plugins import neuron\nneuron.prepare_environment()\n"
        "print(json.dumps({k: os.environ.get(k) for k in "
        "('NEURON_RT_VISIBLE_CORES', 'NEURON_RT_NUM_CORES', 'TORCH_NEURONX_NEFF_CACHE_DIR', 'PJRT_DEVICE')}))"
    )
    out = _json(python("-c", code, pythonpath=fake_native, env=env))
    assert out == {
        "NEURON_RT_VISIBLE_CORES": "4-5",
        "NEURON_RT_NUM_CORES": "2",
        "TORCH_NEURONX_NEFF_CACHE_DIR": str(tmp_path / "mine"),
        "PJRT_DEVICE": None,
    }


def test_xla_based_prepares_pjrt_and_the_compiler_cache(fake_xla: Path, tmp_path: Path) -> None:
    code = (
        "import json, os\nfrom anydevice.plugins import neuron\nneuron.prepare_environment()\n"
        "print(json.dumps({k: os.environ.get(k) for k in ('PJRT_DEVICE', 'NEURON_CC_FLAGS', 'TORCH_NEURONX_NEFF_CACHE_DIR')}))"
    )
    env = {"ANYDEVICE_CACHE_DIR": str(tmp_path), "NEURON_CC_FLAGS": "--model-type=transformer"}
    out = _json(python("-c", code, pythonpath=fake_xla, env=env))
    assert out == {
        "PJRT_DEVICE": "NEURON",
        "NEURON_CC_FLAGS": f"--model-type=transformer --cache_dir={tmp_path / 'neuron-cc'}",
        "TORCH_NEURONX_NEFF_CACHE_DIR": None,
    }


@needs_native_torch
def test_cli_keeps_autoload_from_importing_the_fake_for_cpu(fake_native: Path) -> None:
    plain = _json(
        python(
            "-c",
            "import json, sys, torch; print(json.dumps({'imported': 'torch_neuronx' in sys.modules}))",
            pythonpath=fake_native,
        )
    )
    assert plain["imported"] is True  # torch's backend autoload imports it in an uncontrolled process
    proc = anydevice_cli("info", "--json", pythonpath=fake_native, env={"ANYDEVICE": "cpu"})
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["imported_vendor_modules"] == []


def test_list_marks_neuron_not_verified_with_the_fake_installed(fake_native: Path) -> None:
    proc = anydevice_cli("list", pythonpath=fake_native)
    line = next(line for line in proc.stdout.splitlines() if line.startswith("neuron"))
    assert "native TorchNeuron" in line and "[not verified on hardware: ran on a stand-in, not the chip]" in line


DEVICE_MEMORY = """
import json, torch, torch_neuronx
x = torch.arange(12, dtype=torch.float32).reshape(3, 4)
on = x.to("neuron")
back = on.t().contiguous().cpu()  # neuron -> neuron view copy -> cpu
z = torch.randn(4, 4, dtype=torch.complex64)
torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Linear(4, 16), torch.nn.ReLU(), torch.nn.Linear(16, 1)).to("neuron")
opt = torch.optim.Adam(model.parameters(), lr=0.05)
data, target = torch.randn(64, 4).to("neuron"), torch.randn(64, 1).to("neuron")
losses = []
for _ in range(30):
    loss = torch.nn.functional.mse_loss(model(data), target)
    opt.zero_grad(); loss.backward(); opt.step()
    losses.append(loss.item())
before = torch_neuronx.memory_stats()["allocated_bytes"]
big = torch.empty(1 << 20, device="neuron")
grew = torch_neuronx.memory_stats()["allocated_bytes"] - before
print(json.dumps({
    "device": str(on.device), "round_trip": torch.equal(on.cpu(), x), "view_copy": torch.equal(back, x.t()),
    "complex": torch.allclose((z.to("neuron") * z.to("neuron").conj()).cpu(), z * z.conj()),
    "param_device": str(next(model.parameters()).device), "grad_device": str(model[0].weight.grad.device),
    "first": losses[0], "last": losses[-1], "grew": grew,
}), flush=True)
# Past torch's C++ teardown: on torch 2.15 the autograd engine's thread for the device ("pt_autograd_0") is still
# alive at exit, and once under a cold run's load that teardown aborted ("terminate called without an active
# exception") after this line was printed. The device's behaviour is what this test checks; the exit is torch's.
import os; os._exit(0)
"""


@needs_native_torch
def test_simulated_device_holds_tensors_and_trains(fake_native: Path) -> None:
    out = _json(python("-c", DEVICE_MEMORY, pythonpath=fake_native))
    assert out["device"] == "neuron:0" and out["round_trip"] is True and out["view_copy"] is True
    assert out["complex"] is True  # conj views copy through the host memory without materialising
    assert out["param_device"] == "neuron:0" and out["grad_device"] == "neuron:0"
    assert float(str(out["last"])) < float(str(out["first"])) * 0.8  # a tiny model learns on the simulated device
    assert out["grew"] == 4 << 20  # the allocator's counters see a 4 MiB allocation
