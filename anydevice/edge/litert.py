"""The LiteRT side of export: litert-torch converts, ai-edge-litert's interpreter runs the result.

Both are imported here only, and only when an export is asked for.
"""

from __future__ import annotations

import contextlib
import importlib.metadata
import os
import sys
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from anydevice.errors import ExportError

INSTALL = "pip install litert-torch==0.10.0 ai-edge-litert==2.3.0 (litert-torch needs torch 2.4 to 2.14; requirements/litert.txt)"
SIGNATURE = "serving_default"  # the signature litert-torch gives a converted module

QUANTIZE: dict[str, str] = {
    "int8": "full_dynamic_recipe",  # int8 weights, activations quantized dynamically at run time
    "int8_dynamic": "full_dynamic_recipe",
    "full_dynamic_recipe": "full_dynamic_recipe",
    "int8_weight_only": "full_weight_only_recipe",  # int8 weights, float compute
    "full_weight_only_recipe": "full_weight_only_recipe",
    "fp16": "full_fp16_recipe",  # float16 weights
    "full_fp16_recipe": "full_fp16_recipe",
}
"""``quantize=`` names: ours and litert-torch's recipe names (``litert_torch.generative.quantize.quant_recipes``)."""


def require() -> tuple[str, str]:
    """The versions of litert-torch and ai-edge-litert; an :class:`ExportError` saying how to install them if missing."""
    versions = []
    for dist in ("litert-torch", "ai-edge-litert"):
        try:
            versions.append(importlib.metadata.version(dist))
        except importlib.metadata.PackageNotFoundError:
            raise ExportError(
                f"{dist} is not installed; {INSTALL}.",
                "ad.export(target='litert') converts with litert-torch and checks the result in ai-edge-litert's interpreter.",
            ) from None
    return versions[0], versions[1]


def recipe(quantize: str | None) -> str | None:
    """litert-torch's recipe name for ``quantize`` (None: float32); an :class:`ExportError` for an unknown name."""
    if quantize is None:
        return None
    if quantize not in QUANTIZE:
        raise ExportError(
            f"Unknown quantize={quantize!r} for target 'litert'.",
            "Use one of: " + ", ".join(sorted(QUANTIZE)) + " (or None for float32).",
        )
    return QUANTIZE[quantize]


def convert(module: torch.nn.Module, inputs: tuple[torch.Tensor, ...], recipe_name: str | None, dynamic_shapes: Any) -> bytes:
    """The ``.tflite`` flatbuffer litert-torch makes of ``module`` traced with ``inputs`` (exceptions pass through)."""
    import litert_torch

    quant_config = None
    if recipe_name is not None:
        from litert_torch.generative.quantize import quant_recipes

        quant_config = getattr(quant_recipes, recipe_name)()
    quiet = "LITERT_TORCH_SHOW_PROGRESS" not in os.environ  # its progress lines fill the terminal unless asked for
    if quiet:
        os.environ["LITERT_TORCH_SHOW_PROGRESS"] = "n"  # read at each step of the conversion
    try:
        with contextlib.redirect_stdout(sys.stderr):  # the quantizer prints its size report: stdout stays the caller's
            converted = litert_torch.convert(module, inputs, quant_config=quant_config, dynamic_shapes=dynamic_shapes)
            return bytes(converted.model_content())  # a quantized model comes as a bytearray
    finally:
        if quiet:
            del os.environ["LITERT_TORCH_SHOW_PROGRESS"]


@dataclass(frozen=True)
class TensorSignature:
    """One input or output of a converted model, as LiteRT's interpreter declares it."""

    name: str
    shape: tuple[int, ...]
    dtype: str

    def __str__(self) -> str:
        return f"{self.name}: {self.dtype}[{', '.join(map(str, self.shape))}]"


class Runner:
    """A ``.tflite`` model in LiteRT's CPU interpreter (``ai_edge_litert.interpreter``)."""

    def __init__(self, content: bytes) -> None:
        from ai_edge_litert import interpreter

        self.interpreter = interpreter.Interpreter(model_content=content)
        self.runner = self.interpreter.get_signature_runner(SIGNATURE)
        details_in, details_out = self.runner.get_input_details(), self.runner.get_output_details()
        self.inputs = [_signature(name, details_in[name]) for name in sorted(details_in, key=_position)]
        self.outputs = [_signature(name, details_out[name]) for name in sorted(details_out, key=_position)]

    def __call__(self, *inputs: torch.Tensor | np.ndarray) -> list[np.ndarray]:
        """Run once on the host; inputs are cast to the declared dtypes (int64 to int32 only when the values fit)."""
        if len(inputs) != len(self.inputs):
            raise ExportError(f"The exported model takes {len(self.inputs)} input(s), got {len(inputs)}.")
        feed = {sig.name: _as_declared(value, sig) for value, sig in zip(inputs, self.inputs, strict=True)}
        results = self.runner(**feed)
        return [np.asarray(results[sig.name]) for sig in self.outputs]


def _position(name: str) -> tuple[int, str]:
    """``args_10`` after ``args_9``: litert-torch names inputs ``args_N`` and outputs ``output_N``."""
    digits = name.rsplit("_", 1)[-1]
    return (int(digits) if digits.isdigit() else 0, name)


def _signature(name: str, detail: dict[str, Any]) -> TensorSignature:
    return TensorSignature(name, tuple(int(d) for d in detail["shape"]), np.dtype(detail["dtype"]).name)


def _as_declared(value: torch.Tensor | np.ndarray, sig: TensorSignature) -> np.ndarray:
    array = value.detach().cpu().numpy() if isinstance(value, torch.Tensor) else np.asarray(value)
    if tuple(array.shape) != sig.shape:
        raise ExportError(f"Input {sig.name} has shape {tuple(array.shape)}; the exported model takes {sig.shape}.")
    target = np.dtype(sig.dtype)
    if array.dtype != target and np.issubdtype(array.dtype, np.integer) and np.issubdtype(target, np.integer):
        info = np.iinfo(target)
        if array.size and (array.min() < info.min or array.max() > info.max):
            raise ExportError(f"Input {sig.name} holds values outside {sig.dtype}, the exported model's input type.")
    return array.astype(target, copy=False)
