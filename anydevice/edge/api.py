"""``ad.export``: a trained model to an edge runtime's file, checked against PyTorch before it is written."""

from __future__ import annotations

import os
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from anydevice.errors import ExportError

if TYPE_CHECKING:
    import numpy as np
    import torch

    from anydevice.edge.compare import Check
    from anydevice.edge.litert import Runner, TensorSignature

TARGETS = ("litert",)


@dataclass
class ExportedModel:
    """What ``ad.export`` converted and wrote; calling it runs the file in LiteRT's CPU interpreter."""

    path: Path
    target: str
    inputs: list[TensorSignature]
    outputs: list[TensorSignature]
    size_bytes: int
    quantize: str | None  # litert-torch's recipe name (``full_dynamic_recipe`` for ``"int8"``), None for float32
    versions: dict[str, str]  # litert-torch, ai-edge-litert, torch
    check: Check | None  # None only on ranks other than the writer's
    _runner: Runner | None = field(default=None, repr=False)

    def __call__(self, *inputs: Any) -> list[np.ndarray]:
        """The exported model's outputs for ``inputs`` (tensors or arrays), from LiteRT's interpreter on the host."""
        if self._runner is None:
            from anydevice.edge.litert import Runner

            self._runner = Runner(self.path.read_bytes())
        return self._runner(*inputs)

    def summary(self) -> str:
        """A few lines: the file, its signature, the precision and the check's result."""
        precision = f"quantized ({self.quantize})" if self.quantize else "float32"
        lines = [
            f"{self.path} ({self.size_bytes:,} bytes, {self.target}, {precision}; litert-torch {self.versions['litert-torch']})",
            "inputs:  " + ", ".join(map(str, self.inputs)),
            "outputs: " + ", ".join(map(str, self.outputs)),
        ]
        if self.check is not None:
            lines.append(f"check:   {self.check}")
        return "\n".join(lines)

    def as_dict(self) -> dict[str, Any]:
        """The description as plain JSON-able values."""
        check = self.check
        return {
            "path": str(self.path),
            "target": self.target,
            "inputs": [vars(s) for s in self.inputs],
            "outputs": [vars(s) for s in self.outputs],
            "size_bytes": self.size_bytes,
            "quantize": self.quantize,
            "versions": self.versions,
            "check": None if check is None else {k: getattr(check, k) for k in check.__dataclass_fields__},
        }


def export(
    model: torch.nn.Module,
    example_inputs: Any,
    target: str = "litert",
    path: str | os.PathLike[str] = "model.tflite",
    *,
    quantize: str | None = None,
    tolerance: tuple[float, float] | None = None,
    dynamic_shapes: Any = None,
) -> ExportedModel:
    """Convert ``model`` for ``target`` (``"litert"``), check it against PyTorch, write ``path`` atomically.

    ``model`` may be on any device, compiled, DDP- or FSDP2-wrapped: a host copy in eval mode is
    converted, the model itself is left as it was. ``example_inputs`` (a tensor or a tuple) fix
    the shapes and are the check's inputs. ``quantize``: ``"int8"`` (dynamic-range int8),
    ``"int8_weight_only"``, ``"fp16"`` or a litert-torch recipe name. ``tolerance``: ``(atol,
    rtol)``; the default is ``1e-4`` each for float32 and 10% of the output's largest magnitude for
    int8 (:mod:`anydevice.edge.compare`). A construct that cannot convert, or outputs that disagree
    beyond the tolerance, raise :class:`~anydevice.errors.ExportError` and write nothing.
    With a process group every rank must call it (gathering sharded weights is collective);
    rank 0 converts and writes, the other ranks return the file's description without ``check``.
    """
    if target not in TARGETS:
        raise ExportError(f"Unknown export target {target!r}.", "Targets: " + ", ".join(TARGETS) + ".")
    from anydevice.edge import litert
    from anydevice.edge.host import check_model, host_copy, host_inputs

    recipe = litert.recipe(quantize)
    destination = check_destination(Path(path))
    check_model(model)
    inputs = host_inputs(example_inputs)
    versions = litert.require()

    import torch

    from anydevice.checkpoint.saving import on_main_rank

    module = host_copy(model)
    described: list[ExportedModel] = []

    def convert_check_write() -> None:
        described.append(_convert_and_check(module, inputs, recipe, tolerance, dynamic_shapes, destination))

    on_main_rank(convert_check_write, f"export {destination}")
    if described:
        return described[0]
    runner = litert.Runner(destination.read_bytes())
    info = {"litert-torch": versions[0], "ai-edge-litert": versions[1], "torch": torch.__version__}
    size = destination.stat().st_size
    return ExportedModel(destination, target, runner.inputs, runner.outputs, size, recipe, info, None, runner)


def _convert_and_check(
    module: torch.nn.Module,
    inputs: tuple[torch.Tensor, ...],
    recipe: str | None,
    tolerance: tuple[float, float] | None,
    dynamic_shapes: Any,
    destination: Path,
) -> ExportedModel:
    import torch
    from torch.utils._pytree import tree_leaves

    from anydevice.edge import compare, diagnose, litert

    with torch.no_grad():
        reference = [t.detach().float().numpy() if t.is_floating_point() else t.numpy() for t in tree_leaves(module(*inputs))]
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", FutureWarning)  # litert-torch's own deprecation notes on torch's pytree API
            warnings.simplefilter("ignore", DeprecationWarning)
            content = litert.convert(module, inputs, recipe, dynamic_shapes)
    except Exception as exc:
        raise diagnose.conversion_error(exc, diagnose.source_files(module.modules()), "litert") from exc
    runner = litert.Runner(content)
    got = runner(*inputs)
    atol, rtol = compare.tolerance_for(recipe, reference, tolerance)
    check = compare.compare(got, reference, atol, rtol)
    if not check.passed:
        raise ExportError(
            f"The exported model disagrees with PyTorch on the example inputs: {check} (output {check.worst_output}). "
            "Nothing was written.",
            "A LiteRT kernel computes differently here: try without quantize=, or pass a looser tolerance=(atol, rtol) "
            "if this error is acceptable for the model.",
        )
    _publish(destination, content)
    versions = litert.require()
    info = {"litert-torch": versions[0], "ai-edge-litert": versions[1], "torch": torch.__version__}
    return ExportedModel(destination, "litert", runner.inputs, runner.outputs, len(content), recipe, info, check, runner)


def _is_tflite(head: bytes) -> bool:
    return head[4:8] == b"TFL3"  # a TFLite / LiteRT flatbuffer's file identifier


def check_destination(path: Path) -> Path:
    """Refuse, before any work, a path that is not a regular file (a directory, a FIFO, ``/dev/stdout`` on a pipe,
    a device) or a file other than an earlier ``.tflite``; its type is judged before it is opened."""
    from anydevice.errors import FileAccessError
    from anydevice.files.safe_files import read_head

    try:
        head = read_head(path, 8, "export to")
    except FileAccessError as exc:
        raise ExportError(
            str(exc).splitlines()[0],
            "Give the path of a regular file, e.g. model.tflite: the model is written beside it and renamed into place, "
            "which a pipe, a device or a directory cannot take.",
        ) from None
    if head and not _is_tflite(head):
        raise ExportError(
            f"Cannot export to {path}: a file that is not a LiteRT model is there; it was left as it was.",
            "Move it away or choose another path.",
        )
    return path


def _publish(path: Path, content: bytes) -> None:
    """Write ``content`` to ``path`` the project's safe way: a locked temporary, fsync, one rename."""
    from anydevice.checkpoint.saving import write_safely

    write_safely(path, lambda handle: handle.write(content), accepts=_is_tflite)
