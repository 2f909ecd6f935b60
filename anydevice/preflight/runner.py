"""The child process of ``anydevice check``: runs the user's script on the CPU for N steps under hooks.

    python -m anydevice.preflight.runner OUT.json STEPS WORLD_SIZE MESH SCRIPT [ARGS...]

MESH is the mesh to check as JSON (``{"dp": 2, "tp": 4}``), or ``-`` for none; WORLD_SIZE 0 means not given.
Without MESH, the script's own first mesh (``ad.distributed.mesh(...)`` or ``init_device_mesh(...)``) is
recorded with its line and built over this one process (every degree 1) so the script runs on; without
WORLD_SIZE the world is then the product of its fixed degrees.

The hooks wrap ``DataLoader.__iter__`` (each batch's signature), the top-level ``Module.__call__`` (the
model and its first inputs; the first step's ops under :class:`~anydevice.preflight.observe.OpRecorder`)
and every optimizer step (a global post hook: memory after the first step, a stop after the N-th).
Then the observation is written to OUT as JSON. A script that fails first writes ``{"error": ...}``.
"""

from __future__ import annotations

import json
import math
import runpy
import sys
import traceback
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import torch
import torch.utils.data
from torch.optim.optimizer import register_optimizer_step_post_hook, register_optimizer_step_pre_hook

from anydevice.preflight.observe import Observer
from anydevice.preflight.schema import CudaCall


class _Enough(BaseException):
    """Raised from the optimizer hook after N steps: ends the script (a BaseException, so `except Exception` keeps going)."""


class Hooks:
    """Installs the hooks and turns what they see into an Observer's input."""

    def __init__(self, observer: Observer) -> None:
        self.observer = observer
        self.loader_seen = False
        self.depth = 0
        self.optimizer: torch.optim.Optimizer | None = None
        self.recording = False
        self.calls = 0
        self.script_mesh: tuple[dict[str, int], str | None] | None = None

    def install(self) -> None:
        loader_iter = torch.utils.data.DataLoader.__iter__
        module_call = torch.nn.Module.__call__
        hooks = self

        def iterate(loader: Any) -> Any:
            hooks.loader_seen = True
            batches = loader_iter(loader)
            while True:
                hooks.observer.recorder.paused = True  # making a batch is host-side data work, not the step's
                try:
                    batch = next(batches)
                except StopIteration:
                    return
                finally:
                    hooks.observer.recorder.paused = False
                hooks.observer.batch(batch)
                yield batch

        def call(module: torch.nn.Module, *args: Any, **kwargs: Any) -> Any:
            if hooks.depth or not hooks.loader_seen:
                return hooks.nested(module_call, module, args, kwargs)
            hooks.calls += 1
            if hooks.observer.steps_done:
                hooks.stop_recording()  # the first iteration ended: its ops after the optimizer step are in
            if hooks.observer.model is None and any(p.requires_grad for p in module.parameters()):
                hooks.recording = True
                hooks.observer.recorder.__enter__()  # type: ignore[no-untyped-call]
                with hooks.observer.first_call(module, args, kwargs):
                    return hooks.nested(module_call, module, args, kwargs)
            return hooks.nested(module_call, module, args, kwargs)

        torch.utils.data.DataLoader.__iter__ = iterate  # type: ignore[method-assign]
        torch.nn.Module.__call__ = call  # type: ignore[method-assign]
        register_optimizer_step_pre_hook(self.stepping)
        register_optimizer_step_post_hook(self.stepped)
        if self.observer.mesh is None:
            self.watch_meshes()

    def watch_meshes(self) -> None:
        """Record the script's first mesh (degrees and line) and build it over this one process instead."""
        import torch.distributed.device_mesh as device_mesh

        import anydevice.distributed as ad_distributed

        named, positional = ad_distributed.mesh, device_mesh.init_device_mesh
        hooks = self

        def ad_mesh(shape: Any, names: Any = None) -> Any:
            if isinstance(shape, Mapping):
                hooks.mesh_seen(dict(shape))
                return named({axis: 1 for axis in shape})
            dims = (shape,) if isinstance(shape, int) else tuple(shape)
            hooks.mesh_seen(dict(zip(names or [f"dim{i}" for i in range(len(dims))], dims)))
            return named((1,) * len(dims), names)

        def init_device_mesh(device_type: str, mesh_shape: Any, *args: Any, **kwargs: Any) -> Any:
            names = kwargs.get("mesh_dim_names")
            hooks.mesh_seen(dict(zip(names or [f"dim{i}" for i in range(len(mesh_shape))], mesh_shape)))
            return positional(device_type, (1,) * len(mesh_shape), *args, **kwargs)

        ad_distributed.mesh = ad_mesh  # type: ignore[assignment]
        device_mesh.init_device_mesh = init_device_mesh  # ad.distributed.mesh imports it from here at each call

    def mesh_seen(self, degrees: dict[str, int]) -> None:
        if self.script_mesh is None:
            self.script_mesh = (degrees, self.observer.caller())

    def stepping(self, optimizer: torch.optim.Optimizer, args: Any, kwargs: Any) -> None:
        self.observer.recorder.in_optimizer = True

    def nested(self, module_call: Any, module: torch.nn.Module, args: Any, kwargs: Any) -> Any:
        self.depth += 1
        try:
            return module_call(module, *args, **kwargs)
        finally:
            self.depth -= 1

    def stop_recording(self) -> None:
        if self.recording:
            self.recording = False
            self.observer.recorder.__exit__(None, None, None)  # type: ignore[no-untyped-call]

    def stepped(self, optimizer: torch.optim.Optimizer, args: Any, kwargs: Any) -> None:
        self.observer.recorder.in_optimizer = False
        if self.observer.model is None:
            return  # an optimizer stepped before the model ran on a loader batch
        self.observer.steps_done += 1
        if self.observer.steps_done == 1:
            self.observer.recorder.stepped = True
            self.observer.optimizer_stepped(optimizer, self.observer.model)
        if self.observer.steps_done >= self.observer.steps:
            raise _Enough


def _cuda_calls() -> list[CudaCall]:
    from anydevice.cuda_compat import control

    calls = control.report().get("calls", [])
    return [CudaCall.model_validate(c) for c in calls] if isinstance(calls, list) else []


def main(argv: list[str]) -> int:
    out, steps, world, mesh, script, *args = argv
    observer = Observer(int(steps), int(world) or 1, None if mesh == "-" else json.loads(mesh))
    hooks = Hooks(observer)
    hooks.install()
    from anydevice.cuda_compat import control

    control.record_lines()  # each CUDA-only call keeps the script's file:line (cuda-compat enables at its import of torch)
    sys.argv = [script, *args]
    sys.path.insert(0, str(Path(script).resolve().parent))
    result: dict[str, Any]
    try:
        runpy.run_path(script, run_name="__main__")
    except _Enough:
        pass
    except SystemExit as exc:
        if exc.code not in (None, 0) and observer.steps_done == 0:
            Path(out).write_text(json.dumps({"error": f"the script exited with status {exc.code} before its first step"}))
            return 3
    except BaseException as exc:
        hooks.stop_recording()
        if observer.steps_done == 0:
            frames = traceback.extract_tb(exc.__traceback__)
            where = next((f"{f.filename}:{f.lineno}" for f in reversed(frames) if "anydevice/" not in f.filename), None)
            result = {
                "error": f"{type(exc).__name__}: {str(exc).strip().splitlines()[0] if str(exc).strip() else ''}",
                "line": where,
            }
            Path(out).write_text(json.dumps(result))
            return 3
    hooks.stop_recording()
    if not hooks.loader_seen:
        Path(out).write_text(json.dumps({"error": "no_loader"}))
        return 3
    if observer.model is None:
        Path(out).write_text(json.dumps({"error": "no_model"}))
        return 3
    if hooks.script_mesh is not None:
        observer.mesh, observer.mesh_line = hooks.script_mesh
        if int(world) == 0:  # -n not given: the world the script's mesh names (its fixed degrees)
            observer.world_size = math.prod(size for size in observer.mesh.values() if size > 0)
    observation = observer.finish(cuda_calls=_cuda_calls())
    Path(out).write_text(observation.model_dump_json())
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
