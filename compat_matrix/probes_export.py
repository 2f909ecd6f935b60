"""Export probes: a model converted for an edge runtime, run in that runtime's interpreter, compared with PyTorch.

They run only with ``anydevice matrix probe --target litert`` (an export target, not a device: the
conversion and LiteRT's CPU interpreter run on the host CPU). Each probe calls ``ad.export`` as a user
would (which converts with litert-torch, checks the file in LiteRT's interpreter on the example inputs
and writes it), then runs the written file again in the interpreter on fresh inputs and compares with
the PyTorch model on the CPU. A construct LiteRT cannot take fails at ``compile`` with the finding
``ad.export`` reports (the op or construct and its line); a disagreement fails at ``compare``.
Random-init models only, no downloads.
"""

from __future__ import annotations

import importlib.util
from collections.abc import Callable
from pathlib import Path

import torch

from anydevice.compat_matrix.execute import ProbeContext
from anydevice.compat_matrix.probe import EXPORT_GROUP, Probe, Skip
from anydevice.compat_matrix.schema import Stage

Inputs = tuple[torch.Tensor, ...]
Builder = Callable[[], tuple[torch.nn.Module, Inputs, Inputs]]
"""A probe model: ``(model, example inputs, fresh inputs of the same shapes)``."""

FP32 = 1e-4
"""The comparison on fresh inputs: ``|litert - torch| <= 1e-4 + 1e-4 * |torch|``, ad.export's own float32 tolerance."""
_RUNTIMES = {"litert": ("litert_torch", "ai_edge_litert")}
MAIN_JOB = Path(__file__).resolve().parents[1] / "examples" / "train.py"
"""The main job, in a repository checkout (an installed anydevice has no examples/)."""


def _mlp() -> tuple[torch.nn.Module, Inputs, Inputs]:
    model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.GELU(), torch.nn.Linear(32, 4))
    return model, (torch.randn(2, 16),), (torch.randn(2, 16),)


def _convnet() -> tuple[torch.nn.Module, Inputs, Inputs]:
    model = torch.nn.Sequential(
        torch.nn.Conv2d(3, 8, 3, padding=1), torch.nn.BatchNorm2d(8), torch.nn.ReLU(), torch.nn.MaxPool2d(2),
        torch.nn.Conv2d(8, 16, 3, padding=1), torch.nn.ReLU(), torch.nn.AdaptiveAvgPool2d(1), torch.nn.Flatten(),
        torch.nn.Linear(16, 10),
    )  # fmt: skip
    return model, (torch.randn(1, 3, 32, 32),), (torch.randn(1, 3, 32, 32),)


def _main_job() -> tuple[torch.nn.Module, Inputs, Inputs]:
    """examples/train.py's own export hook (what ``anydevice export examples/train.py`` converts): the tiny preset."""
    if not MAIN_JOB.is_file():
        raise Skip(f"the main job's script is not here ({MAIN_JOB}): it ships in the repository checkout, not the package")
    from anydevice.edge.script import load_model

    model, example = load_model(MAIN_JOB, None)
    tokens = example[0]
    return model, (tokens,), (torch.randint(0, 256, tokens.shape),)  # byte-level vocabulary


class CausalLMLogits(torch.nn.Module):
    """A causal LM's logits for token ids, the one tensor a LiteRT signature returns."""

    def __init__(self, model: torch.nn.Module) -> None:
        super().__init__()
        self.model = model

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        logits: torch.Tensor = self.model(input_ids=ids, use_cache=False).logits
        return logits


def tiny_hf_llama() -> CausalLMLogits:
    """A random-init transformers ``LlamaForCausalLM`` (vocabulary 128, 2 layers, GQA) as logits for token ids."""
    from transformers import LlamaConfig, LlamaForCausalLM

    config = LlamaConfig(
        vocab_size=128, hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
        num_key_value_heads=2, max_position_embeddings=64, use_cache=False,
    )  # fmt: skip
    return CausalLMLogits(LlamaForCausalLM(config))


def _hf_llama() -> tuple[torch.nn.Module, Inputs, Inputs]:
    if importlib.util.find_spec("transformers") is None:
        raise Skip("transformers is not installed here (pip install transformers)")
    return tiny_hf_llama(), (torch.randint(0, 128, (1, 16)),), (torch.randint(0, 128, (1, 16)),)


class _Svd(torch.nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        singular: torch.Tensor = torch.linalg.svd(x)[1]  # LiteRT has no lowering for SVD
        return singular


def _svd() -> tuple[torch.nn.Module, Inputs, Inputs]:
    return _Svd(), (torch.randn(4, 4),), (torch.randn(4, 4),)


class _ValueBranch(torch.nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if x.sum() > 0:  # Python control flow on a tensor's value: torch.export cannot trace it
            return x * 2
        return x


def _value_branch() -> tuple[torch.nn.Module, Inputs, Inputs]:
    return _ValueBranch(), (torch.randn(4, 4),), (torch.randn(4, 4),)


def export_probe(build: Builder) -> Callable[[ProbeContext], None]:
    """The probe for one model: ``ad.export`` it to ``ctx.params["target"]``, run the file on fresh inputs, compare."""

    def probe(ctx: ProbeContext) -> None:
        target = str(ctx.params["target"])
        missing = [m for m in _RUNTIMES[target] if importlib.util.find_spec(m) is None]
        if missing:
            raise Skip(f"{', '.join(missing)} is not installed here (the {target} lane: requirements/{target}.txt)")
        from anydevice.errors import ExportError

        model, example, fresh = build()
        try:
            exported = ctx.api("export")(model, example, target=target, path=ctx.tmp / "model.tflite")
        except ExportError as exc:  # with a finding: it did not convert; without: its outputs disagreed
            with ctx.stage(Stage.COMPILE if exc.finding is not None else Stage.COMPARE):
                raise
        with ctx.stage(Stage.EXECUTE):
            got = [torch.from_numpy(array) for array in exported(*fresh)]
        with torch.no_grad():
            want = model.eval()(*fresh)
        ctx.compare(got, want, atol=FP32, rtol=FP32)

    return probe


def _probe(name: str, build: Builder, description: str) -> Probe:
    return Probe(f"export_litert_{name}", EXPORT_GROUP, export_probe(build), {"target": "litert"}, description)


PROBES: list[Probe] = [
    _probe("mlp", _mlp, "An MLP (Linear, GELU) converts to LiteRT and matches PyTorch in LiteRT's CPU interpreter."),
    _probe(
        "convnet",
        _convnet,
        "A small conv net (Conv2d, BatchNorm, ReLU, pooling, Linear) converts to LiteRT and matches PyTorch.",
    ),
    _probe(
        "main_job",
        _main_job,
        "The main job's Llama-style model (examples/train.py's export hook, tiny preset) converts and matches PyTorch.",
    ),
    _probe(
        "hf_llama",
        _hf_llama,
        "A tiny random-config transformers LlamaForCausalLM (logits) converts to LiteRT and matches PyTorch.",
    ),
    _probe(
        "linalg_svd",
        _svd,
        "torch.linalg.svd, an op LiteRT has no lowering for: the export is refused naming the op and its line.",
    ),
    _probe(
        "value_branch",
        _value_branch,
        "Python control flow on a tensor's value: the export is refused naming the data-dependent branch and its line.",
    ),
]
