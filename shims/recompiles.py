"""Graph compilations per step on lazy XLA devices, and one warning, with its cause, when steps compile after warm-up.

A lazy device compiles a graph the first time it sees it; a training loop settles after a few
steps (the first step, the first optimizer update) and then reuses its graphs. A step that
compiles after that pays a compilation: the usual causes are a shape that changes (a short last
batch, sequences of varying length) or a Python number baked into the graph (data kept on the
device and sliced at a moving offset).

:class:`RecompileWatch` reads torch_xla's ``UncachedCompile`` counter at each step boundary
(``ad.step()``, or ``optimizer.step()`` under cuda-compat; a host-side counter: no tensor is read
back). From the first step it also notes the shapes of the tensors handed to the outermost module
calls of each step (global module forward hooks: shapes are host metadata, nothing is synced), so a
step that compiled can be told apart: new input shapes, or the same shapes (then a value baked into
the graph changed). Steps that ran a module in eval mode or without grad (validation between epochs)
compile their own graphs once and are not counted.

One :class:`RecompileWarning` per process, at the user's line of the first compiling step: at once
when at least :data:`THRESHOLD` of the last :data:`WINDOW` steps after the first :data:`WARMUP`
compiled, otherwise at exit when any did (how many, at which steps, and the cause).
``ad.backend().compilations`` reports the count.
"""

from __future__ import annotations

import atexit
import os
import sys
import warnings
from collections import deque
from dataclasses import dataclass, field
from types import FrameType
from typing import Any

WARMUP = 5
"""Steps whose compilations are expected (first forward/backward, first optimizer step, ...)."""
WINDOW = 10
"""How many recent steps (after warm-up) are looked at."""
THRESHOLD = 5
"""Compiling steps within the window that trigger the warning at once (fewer are reported at exit)."""
HINT = (
    "Find it with PT_XLA_DEBUG_LEVEL=2 (it says why each graph compiled) or torch_xla.debug.metrics.metrics_report() "
    "(CompileTime, UncachedCompile)."
)


class RecompileWarning(UserWarning):
    """Steps compiled new XLA graphs after warm-up (each such step pays a compilation)."""


def compile_count() -> int:
    """Graphs torch_xla compiled in this process so far (its ``UncachedCompile`` counter)."""
    import torch_xla.debug.metrics as met

    return int(met.counter_value("UncachedCompile") or 0)


def _shapes(value: Any) -> list[tuple[int, ...]]:
    """Shapes of the tensors in ``value`` (nested tuples and lists, as an LSTM's hidden state), in order."""
    import torch

    if isinstance(value, torch.Tensor):
        return [tuple(value.shape)]
    if isinstance(value, (tuple, list)):
        return [shape for item in value for shape in _shapes(item)]
    return []


def _show(shapes: tuple[tuple[int, ...], ...]) -> str:
    return ", ".join(map(str, shapes))


@dataclass
class StepInputs:
    """What the outermost module calls of one step received: ``Module(shapes)`` texts, and whether any evaluated."""

    calls: list[str] = field(default_factory=list)
    evaluating: bool = False

    def signature(self) -> tuple[str, ...]:
        return tuple(dict.fromkeys(self.calls))


_NOTING: list[InputShapes] = []
"""The hooks installed now (removed before a ``torch.compile``: see :func:`stop_noting_inputs`)."""


def stop_noting_inputs() -> None:
    """Remove the global forward hooks (torch.compile(module) warns when global module hooks exist); causes then
    name no shapes."""
    for inputs in list(_NOTING):
        inputs.remove()


class InputShapes:
    """Global module forward hooks that note the input shapes of outermost module calls (no device value is read)."""

    def __init__(self) -> None:
        import torch

        self.depth = 0
        self.current = StepInputs()
        self.handles = (
            torch.nn.modules.module.register_module_forward_pre_hook(self._enter),
            torch.nn.modules.module.register_module_forward_hook(self._leave, always_call=True),
        )
        _NOTING.append(self)

    def _enter(self, module: Any, args: Any) -> None:
        import torch

        if torch.compiler.is_compiling():
            return
        if self.depth == 0:
            self.current.calls.append(f"{type(module).__name__}({_show(tuple(_shapes(args)))})")
            self.current.evaluating |= not (module.training and torch.is_grad_enabled())
        self.depth += 1

    def _leave(self, module: Any, args: Any, output: Any) -> None:
        import torch

        if not torch.compiler.is_compiling():
            self.depth = max(self.depth - 1, 0)

    def take(self) -> StepInputs:
        """The inputs since the previous step boundary; starts the next step's record."""
        taken, self.current, self.depth = self.current, StepInputs(), 0
        return taken

    def remove(self) -> None:
        for handle in self.handles:
            handle.remove()
        if self in _NOTING:
            _NOTING.remove(self)


@dataclass(frozen=True)
class Recompile:
    """One step after warm-up that compiled: its number, graphs compiled, its inputs (new ones or not) and the user's line."""

    step: int
    graphs: int
    signature: tuple[str, ...]
    new_inputs: bool
    where: tuple[str, int] | None


def user_frame() -> tuple[str, int] | None:
    """The innermost frame outside torch, torch_xla, anydevice and Python's library: the user's step call."""
    import torch

    import anydevice.errors

    xla = sys.modules.get("torch_xla")
    internal = tuple(
        os.path.dirname(path) + os.sep
        for path in (torch.__file__, anydevice.errors.__file__, __file__, getattr(xla, "__file__", None))
        if path
    )
    stdlib = os.path.dirname(os.__file__) + os.sep
    frame: FrameType | None = sys._getframe(1)
    while frame is not None:
        name = frame.f_code.co_filename
        library = name.startswith(stdlib) and f"-packages{os.sep}" not in name
        if not name.startswith(internal) and not library and not name.startswith("<"):
            return name, frame.f_lineno
        frame = frame.f_back
    return None


class RecompileWatch:
    """Counts compilations at every step of one selected device; warns once, with the cause, when steps compile after warm-up."""

    def __init__(self, device: str) -> None:
        self.device = device
        self.steps = 0
        self.baseline = compile_count()
        self.last = self.baseline
        self.recent: deque[bool] = deque(maxlen=WINDOW)
        self.warned = False
        self.inputs: InputShapes | None = None
        self.seen: dict[tuple[str, ...], int] = {}  # input signatures of steps that compiled nothing new, first step
        self.recompiles: list[Recompile] = []
        self.exit_report = False

    @property
    def compilations(self) -> int:
        """Graphs compiled since the device was selected."""
        return compile_count() - self.baseline

    def after_step(self) -> None:
        """Call after each step's sync: one counter read, no device work."""
        if self.inputs is None and not self.warned:
            self.inputs = InputShapes()  # from the first step boundary: the next step's inputs are noted
            self.last = compile_count()
            return
        now = compile_count()
        graphs, self.last = now - self.last, now
        step = self.inputs.take() if self.inputs is not None else StepInputs()
        if step.evaluating:  # validation ran since the last step: its graphs compile once, not a recompile
            return
        self.steps += 1
        signature = step.signature()
        if self.steps <= WARMUP or not graphs:
            self.seen.setdefault(signature, self.steps)
            if self.steps > WARMUP:
                self.recent.append(False)
            return
        self.recent.append(True)
        new_inputs = bool(signature) and signature not in self.seen
        self.recompiles.append(Recompile(self.steps, graphs, signature, new_inputs, user_frame()))
        if self.warned:
            return
        if sum(self.recent) >= THRESHOLD:
            self.report(self.message(frequent=True))
        elif not self.exit_report:
            self.exit_report = True
            atexit.register(self.report_at_exit)

    def report_at_exit(self) -> None:
        if not self.warned and self.recompiles:
            self.report(self.message(frequent=False))

    def report(self, text: str) -> None:
        self.warned = True
        if self.inputs is not None:
            self.inputs.remove()
            self.inputs = None
        where = self.recompiles[0].where if self.recompiles else None
        if where is None:
            warnings.warn(text, RecompileWarning, stacklevel=2)
        else:
            # module: this module's own name, the one warnings.filterwarnings(module=...) is given
            warnings.warn_explicit(text, RecompileWarning, where[0], where[1], module=__name__)

    def cause(self) -> str:
        """What changed at the compiling steps: new input shapes (before -> after), or the same shapes."""
        known = [sig for sig in self.seen if sig]
        new = [r for r in self.recompiles if r.new_inputs]
        if new and known:
            first = new[0]
            changed = sorted({" ".join(r.signature) for r in new})
            more = f" (and {len(changed) - 1} other input shape(s))" if len(changed) > 1 else ""
            return (
                f"the model's input shapes changed: {' '.join(known[0])} at the first steps, {' '.join(first.signature)} "
                f"at step {first.step}{more}. Each new shape compiles its own graph once: a short last batch "
                "(DataLoader(drop_last=True), or pad it to the full size) or inputs of varying length (pad to a few fixed "
                "lengths)."
            )
        if known:
            return (
                f"the model's input shapes were the same ({' '.join(known[0])}), so a value baked into the graph changed: "
                "data kept on the device and sliced with a moving offset (data[i:i+n] with a new i each step), a size or "
                "an index from Python that changes, or .item() inside the step. Keep it fixed: slice on the CPU and move "
                "each batch (ad.data_loader)."
            )
        return (
            "a shape or a Python number that changes every step, e.g. data kept on the device and sliced with a moving "
            "offset (data[i:i+n] with a new i each step), batches of varying size, or .item() inside the step. Keep "
            "shapes fixed, e.g. slice on the CPU and move each batch (ad.data_loader)."
        )

    def message(self, frequent: bool) -> str:
        """The warning: how often, at which steps, the likely cause, and how to find it."""
        steps = [r.step for r in self.recompiles]
        graphs = sum(r.graphs for r in self.recompiles)
        if frequent:
            how = (
                f"{sum(self.recent)} of the last {len(self.recent)} steps compiled a new XLA graph ({graphs} graphs in "
                f"{len(steps)} steps after the first {WARMUP}), so every step pays a compilation"
            )
        else:
            shown = ", ".join(map(str, steps[:8])) + (", ..." if len(steps) > 8 else "")
            how = (
                f"{len(steps)} step(s) after the first {WARMUP} compiled a new XLA graph ({graphs} graphs; step(s) {shown} "
                f"of {self.steps})"
            )
        return f"anydevice: {self.device}: {how}. Likely cause: {self.cause()} {HINT}"
