"""On ``xla`` (PJRT CPU): cuda-compat, ``ad.device_module()``, ``ad.generator()`` and the recompile warning.

Real torch_xla in subprocesses, as a user runs them. The CUDA-only tutorial runs unmodified under
``anydevice run --cuda-compat`` and its losses equal the script edited by hand for torch_xla. The
word-LM pattern (the whole dataset on the device, sliced at a moving offset each step) triggers the
recompile warning; the same model fed fixed-shape batches, and the main job, do not.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.utils import REPO, TRAIN, child_env

pytestmark = pytest.mark.xla
pytest.importorskip("torch_xla")

SCRIPTS = REPO / "tests" / "cuda_compat" / "scripts"
WORD_LM = """
import torch
import anydevice as ad

ad.manual_seed(0)
ON_DEVICE = {on_device}
data = torch.randint(0, 50, (2000,))
if ON_DEVICE:
    data = data.to(ad.device())  # the whole dataset on the device, as word_language_model's batchify does
model = ad.to(torch.nn.Sequential(torch.nn.Embedding(50, 16), torch.nn.Linear(16, 50)))
opt = torch.optim.SGD(model.parameters(), lr=0.1)
bptt = 20
for i in range(0, 40 * bptt, bptt):  # a moving offset each step
    x, y = data[i : i + bptt], data[i + 1 : i + 1 + bptt]
    if not ON_DEVICE:
        x, y = ad.to((x, y))  # sliced on the CPU: the same shapes every step
    loss = torch.nn.functional.cross_entropy(model(x), y)
    opt.zero_grad()
    loss.backward()
    opt.step()
    ad.step()
print("compilations", ad.backend().compilations)
"""
EPOCHS = """
import torch

torch.manual_seed(0)
data = torch.utils.data.TensorDataset(torch.randn(100, 8), torch.randint(0, 3, (100,)))
loader = torch.utils.data.DataLoader(data, batch_size=16, drop_last={drop_last})  # 100 = 6 x 16 + 4
model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 3)).cuda()
opt = torch.optim.SGD(model.parameters(), lr=0.1)
for epoch in range(3):
    model.train()
    for x, y in loader:
        x, y = x.cuda(), y.cuda()
        loss = torch.nn.functional.cross_entropy(model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()  # the step boundary under cuda-compat
    model.eval()
    with torch.no_grad():  # validation between epochs: its own graphs, compiled once
        val = sum(torch.nn.functional.cross_entropy(model(x.cuda()), y.cuda()).item() for x, y in loader)
    print("epoch", epoch, round(val, 4))
"""


def run(args: list[str], **env: str) -> subprocess.CompletedProcess[str]:
    full = child_env({"PJRT_DEVICE": "CPU", **env})
    return subprocess.run([sys.executable, *args], env=full, capture_output=True, text=True, timeout=400, cwd=REPO)


def last_json(done: subprocess.CompletedProcess[str]) -> dict[str, Any]:
    assert done.returncode == 0, done.stderr[-3000:]
    row: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return row


def close(got: list[float], want: list[float], tol: float = 1e-3) -> bool:
    return len(got) == len(want) > 0 and all(abs(a - b) <= tol for a, b in zip(got, want))


def test_cuda_tutorial_runs_unmodified_on_xla() -> None:
    compat = run(["-m", "anydevice", "run", "--cuda-compat", str(SCRIPTS / "tutorial.py")], ANYDEVICE="xla")
    by_hand = run([str(SCRIPTS / "tutorial_xla.py")])
    got, want = last_json(compat), last_json(by_hand)
    assert got["device"] == "xla:0" and close(got["losses"], want["losses"])
    assert "anydevice: cuda-compat is active: CUDA calls run on xla (xla:0)" in compat.stderr
    assert "torch.cuda.max_memory_allocated() -> 0 (the PJRT CPU runtime reports no memory statistics" in compat.stderr


def test_gpt_script_runs_unmodified_on_xla_on_a_cuda_build_of_torch(tmp_path: Path) -> None:
    """The XLA lane's torch is a CUDA build without a GPU: nothing may reach CUDA's driver (AdamW, pin_memory, GPU checkpoint)."""
    from tests.cuda_compat.gpu_checkpoint import gpt_state, save_as_gpu

    checkpoint = save_as_gpu(gpt_state(), tmp_path / "gpu.pt")
    report = tmp_path / "report.json"
    compat = run(
        [str(SCRIPTS / "gpt_cuda.py"), f"--init={checkpoint}"],
        ANYDEVICE="xla",
        ANYDEVICE_CUDA_COMPAT="1",
        ANYDEVICE_CUDA_COMPAT_REPORT=str(report),
    )
    by_hand = run([str(SCRIPTS / "gpt_port.py"), "--device=xla", f"--init={checkpoint}"])
    got, want = last_json(compat), last_json(by_hand)
    assert got["device"] == "xla:0" and close(got["losses"], want["losses"]), (got, want)
    assert "CUDA driver" not in compat.stderr and "NVIDIA" not in compat.stderr
    assert compat.stderr.count("AdamW(fused=True) has no fused kernel on xla") == 1
    calls = {row["call"]: row for row in json.loads(report.read_text())["calls"]}
    assert calls["optimizer.step()"]["kind"] == "redirected"  # a step boundary at every optimizer step
    assert calls["Tensor.pin_memory()"]["kind"] == "answered neutrally"
    assert calls["torch.load(<GPU checkpoint>)"]["outcome"] == "xla:0"


def test_loader_script_with_torch_accelerator_and_pinned_loader_on_xla() -> None:
    compat = run([str(SCRIPTS / "loader_cuda.py")], ANYDEVICE="xla", ANYDEVICE_CUDA_COMPAT="1")
    by_hand = run([str(SCRIPTS / "loader_port.py"), "--device=xla"])
    got, want = last_json(compat), last_json(by_hand)
    assert got["device"] == "xla:0" and got["reported"] == "xla"  # torch.accelerator names the real device
    assert close(got["losses"], want["losses"]), (got, want)
    assert "CUDA driver" not in compat.stderr


def test_device_module_and_generator_on_xla() -> None:
    code = """
import torch, anydevice as ad
from diffusers.utils.torch_utils import randn_tensor
dm = ad.device_module()
assert dm.is_available() and dm.device_count() == 1 and dm.current_device() == 0
assert dm.get_device_name() == "PJRT CPU"
dm.set_device(0); dm.manual_seed(3); dm.empty_cache()
x = torch.ones(4, device=ad.device()) * 2
dm.synchronize()  # launches the pending graph, then waits
for name in ("memory_allocated", "max_memory_allocated", "reset_peak_memory_stats"):
    try:
        getattr(dm, name)()
    except ad.errors.UnsupportedDeviceFunctionError as exc:
        assert exc.function == name and exc.device == "xla", exc
    else:
        raise AssertionError(name + " answered on PJRT CPU")
assert not hasattr(dm, "Stream")
try:
    torch.Generator(device=ad.device())
except RuntimeError:
    pass  # what ad.generator exists for
g = ad.generator(5)
assert g.device.type == "cpu"
a = randn_tensor((2, 3), generator=ad.generator(5), device=ad.device())
b = torch.randn((2, 3), generator=torch.Generator().manual_seed(5))
assert a.device == ad.device() and torch.equal(a.cpu(), b)
print("ok")
"""
    done = run(["-c", code], ANYDEVICE="xla")
    assert done.returncode == 0 and done.stdout.strip().endswith("ok"), done.stderr[-3000:]


def compilations(done: subprocess.CompletedProcess[str]) -> int:
    assert done.returncode == 0, done.stderr[-3000:]
    return int(done.stdout.split("compilations")[-1])


def test_word_lm_pattern_triggers_the_recompile_warning_once(tmp_path: Path) -> None:
    script = tmp_path / "word_lm.py"
    script.write_text(WORD_LM.format(on_device=True))
    done = run([str(script)], ANYDEVICE="xla")
    assert compilations(done) >= 30  # a new graph nearly every step
    warnings = [line for line in done.stderr.splitlines() if "RecompileWarning" in line]
    assert len(warnings) == 1, done.stderr[-3000:]
    assert "moving offset" in warnings[0] and "PT_XLA_DEBUG_LEVEL=2" in warnings[0] and "metrics_report()" in warnings[0]
    assert "input shapes were the same (Sequential((20,)))" in warnings[0]  # so the cause is a value baked into the graph
    assert str(script) in warnings[0]  # at the user's ad.step() line


def test_a_short_last_batch_is_reported_once_at_exit_with_the_shape_that_changed(tmp_path: Path) -> None:
    """Under cuda-compat, 3 epochs of 7 batches (the last one of 4) with validation between epochs: one line, the cause."""
    script = tmp_path / "epochs.py"
    script.write_text(EPOCHS.format(drop_last=False))
    done = run([str(script)], ANYDEVICE="xla", ANYDEVICE_CUDA_COMPAT="1", ANYDEVICE_QUIET="1")
    assert done.returncode == 0, done.stderr[-3000:]
    warnings = [line for line in done.stderr.splitlines() if "RecompileWarning" in line]
    assert len(warnings) == 1, done.stderr[-3000:]
    line = EPOCHS.splitlines().index("        opt.step()  # the step boundary under cuda-compat") + 1
    head = f"{script}:{line}: RecompileWarning: anydevice: xla: 1 step(s) after the first 5 compiled"
    assert warnings[0].startswith(head), warnings
    assert "input shapes changed: Sequential((16, 8)) at the first steps, Sequential((4, 8)) at step 6" in warnings[0]
    assert "drop_last=True" in warnings[0]


def test_a_stable_loop_with_validation_between_epochs_reports_nothing(tmp_path: Path) -> None:
    script = tmp_path / "epochs.py"
    script.write_text(EPOCHS.format(drop_last=True))
    done = run([str(script)], ANYDEVICE="xla", ANYDEVICE_CUDA_COMPAT="1", ANYDEVICE_QUIET="1")
    assert done.returncode == 0 and done.stdout.count("epoch") == 3, done.stderr[-3000:]
    assert "RecompileWarning" not in done.stderr


def test_fixed_shapes_do_not_warn(tmp_path: Path) -> None:
    script = tmp_path / "word_lm_fixed.py"
    script.write_text(WORD_LM.format(on_device=False))
    done = run([str(script)], ANYDEVICE="xla")
    assert compilations(done) <= 5
    assert "RecompileWarning" not in done.stderr


def test_main_job_does_not_warn() -> None:
    done = run([str(TRAIN), "--steps", "30"], ANYDEVICE="xla")
    row = last_json(done)
    assert row["steps"] == 30
    assert "RecompileWarning" not in done.stderr and "compiled a new" not in done.stderr


def test_whole_model_saved_on_xla_loads_back_under_cuda_compat(tmp_path: Path) -> None:
    """word_language_model's pattern: torch.save(model) on the device, torch.load(f) with no map_location."""
    code = f"""
import torch
model = torch.nn.Linear(3, 2).cuda()
with open({str(tmp_path / "model.pt")!r}, "wb") as f:
    torch.save(model, f)
with open({str(tmp_path / "model.pt")!r}, "rb") as f:
    back = torch.load(f, weights_only=False)
print("ok", back.weight.device, torch.equal(back.weight.cpu(), model.weight.cpu()))
"""
    done = run(["-c", code], ANYDEVICE="xla", ANYDEVICE_CUDA_COMPAT="1")
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.split()[-3:] == ["ok", "xla:0", "True"]


def test_backward_passes_piling_up_without_a_step_boundary_warn_once() -> None:
    """Backward passes with no optimizer step and no module forward between them (tensor code): no boundary can be
    placed, so the first 16 say so, once. A module's forward after a backward is a boundary (issue 50): no warning."""
    code = """
import sys
import torch
w = torch.randn(4, 1, device="cuda", requires_grad=True)
model = torch.nn.Linear(4, 1).cuda()
for _ in range(20):  # gradients accumulate, no optimizer.step(): one ever-growing graph
    if sys.argv[1] == "tensors":
        (torch.randn(2, 4, device="cuda") @ w).sum().backward()
    else:
        model(torch.randn(2, 4, device="cuda")).sum().backward()
torch.cuda.synchronize()
print("ok")
"""
    for form, warnings in (("tensors", 1), ("module", 0)):
        done = run(["-c", code, form], ANYDEVICE="xla", ANYDEVICE_CUDA_COMPAT="1", ANYDEVICE_QUIET="")
        assert done.returncode == 0 and done.stdout.strip().endswith("ok"), done.stderr[-3000:]
        assert done.stderr.count("16 backward passes were traced into one xla graph without a step boundary") == warnings


def test_gpt_script_on_the_cpu_of_a_cuda_build_reaches_no_cuda_driver() -> None:
    """ANYDEVICE=cpu on torch 2.9.0+cu128 without a GPU: fused AdamW, pin_memory, events never reach CUDA's own functions."""
    compat = run([str(SCRIPTS / "gpt_cuda.py")], ANYDEVICE="cpu", ANYDEVICE_CUDA_COMPAT="1")
    by_hand = run([str(SCRIPTS / "gpt_port.py"), "--device=cpu"], ANYDEVICE="cpu")
    got, want = last_json(compat), last_json(by_hand)
    assert got["device"] == "cpu" and close(got["losses"], want["losses"], 1e-5), (got, want)
    assert "CUDA driver" not in compat.stderr and "NVIDIA" not in compat.stderr


@pytest.mark.slow
def test_gpt_script_with_torch_compile_on_xla() -> None:
    compat = run([str(SCRIPTS / "gpt_cuda.py"), "--compile=1", "--steps=3"], ANYDEVICE="xla", ANYDEVICE_CUDA_COMPAT="1")
    by_hand = run([str(SCRIPTS / "gpt_port.py"), "--device=xla", "--compile=1", "--steps=3"])
    got, want = last_json(compat), last_json(by_hand)
    assert close(got["losses"], want["losses"]), (got, want)
    assert "torch.compile() -> backend='openxla'" in compat.stderr or "openxla" in compat.stderr


OPTIMIZER_BEFORE_TO = """
import json, torch
torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 1))
model.register_buffer("scale", torch.ones(1))
opt = torch.optim.SGD(model.parameters(), lr=0.1)  # built before .to(), as pytorch/examples mnist_forward_forward does
weight, scale = model[0].weight, model.scale
device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
model.to(device)
x = torch.randn(64, 8).to(device)
y = x.sum(1, keepdim=True)
losses = []
for _ in range(5):
    opt.zero_grad()
    loss = (model(x) * model.scale - y).pow(2).mean()
    loss.backward()
    opt.step()
    losses.append(loss.item())
print(json.dumps({"losses": losses, "same": [model[0].weight is weight, model.scale is scale], "device": str(weight.device)}))
"""


def test_optimizer_built_before_to_cuda_trains_on_xla(tmp_path: Path) -> None:
    script = tmp_path / "before_to.py"
    script.write_text(OPTIMIZER_BEFORE_TO)
    plain = child_env({"PJRT_DEVICE": "CPU"})
    cpu = _last_json(subprocess.run([sys.executable, str(script)], env=plain, capture_output=True, text=True, timeout=600))
    xla = _last_json(
        subprocess.run(
            [sys.executable, str(script)],
            env=child_env({"PJRT_DEVICE": "CPU", "ANYDEVICE": "xla", "ANYDEVICE_CUDA_COMPAT": "1"}),
            capture_output=True,
            text=True,
            timeout=600,
        )
    )
    assert xla["device"].startswith("xla") and xla["same"] == [True, True]
    assert all(abs(a - b) <= 1e-4 for a, b in zip(xla["losses"], cpu["losses"])), (xla, cpu)
    assert xla["losses"][-1] < xla["losses"][0]


HOGWILD = """import torch
import torch.multiprocessing as mp


def train(model):
    model(torch.ones(1, 2).cuda()).sum().backward()


if __name__ == "__main__":
    model = torch.nn.Linear(2, 2).cuda()
    model.share_memory()  # Hogwild: every process updates the one copy
    workers = [mp.Process(target=train, args=(model,)) for _ in range(2)]
"""


def test_share_memory_on_xla_is_one_clear_refusal(tmp_path: Path) -> None:
    script = tmp_path / "hogwild.py"
    script.write_text(HOGWILD)
    done = subprocess.run(
        [sys.executable, str(script)],
        env=child_env({"PJRT_DEVICE": "CPU", "ANYDEVICE": "xla", "ANYDEVICE_CUDA_COMPAT": "1", "ANYDEVICE_QUIET": "1"}),
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 1
    assert "_share_fd_" not in done.stderr
    # one clear error, as anydevice prints its refusals (issue 35), not a traceback through torch's Module._apply
    assert "Traceback" not in done.stderr, done.stderr[-2000:]
    lines = done.stderr.splitlines()
    first = next(i for i, line in enumerate(lines) if line.startswith("anydevice: error: "))
    assert lines[first].startswith("anydevice: error: Tensor.share_memory_() (model.share_memory()) is not available on xla: ")
    assert lines[first + 1].startswith("Share the model before moving it (model.share_memory() on the CPU")
    assert lines[first + 2] == f"(raised at {script}:11; ANYDEVICE_DEBUG=1 shows the traceback)"


def _last_json(done: subprocess.CompletedProcess[str]) -> dict[str, Any]:
    assert done.returncode == 0, done.stderr[-3000:]
    row: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return row


ACCELERATOR_SCRIPT = """
import json
import torch
device = torch.accelerator.current_accelerator() if torch.accelerator.is_available() else torch.device("cpu")
torch.manual_seed(0)
model = torch.nn.Linear(4, 2).to(device)
x = torch.randn(3, 4).to(device)
print(json.dumps({"device": device.type, "param": model.weight.device.type, "out": model(x).sum().item()}))
"""


def test_a_torch_accelerator_script_finds_xla_under_anydevice_run_with_and_without_compat(tmp_path: Path) -> None:
    """Issue 50: a torch.accelerator program lands on xla under `anydevice run`, with or without --cuda-compat."""
    script = tmp_path / "accelerator.py"
    script.write_text(ACCELERATOR_SCRIPT)
    plain = run(["-m", "anydevice", "run", str(script)], ANYDEVICE="xla")
    compat = run(["-m", "anydevice", "run", "--cuda-compat", str(script)], ANYDEVICE="xla")
    reference = run([str(script)])
    for done in (plain, compat):
        got = last_json(done)
        assert (got["device"], got["param"]) == ("xla", "xla")
        assert abs(got["out"] - last_json(reference)["out"]) < 1e-5
        assert "never used" not in done.stderr


ACCELERATOR_STEPS = """
import torch
device = torch.device("cuda" if torch.cuda.is_available() else "cpu")  # the CUDA idiom: --cuda-compat's door
model = torch.nn.Linear(4, 2).to(device)
opt = torch.optim.SGD(model.parameters(), lr=0.1)
for step in range(3):
    model(torch.ones(3, 4).to(device)).sum().backward()
    opt.step()
    print(f"step {step} on {model.weight.device.type}", flush=True)
"""


def test_a_cuda_idiom_script_says_before_its_first_step_that_xla_is_not_used_and_under_compat_nothing(
    tmp_path: Path,
) -> None:
    """Issue 36: the line comes before the first optimizer step (stderr merged: the order is real), once."""
    script = tmp_path / "steps.py"
    script.write_text(ACCELERATOR_STEPS)

    def lines(*options: str) -> list[str]:
        done = subprocess.run(
            [sys.executable, "-m", "anydevice", "run", *options, str(script)],
            env=child_env({"PJRT_DEVICE": "CPU", "ANYDEVICE": "xla"}),
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            timeout=400,
            cwd=REPO,
        )
        assert done.returncode == 0, done.stdout[-3000:]
        return done.stdout.splitlines()

    plain = lines()
    said = [i for i, line in enumerate(plain) if "anydevice: ANYDEVICE=xla was asked for" in line]
    assert len(said) == 1 and said[0] < plain.index("step 0 on cpu"), plain
    # torch_xla is imported (torch.accelerator answers for xla under anydevice run, issue 50): the tensors are the CPU's
    assert "the tensors of its first backward pass are" in plain[said[0]]
    assert not any("never used" in line for line in plain), plain  # not repeated at exit
    compat = lines("--cuda-compat")
    assert "step 2 on xla" in compat and not any("anydevice: ANYDEVICE" in line for line in compat), compat


def test_renamed_backend_averages_with_reduce_op_avg_on_xla() -> None:
    """llm.c's loss average: init_process_group("nccl") is "xla" there, which has no ReduceOp.AVG: SUM, then a divide."""
    compat = run(["-m", "anydevice", "run", "--cuda-compat", str(SCRIPTS / "avg_cuda.py")], ANYDEVICE="xla")
    reference = run([str(SCRIPTS / "avg_cuda.py")])
    got, want = last_json(compat), last_json(reference)
    assert got["ddp"] and got["device"].startswith("xla") and not want["ddp"]
    assert all(abs(a - b) < 1e-6 for a, b in zip(got["losses"], want["losses"])), (got, want)
    assert "Invalid reduce op" not in compat.stderr


def test_inference_mode_and_a_generator_on_the_model_device_run_on_xla_as_on_cpu() -> None:
    """torch_xla's limits bridged under compat: inference_mode as no_grad, a generator on xla is a CPU one seeded the same."""
    on_xla = run([str(SCRIPTS / "xla_limits.py")], ANYDEVICE="xla", ANYDEVICE_CUDA_COMPAT="1")
    on_cpu = run([str(SCRIPTS / "xla_limits.py")], ANYDEVICE="cpu", ANYDEVICE_CUDA_COMPAT="1")
    got, want = last_json(on_xla), last_json(on_cpu)
    assert "Cannot set version_counter" not in on_xla.stderr and "not an accelerator" not in on_xla.stderr
    assert got["noise"] == want["noise"] and got["gen"] == "cpu"
    assert abs(got["out"] - want["out"]) < 1e-5 and abs(got["again"] - want["again"]) < 1e-5


def test_word_lm_hand_written_update_gets_a_boundary_and_the_cpu_numbers(tmp_path: Path) -> None:
    """word_language_model's idioms (docs/integrations.md, "word_language_model on xla"): the reload loses nothing.
    Parameters updated by hand (no optimizer) once left one lazy graph with what followed, and later epochs differed
    from cpu (2.3836 vs 2.4376); the boundary at the next forward after a backward (issue 50) gives the CPU's numbers,
    as a torch_xla.sync() right after the update does.
    """
    script = SCRIPTS / "word_lm_checkpoint.py"
    plain = run([str(script), str(tmp_path / "cpu.pt"), "3"])
    compat = run([str(script), str(tmp_path / "xla.pt"), "3"], ANYDEVICE="xla", ANYDEVICE_CUDA_COMPAT="1")
    synced = run([str(script), str(tmp_path / "sync.pt"), "3", "sync"], ANYDEVICE="xla", ANYDEVICE_CUDA_COMPAT="1")
    want, got, fixed = last_json(plain), last_json(compat), last_json(synced)
    assert want["device"] == "cpu" and got["device"] == fixed["device"] == "xla"
    for row in (want, got, fixed):  # torch.save(model) / torch.load(f) give back the saved weights, bit for bit
        assert row["reloaded_equal"] and row["test"] == row["test_in_memory"], row
    assert close(fixed["vals"], want["vals"], tol=1e-5) and abs(fixed["test"] - want["test"]) <= 1e-5, (fixed, want)
    assert close(got["vals"], want["vals"], tol=1e-5) and abs(got["test"] - want["test"]) <= 1e-5, (got, want)


def test_tensor_parallel_with_a_cuda_device_mesh_runs_as_spmd_on_xla() -> None:
    """pytorch/examples' tensor-parallel idiom on xla: the script's one-rank mesh is kept, its Colwise/Rowwise weights
    are sharded over the host's 4 SPMD devices, and the losses equal the same program on one cpu rank."""
    script = str(SCRIPTS / "tp_cuda.py")
    same = {"TP_INPUT": "host", "CPU_NUM_DEVICES": "4"}  # the batches drawn on the CPU on both sides
    compat = run(["-m", "anydevice", "run", "--cuda-compat", script], ANYDEVICE="xla", TP_DEVICE="cuda", **same)
    reference = run(["-m", "anydevice", "run", "-n", "1", script], ANYDEVICE="cpu", **same)
    got, want = last_json(compat), last_json(reference)
    assert (got["rank"], got["mesh"], want["mesh"]) == (0, "xla", "cpu")
    assert close(got["losses"], want["losses"], tol=1e-4), (got, want)
    assert "SPMD: 2 weight(s) sharded over the host's 4 devices" in compat.stderr
    assert "Replicating tensors already initialized" not in compat.stderr  # SPMD chosen before the first tensor
    # the public example's form: the mesh's type from torch.accelerator, which names xla under compat
    accelerator = run(["-m", "anydevice", "run", "--cuda-compat", script], ANYDEVICE="xla", **same)
    assert close(last_json(accelerator)["losses"], want["losses"], tol=1e-4)
    assert "_cuda_setDevice" not in compat.stderr


def test_a_multi_entry_device_mesh_in_one_xla_process_is_refused_by_name(tmp_path: Path) -> None:
    """A mesh of 4 entries in one process: the script would compute per-rank shapes SPMD does not give; refused."""
    script = tmp_path / "tp4.py"
    script.write_text((SCRIPTS / "tp_cuda.py").read_text().replace('(int(os.environ["WORLD_SIZE"]),)', "(4,)"))
    done = run(["-m", "anydevice", "run", "--cuda-compat", str(script)], ANYDEVICE="xla", TP_DEVICE="cuda")
    assert done.returncode != 0
    assert "parallelize_module over a DeviceMesh of 4 entries in one process on xla" in done.stderr
    assert "ad.distributed.parallelize(model, plan)" in done.stderr
