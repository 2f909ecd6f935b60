"""Probes for real workloads: a tiny Hugging Face Llama in a plain loop and under Trainer, and a CUDA-written
script under ``anydevice run --cuda-compat``.

Random-init configs, no downloads. The loop runs in the probe's process and compares its losses with the
same loop on the CPU; Trainer and the CUDA script run as a user would start them (``anydevice run`` in a
subprocess with the worker's ``ANYDEVICE``), so their cells say whether that path works on the device.
"""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from typing import Any

import torch

from anydevice.compat_matrix.execute import ProbeContext
from anydevice.compat_matrix.probe import Probe, Skip
from anydevice.compat_matrix.schema import Stage

SUBPROCESS_TIMEOUT_S = 600
_LLAMA: dict[str, Any] = {
    "vocab_size": 64,
    "hidden_size": 32,
    "intermediate_size": 64,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "tie_word_embeddings": True,
}

TRAINER_SCRIPT = """
import json, tempfile
import torch
from transformers import LlamaConfig, LlamaForCausalLM, Trainer, TrainingArguments

class Tokens(torch.utils.data.Dataset):
    def __init__(self):
        self.data = torch.randint(0, 64, (16, 16), generator=torch.Generator().manual_seed(0))
    def __len__(self):
        return len(self.data)
    def __getitem__(self, i):
        return {"input_ids": self.data[i], "labels": self.data[i]}

torch.manual_seed(0)
model = LlamaForCausalLM(LlamaConfig(**CONFIG))
with tempfile.TemporaryDirectory() as out:
    args = TrainingArguments(output_dir=out, max_steps=2, per_device_train_batch_size=4, logging_steps=1,
                             save_strategy="no", report_to=[], disable_tqdm=True, seed=0)
    trainer = Trainer(model=model, args=args, train_dataset=Tokens())
    trainer.train()
losses = [row["loss"] for row in trainer.state.log_history if "loss" in row]
print("RESULT " + json.dumps({"device": str(next(model.parameters()).device), "losses": losses}))
"""

CUDA_SCRIPT = """
import json
import torch
assert torch.cuda.is_available()
torch.cuda.set_device(0)
torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 1)).cuda()
opt = torch.optim.AdamW(model.parameters(), lr=0.01, fused=True)
data = torch.utils.data.TensorDataset(torch.randn(96, 8), torch.randn(96, 1))
loader = torch.utils.data.DataLoader(data, batch_size=32, pin_memory=True)
start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
start.record()
losses = []
for x, y in loader:
    x, y = x.pin_memory().cuda(non_blocking=True), y.to("cuda", non_blocking=True)
    with torch.autocast("cuda", enabled=False):
        loss = torch.nn.functional.mse_loss(model(x), y)
    loss.backward()
    opt.step()
    opt.zero_grad()
    losses.append(loss.item())
end.record()
torch.cuda.synchronize()
print("RESULT " + json.dumps({"device": str(next(model.parameters()).device), "losses": losses,
                              "ms": start.elapsed_time(end), "peak": torch.cuda.max_memory_allocated()}))
"""


def _cuda_script_reference() -> list[float]:
    """CUDA_SCRIPT's losses computed on the CPU with plain torch (the same seed, data and steps)."""
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 1))
    opt = torch.optim.AdamW(model.parameters(), lr=0.01)
    xs, ys = torch.randn(96, 8), torch.randn(96, 1)
    losses = []
    for i in range(0, 96, 32):
        loss = torch.nn.functional.mse_loss(model(xs[i : i + 32]), ys[i : i + 32])
        torch.autograd.backward(loss)
        opt.step()
        opt.zero_grad()
        losses.append(loss.item())
    return losses


def _need(*modules: str) -> None:
    missing = [m for m in modules if importlib.util.find_spec(m) is None]
    if missing:
        raise Skip(f"{', '.join(missing)} is not installed here (pip install {' '.join(missing)})")


def _selection(ctx: ProbeContext) -> str:
    backend = ctx.api("backend")()
    return str(backend.name if backend.index is None else f"{backend.name}:{backend.index}")


def _run(ctx: ProbeContext, source: str, *flags: str) -> dict[str, Any]:
    """``anydevice run [flags] script`` on the worker's device; the script's ``RESULT {json}`` line."""
    script = ctx.tmp / "workload.py"
    script.write_text(source)
    env = {**os.environ, "ANYDEVICE": _selection(ctx), "HF_HUB_OFFLINE": "1", "ANYDEVICE_QUIET": "1"}
    for launcher_var in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT"):
        env.pop(launcher_var, None)
    with ctx.stage(Stage.EXECUTE):
        proc = subprocess.run(
            [sys.executable, "-m", "anydevice", "run", *flags, str(script)],
            capture_output=True,
            text=True,
            env=env,
            timeout=SUBPROCESS_TIMEOUT_S,
            cwd=ctx.tmp,
        )
        lines = [line[len("RESULT ") :] for line in proc.stdout.splitlines() if line.startswith("RESULT ")]
        if proc.returncode != 0 or not lines:
            tail = (proc.stderr.strip().splitlines() or ["(no output)"])[-1]
            raise RuntimeError(f"`anydevice run {' '.join(flags)} script.py` exited {proc.returncode}: {tail}")
    print(proc.stderr[-2000:])
    result: dict[str, Any] = json.loads(lines[-1])
    return result


def _llama_losses(device: torch.device, step: Any, steps: int = 3) -> list[torch.Tensor]:
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    model: Any = LlamaForCausalLM(LlamaConfig(**_LLAMA))
    model = model.to(device)
    # SGD, not Adam: Adam's first steps divide by sqrt(v) and turn last-bit gradient differences between
    # devices into visible loss differences, which would test the optimizer's conditioning, not the device.
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    batch = torch.randint(0, 64, (4, 16), generator=torch.Generator().manual_seed(0)).to(device)
    losses = []
    for _ in range(steps):
        loss = model(input_ids=batch, labels=batch).loss
        torch.autograd.backward(loss)
        opt.step()
        opt.zero_grad()
        step()
        losses.append(loss.detach())
    return losses


def hf_llama_loop(ctx: ProbeContext) -> None:
    _need("transformers")
    from anydevice.integrations import _hf

    _hf.install()  # the variables transformers reads at import, before it is imported here
    expected = torch.stack(_llama_losses(torch.device("cpu"), lambda: None))
    with ctx.stage(Stage.EXECUTE):
        losses = _llama_losses(ctx.device, ctx.api("step"))
        ctx.sync()
    # The first loss is the forward pass alone: it matches the CPU's closely. Later ones carry every
    # step's rounding (PJRT CPU's float32 matmuls differ from torch's in the last bits): 1 % holds them.
    ctx.compare(losses[0], expected[0], atol=1e-3, rtol=1e-3)
    ctx.compare(torch.stack(losses), expected, atol=1e-2, rtol=1e-2)


def hf_trainer(ctx: ProbeContext) -> None:
    _need("transformers", "accelerate")
    result = _run(ctx, f"CONFIG = {_LLAMA!r}\n" + TRAINER_SCRIPT)
    if torch.device(result["device"]).type != ctx.device.type:
        raise AssertionError(f"Trainer trained on {result['device']}, not on the selected {ctx.device.type}")
    if len(result["losses"]) != 2 or not all(x == x and abs(x) < 1e6 for x in result["losses"]):
        raise AssertionError(f"Trainer's losses are not two finite numbers: {result['losses']}")


def cuda_compat_script(ctx: ProbeContext) -> None:
    result = _run(ctx, CUDA_SCRIPT, "--cuda-compat")
    if torch.device(result["device"]).type != ctx.device.type:
        raise AssertionError(f"the CUDA script's model is on {result['device']}, not on the selected {ctx.device.type}")
    expected = torch.tensor(_cuda_script_reference())
    ctx.compare(torch.tensor(result["losses"]), expected, atol=1e-3, rtol=1e-3)


VLLM_SCRIPT = """
import json, sys
from vllm import LLM, SamplingParams
from vllm.platforms import current_platform

if __name__ == "__main__":
    llm = LLM(model=sys.argv[1], dtype="float32", max_model_len=128, enforce_eager=True, gpu_memory_utilization=0.3, seed=0)
    outs = llm.generate(["t1 t2 t3", "t4 t5"], SamplingParams(max_tokens=4, temperature=0, ignore_eos=True))
    print("RESULT " + json.dumps({"platform": type(current_platform).__name__, "device_type": current_platform.device_type,
                                  "tokens": [len(o.outputs[0].token_ids) for o in outs]}))
"""


def _tiny_vllm_model(directory: Any) -> None:
    """A random-init Llama vLLM can load (float32, head size 64) and a word-level tokenizer made here."""
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

    vocab = {"<unk>": 0, "</s>": 1, **{f"t{i}": i for i in range(2, 256)}}
    tokenizer = Tokenizer(models.WordLevel(vocab, unk_token="<unk>"))
    tokenizer.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    fast: Any = PreTrainedTokenizerFast  # untyped in transformers
    fast(tokenizer_object=tokenizer, unk_token="<unk>", eos_token="</s>").save_pretrained(directory)
    config = LlamaConfig(
        vocab_size=256,
        hidden_size=128,
        intermediate_size=256,
        num_hidden_layers=2,
        num_attention_heads=2,
        num_key_value_heads=2,
        head_dim=64,
        max_position_embeddings=128,
        eos_token_id=1,
        dtype="float32",
    )
    torch.manual_seed(0)
    LlamaForCausalLM(config).save_pretrained(directory)


def _vllm_route(ctx: ProbeContext) -> None:
    """Skip, saying why, where the selected device's plugin declares that vLLM cannot serve it (no platform, no plugin)."""
    from anydevice.integrations._serving import VLLM, declared_serving

    name = ctx.api("backend")().name
    declared = declared_serving(VLLM, name)
    if not declared.platforms and not declared.plugins:
        raise Skip(f"vLLM cannot serve {name}: {declared.hint or 'its plugin declares no vLLM platform'}")


def serve_vllm(ctx: ProbeContext) -> None:
    """vLLM generates on the selected device through anydevice's platform plugin (offline ``vllm.LLM``)."""
    _vllm_route(ctx)  # before the install check: no vLLM build serves such a device
    _need("vllm", "transformers", "tokenizers")
    model = ctx.tmp / "tiny-llama"
    _tiny_vllm_model(model)
    script = ctx.tmp / "serve_vllm.py"
    script.write_text(VLLM_SCRIPT)
    env = {**os.environ, "ANYDEVICE": _selection(ctx), "VLLM_CPU_KVCACHE_SPACE": "1", "HF_HUB_OFFLINE": "1"}
    with ctx.stage(Stage.EXECUTE):
        proc = subprocess.run(
            [sys.executable, str(script), str(model)], capture_output=True, text=True, env=env, timeout=SUBPROCESS_TIMEOUT_S
        )
        lines = [line[len("RESULT ") :] for line in proc.stdout.splitlines() if line.startswith("RESULT ")]
        if proc.returncode != 0 or not lines:
            tail = (proc.stderr.strip().splitlines() or ["(no output)"])[-1]
            raise RuntimeError(f"vLLM under ANYDEVICE={env['ANYDEVICE']} exited {proc.returncode}: {tail}")
    result = json.loads(lines[-1])
    print(f"vLLM platform {result['platform']} (device type {result['device_type']})")
    if result["tokens"] != [4, 4]:
        raise AssertionError(f"vLLM generated {result['tokens']} tokens, not 4 per prompt")


def _p(name: str, fn: Any, what: str) -> Probe:
    return Probe(name, "workloads", fn, description=what)


PROBES = [
    _p(
        "hf_llama_loop",
        hf_llama_loop,
        "A tiny random-init transformers Llama trains 3 steps in a plain loop; losses match the CPU's.",
    ),
    _p(
        "hf_trainer", hf_trainer, "Hugging Face Trainer trains a tiny Llama 2 steps on the selected device under `anydevice run`."
    ),
    _p(
        "cuda_compat_script",
        cuda_compat_script,
        "A CUDA-written script (.cuda(), pin_memory, fused AdamW, torch.cuda.Event) runs unmodified under "
        "--cuda-compat; losses match the CPU.",
    ),
    _p("serve_vllm", serve_vllm, "vLLM (offline `vllm.LLM`) generates from a tiny random Llama on the selected device."),
]
