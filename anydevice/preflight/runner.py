"""The child process of ``anydevice check``: runs the user's script on the CPU for N steps under hooks.

    python -m anydevice.preflight.runner OUT.json STEPS WORLD_SIZE MESH USER_CWD SCRIPT [ARGS...]

It runs in a scratch working directory (``anydevice check`` starts it there); USER_CWD is the folder the user
ran check from: the script reads its files through :class:`~anydevice.preflight.scratch.ScratchView` and
writes into scratch. MESH is the mesh to check as JSON (``{"dp": 2, "tp": 4}``), or ``-`` for none;
WORLD_SIZE 0 means not given. The script's own first mesh (``ad.distributed.mesh(...)`` or
``init_device_mesh(...)``) is recorded with its line and built over this one process (every degree 1) so the
script runs on; without MESH it is the mesh checked, and without WORLD_SIZE the world is the product of its
fixed degrees.

The hooks wrap ``DataLoader.__iter__`` (each batch's signature, and a short last batch), the top-level
``Module.__call__`` (the model and its first inputs; the first iteration's ops under
:class:`~anydevice.preflight.observe.OpRecorder`; each other model's first call, for the compiled step) and every
optimizer step (global hooks: each optimizer the script steps is recorded, a GAN's two included, with its
parameters and state; the first iteration ends at the step of the optimizer that updates the model; the run
stops after N steps, at the end of an iteration). A ``@torch.compile``'d step runs with dynamo off (eagerly,
the same math), so its calls and steps are seen. The step boundary is the optimizer step: a script without a
DataLoader (a ``get_batch()`` of its own) is observed from the model's calls, whose inputs give the
signatures. Only calls with gradients on count (an evaluation under ``torch.no_grad()`` is not the step).
Then the observation is written to OUT as JSON. A script that fails first writes ``{"error": ...}``.
"""

from __future__ import annotations

import contextlib
import json
import math
import sys
import traceback
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import torch
import torch.utils.data
from torch.optim.optimizer import register_optimizer_step_post_hook, register_optimizer_step_pre_hook

from anydevice.preflight.epoch import short_last_batch
from anydevice.preflight.observe import Observer, OpRecorder, detached
from anydevice.preflight.schema import CpuRun, CudaCall
from anydevice.preflight.scratch import ScratchView
from anydevice.preflight.source_calls import calls_in
from anydevice.runtime.script_main import run_as_main


class _Enough(BaseException):
    """Raised from the optimizer hook after N steps: ends the script (a BaseException, so `except Exception` keeps going)."""


class Hooks:
    """Installs the hooks and turns what they see into an Observer's input."""

    def __init__(self, observer: Observer) -> None:
        self.observer = observer
        self.loader_seen = False
        self.depth = 0
        self.optimizer: torch.optim.Optimizer | None = None
        """The optimizer that updates the observed model (None until it steps)."""
        self.optimizers: list[torch.optim.Optimizer] = []
        """Every optimizer stepped, in the order of their first steps."""
        self.iteration_done = False
        self.made: list[tuple[torch.optim.Optimizer, str | None]] = []
        """Every optimizer the script made, with the line: the run waits (a while) for each to step."""
        self.calls: list[tuple[torch.nn.Module, Any, Any]] = []
        """Each module's first training call in the first iteration, with its inputs (a GAN: the generator's and the
        discriminator's): the compiled step holds every model an optimizer updates."""
        self.recording = False
        self.model: torch.nn.Module | None = None
        """The module of the first training call (its later calls give the signatures when there is no DataLoader)."""
        self.script_mesh: tuple[dict[str, int], str | None] | None = None
        self.first_batch: Any = None

    def install(self) -> None:
        loader_iter = torch.utils.data.DataLoader.__iter__
        module_call = torch.nn.Module.__call__
        hooks = self

        def iterate(loader: Any) -> Any:
            if not hooks.loader_seen:
                hooks.first_loader(loader)
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
                if hooks.first_batch is None:
                    hooks.first_batch = batch  # the compiled check finds the loss's targets in it
                yield batch

        def call(module: torch.nn.Module, *args: Any, **kwargs: Any) -> Any:
            if hooks.depth or not torch.is_grad_enabled() or not any(p.requires_grad for p in module.parameters()):
                return hooks.nested(module_call, module, args, kwargs)  # inside the model, or not a training call
            first_of_module = False
            if hooks.iteration_done:
                hooks.stop_recording()  # the first iteration ended: its ops after the optimizer steps are in
            elif all(module is not m for m, _, _ in hooks.calls):  # each model's first training call (a GAN's two)
                hooks.calls.append((module, detached(args), detached(kwargs)))
                first_of_module = True
            if not hooks.loader_seen and (hooks.model is None or module is hooks.model):
                hooks.observer.batch((args, kwargs))  # no DataLoader: the model's inputs are the batches
            if hooks.observer.model is None:
                hooks.model = module
                hooks.recording = True
                hooks.observer.recorder.__enter__()  # type: ignore[no-untyped-call]  # TorchDispatchMode.__enter__ is untyped
                with hooks.observer.first_call(module, args, kwargs):
                    return hooks.nested(module_call, module, args, kwargs)
            if first_of_module:  # another model (a GAN's discriminator): what it saves for backward is counted too
                with hooks.observer.other_call(module):
                    return hooks.nested(module_call, module, args, kwargs)
            return hooks.nested(module_call, module, args, kwargs)

        loader_class: Any = torch.utils.data.DataLoader  # both patched for the observed run, restored after
        module_class: Any = torch.nn.Module
        loader_class.__iter__ = iterate
        module_class.__call__ = call
        made = torch.optim.Optimizer.__init__

        def construct(optimizer: torch.optim.Optimizer, *args: Any, **kwargs: Any) -> None:
            made(optimizer, *args, **kwargs)
            if all(optimizer is not o for o, _ in hooks.made):
                hooks.made.append((optimizer, hooks.observer.caller()))

        optimizer_class: Any = torch.optim.Optimizer  # every optimizer the script makes, stepped or not
        optimizer_class.__init__ = construct
        register_optimizer_step_pre_hook(self.stepping)
        register_optimizer_step_post_hook(self.stepped)
        self.watch_meshes()

    def first_loader(self, loader: torch.utils.data.DataLoader[Any]) -> None:
        """The first DataLoader iterated: its batches are the signatures from now on, and its last batch is checked."""
        self.loader_seen = True
        if self.observer.steps_done == 0 and self.observer.model is not None:
            self.restart()  # a model call before the loop (a warm-up on a dummy input) is not the step
        self.observer.short_last = short_last_batch(loader, self.observer.world_size, self.observer.caller())

    def restart(self) -> None:
        """Forget the model call seen so far: the observation starts again at the next one."""
        self.stop_recording()
        self.observer.recorder = OpRecorder()
        self.observer.model, self.model = None, None
        self.observer.batches.clear()
        self.calls.clear()
        self.observer.other_activations = 0

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

        ad_distributed.mesh = ad_mesh  # type: ignore[assignment]  # replaced for the observed run, restored after
        device_mesh.init_device_mesh = init_device_mesh  # ad.distributed.mesh imports it from here at each call

    def mesh_seen(self, degrees: dict[str, int]) -> None:
        """The script's own first mesh, with its line (checked unless ``--mesh`` names another)."""
        if self.script_mesh is None:
            self.script_mesh = (degrees, self.observer.caller())

    def stepping(self, optimizer: torch.optim.Optimizer, args: Any, kwargs: Any) -> None:
        if self.observer.model is not None and any(optimizer is o for o in self.optimizers) and not self.iteration_done:
            self.end_iteration()  # an optimizer steps a second time: the first iteration (every optimizer once) is in
        self.observer.recorder.in_optimizer = True

    def end_iteration(self) -> None:
        """The first iteration ended: what follows is after its step (a logging read); recording ends at the next model call."""
        self.iteration_done = True
        self.observer.recorder.stepped = True

    def nested(self, module_call: Any, module: torch.nn.Module, args: Any, kwargs: Any) -> Any:
        self.depth += 1
        try:
            return module_call(module, *args, **kwargs)
        finally:
            self.depth -= 1

    def stop_recording(self) -> None:
        if self.recording:
            self.recording = False
            self.observer.recorder.__exit__(None, None, None)  # type: ignore[no-untyped-call]  # TorchDispatchMode.__exit__ is untyped

    def stepped(self, optimizer: torch.optim.Optimizer, args: Any, kwargs: Any) -> None:
        """After each optimizer step. Every optimizer is recorded (a GAN steps two); the iteration ends at the step of
        the one that updates the observed model, and the run stops after N steps at the end of an iteration."""
        self.observer.recorder.in_optimizer = False
        if self.observer.model is None:
            return  # an optimizer stepped before the model ran on a loader batch
        if not any(optimizer is o for o in self.optimizers):
            self.optimizers.append(optimizer)
        updates_model = self.updates_model(optimizer)
        if updates_model and self.optimizer is None:
            self.optimizer = optimizer  # the compiled step's optimizer: the one that updates the observed model
        self.observer.optimizer_step(optimizer)
        self.observer.steps_done += 1
        if updates_model and not self.iteration_done:
            self.end_iteration()
        enough = self.observer.steps_done >= self.observer.steps
        last_of_cycle = optimizer is self.optimizers[-1]  # the next step starts the cycle again (a GAN: D's step, then G's)
        every = all(any(m is o for o in self.optimizers) for m, _ in self.made)  # a WGAN's generator steps every 5th
        waited = (self.optimizer is not None and every) or self.observer.steps_done >= 2 * self.observer.steps + 8
        if enough and last_of_cycle and waited:
            raise _Enough

    def updates_model(self, optimizer: torch.optim.Optimizer) -> bool:
        """Whether ``optimizer`` holds a parameter of the observed model."""
        model = self.observer.model
        ids = {id(p) for p in model.parameters()} if model is not None else set()
        return any(id(p) in ids for group in optimizer.param_groups for p in group["params"])

    def compiled_optimizer(self) -> torch.optim.Optimizer | None:
        """The optimizer of the compiled step: the one that updates the observed model, else the first stepped."""
        return self.optimizer or (self.optimizers[0] if self.optimizers else None)

    def parts(self) -> tuple[list[tuple[torch.nn.Module, Any, Any, torch.optim.Optimizer]], list[int]]:
        """The other models of the step, each with its first call's inputs and the optimizer that updates it, and the
        indices (in the order of first steps) of every optimizer the compiled step then holds."""
        from anydevice.preflight.observe import unwrap

        main = self.compiled_optimizer()
        covered = [i for i, o in enumerate(self.optimizers) if o is main]
        parts = []
        for i, optimizer in enumerate(self.optimizers):
            if optimizer is main:
                continue
            held = {id(p) for group in optimizer.param_groups for p in group["params"]}
            for module, args, kwargs in self.calls:
                if module is not self.observer.model and held <= {id(p) for p in module.parameters()}:
                    parts.append((unwrap(module), tuple(args), dict(kwargs), optimizer))
                    covered.append(i)
                    break
        return parts, covered


@contextlib.contextmanager
def _eager() -> Iterator[None]:
    """Dynamo off while the script runs: a ``@torch.compile``'d step (or model) runs eagerly, the same math, so its
    model calls and optimizer steps reach the hooks; dynamo is back for the capture analysis afterwards."""
    import torch._dynamo

    before = torch._dynamo.config.disable
    torch._dynamo.config.disable = True
    try:
        yield
    finally:
        torch._dynamo.config.disable = before


def _cuda_calls() -> list[CudaCall]:
    from anydevice.cuda_compat import control

    calls = control.report().get("calls", [])
    return [CudaCall.model_validate(c) for c in calls] if isinstance(calls, list) else []


def _error(out: str, result: dict[str, Any]) -> int:
    Path(out).write_text(json.dumps(result))
    return 3


def main(argv: list[str]) -> int:
    out, steps, world, mesh, user_cwd, script, *args = argv
    observer = Observer(int(steps), int(world) or 1, None if mesh == "-" else json.loads(mesh))
    hooks = Hooks(observer)
    hooks.install()
    from anydevice.cuda_compat import control

    control.record_lines()  # each CUDA-only call keeps the script's file:line (cuda-compat enables at its import of torch)
    view = ScratchView(Path.cwd(), Path(user_cwd), Path(script).parent)
    view.install()
    sys.argv = [script, *args]
    sys.path.insert(0, str(Path(script).resolve().parent))  # the script's own modules import as under `python SCRIPT`
    try:
        with _eager():
            run_as_main(script)  # its objects live on as ``__main__``, as under ``python SCRIPT``
    except _Enough:
        pass
    except SystemExit as exc:
        if observer.steps_done == 0:
            code = exc.code if exc.code is not None else 0
            return _error(out, {"error": f"the script exited with status {code} before its first step", "exit": True})
    except BaseException as exc:
        hooks.stop_recording()
        if observer.steps_done == 0:
            frames = traceback.extract_tb(exc.__traceback__)
            where = next((f"{f.filename}:{f.lineno}" for f in reversed(frames) if "anydevice/" not in f.filename), None)
            first = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
            return _error(out, {"error": f"{type(exc).__name__}: {first}", "line": where, "stdin": isinstance(exc, EOFError)})
    hooks.stop_recording()
    if observer.steps_done:
        unstepped = [(o, line) for o, line in hooks.made if all(o is not s for s in hooks.optimizers)]
        observer.optimizer_stepped(hooks.optimizers, observer.model, unstepped)  # every optimizer, with its state
    if observer.model is None:
        return _error(out, {"error": "no_model"})
    if observer.steps_done == 0 and not hooks.loader_seen:
        return _error(out, {"error": "no_step"})  # without a DataLoader, the optimizer step is what marks a step
    if hooks.script_mesh is not None:
        if observer.mesh is None:
            observer.mesh, observer.mesh_line = hooks.script_mesh
            if int(world) == 0:  # -n not given: the world the script's mesh names (its fixed degrees)
                observer.world_size = math.prod(size for size in observer.mesh.values() if size > 0)
        else:
            observer.script_mesh, observer.script_mesh_line = hooks.script_mesh  # --mesh is checked; the script's is noted
    observation = observer.finish(cuda_calls=_cuda_calls())
    observation.run = CpuRun(workdir=str(Path.cwd()), files=view.written(), from_loader=hooks.loader_seen)
    observation.source_calls = calls_in(Path(script))  # what the script does after the steps run here, too
    Path(out).write_text(observation.model_dump_json())
    from anydevice.preflight.runner_protocol import COMPILE_REQUEST

    request = Path(out).with_name(COMPILE_REQUEST)
    if request.exists():  # --target tpu:<slice>: compile the step with libtpu, one slice at a time
        return _compile(json.loads(request.read_text()), hooks, observation, Path(out))
    return 0


def _compile(request: dict[str, Any], hooks: Hooks, observation: Any, out: Path) -> int:
    """Compile the observed step per slice; OUT is rewritten after each, and ``compiling`` names the one under way
    (a compile killed for host memory or time is then named by the parent)."""
    from anydevice.errors import AnyDeviceError
    from anydevice.preflight.compiled import choose_loss, compile_slices
    from anydevice.preflight.observe import unwrap
    from anydevice.preflight.runner_protocol import COMPILING

    model = unwrap(hooks.observer.model) if hooks.observer.model is not None else None
    loss = choose_loss(hooks.first_batch, hooks.observer.args, hooks.observer.kwargs, (u.op for u in observation.ops))
    mesh = request.get("mesh") or observation.mesh
    if mesh and not set(mesh) <= {"dp", "fsdp", "tp"}:
        mesh = None  # the script's own axis names: the compiled step takes dp over the slice (said in its program)
    parts, covered = hooks.parts()
    from anydevice.planner.child import plan_observed, requested

    if (options := requested()) is not None:  # anydevice plan: the step planned per target instead (anydevice.planner)
        return plan_observed(
            options, model, hooks.observer.args, hooks.observer.kwargs, hooks.compiled_optimizer(), loss, observation, out
        )
    for target in request["targets"]:
        out.with_name(COMPILING).write_text(target)
        try:
            step = compile_slices(
                model,
                hooks.observer.args,
                hooks.observer.kwargs,
                hooks.compiled_optimizer(),
                [target],
                mesh,
                loss,
                parts=parts,
                covered=covered,
            )
        except AnyDeviceError as exc:
            out.write_text(json.dumps({"error": "compile_refused", "message": str(exc)}))
            return 3
        observation.compiled.update(step)
        out.write_text(observation.model_dump_json())
    out.with_name(COMPILING).unlink(missing_ok=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
