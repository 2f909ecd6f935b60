"""No silent CPU run: a rank says when the device it was asked for is not used, at the first step; and when nothing stepped.

``ANYDEVICE=xla anydevice run script.py`` of a program that finds its device itself (``torch.accelerator``,
Lightning Fabric's ``"auto"``) trains on the CPU: torch_xla is no ``torch.accelerator`` device, and nothing
in the program imports it. The device is not used while none of its vendor modules
(``DeviceSpec.vendor_modules``, such as ``torch_xla``) is imported, since a tensor cannot reach the device
without them. Rank 0 says so, why, and how to fix it at the program's first step (:func:`watch_first_step`):
its first backward pass (``torch.autograd.backward``, which ``Tensor.backward`` calls, or
``torch.autograd.grad``) or its first optimizer step, whichever comes first, so a loop that updates its
weights by hand and ends with ``os._exit`` is told too; or at its end when no step said it
(:func:`never_used_line`). A run whose program imported torch but never stepped (no backward pass, no
optimizer step: a program that decided on its device count not to train) says that at its end
(:func:`never_stepped_line`). A first step whose tensors are on the CPU is said too where the vendor module is
imported, and for the devices torch finds itself (cuda, mps, xpu: :func:`cpu_step_line`); the host and
third-party devices (whose tensors may live in host memory) are never reported as unused.
"""

from __future__ import annotations

import functools
import os
import sys
from collections import OrderedDict
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from torch.utils.hooks import RemovableHandle

AT_EXIT = "this process never used {device}: {modules} was never imported, so it ran on the CPU"
"""What the exit line says happened."""
AT_FIRST_STEP = (
    "this process is not using {device}: {modules} is not imported at its first {moment}, so this step runs on {where}"
)
"""What the first-step line says happens (``moment``: :data:`BACKWARD` or :data:`OPTIMIZER_STEP`)."""
BACKWARD = "backward pass"
OPTIMIZER_STEP = "optimizer step"
NEVER_STEPPED = (
    "anydevice: ANYDEVICE={asked} was asked for, but this process never stepped: no backward pass and no optimizer "
    "step ran, so it trained nothing. A program that decides on its device (torch.accelerator.device_count(), "
    "torch.cuda.is_available()) may have chosen not to train; an inference script can ignore this line "
    "(ANYDEVICE_QUIET=1 silences it)."
)
"""The exit line of a run that imported torch and never stepped (:func:`never_stepped_line`)."""
_said_at_first_step = False
_stepped = False
"""Whether this process ran a backward pass or an optimizer step (set by :func:`watch_first_step`'s hooks)."""


def asked_device(value: str) -> str | None:
    """The one device ``ANYDEVICE`` names (``"xla"`` for ``xla:0``), or None (unset, ``auto``, a list, malformed).

    Read by the one device grammar (:func:`anydevice.runtime.selection.parse`); a malformed value is the selection's
    own error to report, not this check's.
    """
    from anydevice.errors import SelectionError
    from anydevice.runtime.selection import parse

    try:
        request = parse(value)
    except SelectionError:
        return None
    return request.items[0].name if len(request.items) == 1 else None


def unused_device(value: str) -> tuple[str, tuple[str, ...]] | None:
    """The device ``ANYDEVICE=value`` names and its vendor modules, when it has some and none is imported; else None.

    Resolved through the registry in use (third-party plugins included, so a third-party device is covered too),
    except a built-in device without vendor modules (cpu, cuda, ...), which loads no third-party plugin into the rank
    at its end (whose exit handlers would then run at this process's exit).
    """
    name = asked_device(value)
    if name is None or "torch" not in sys.modules:
        return None
    from anydevice.runtime.registry import builtin_registry, get_registry

    builtin = builtin_registry()
    known = builtin.canonical(name)
    if known is not None and not builtin.get(known).spec.vendor_modules:
        return None  # a built-in device torch finds itself (cpu, cuda, ...): nothing to import, no plugin loaded
    registry = get_registry()
    canonical = registry.canonical(name)
    if canonical is None:
        return None
    modules = registry.get(canonical).spec.vendor_modules
    if not modules or any(module in sys.modules for module in modules):
        return None
    return canonical, modules


def unused_line(value: str, compat: bool, finding: str) -> str | None:
    """The line for ``ANYDEVICE=value`` when its device is not used (:func:`unused_device`), or None.

    ``finding`` (:data:`AT_EXIT`, :data:`AT_FIRST_STEP`) says what happened; why and the fix follow.
    """
    unused = unused_device(value)
    if unused is None:
        return None
    canonical, modules = unused
    fix = (
        "the program imports torch through a path cuda-compat does not see; place tensors with ad.device()"
        if compat
        else f"run it with `anydevice run` (torch.accelerator then names {canonical}), a program that names cuda with "
        "`anydevice run --cuda-compat`, or place tensors with ad.device()"
    )
    what = finding.format(device=canonical, modules=" and ".join(modules))
    return (
        f"anydevice: ANYDEVICE={value.strip()} was asked for, but {what}. Code that finds its device itself "
        f'(torch.accelerator, Lightning Fabric\'s "auto") does not find {canonical}; {fix}.'
    )


def never_used_line(value: str, compat: bool) -> str | None:
    """The exit line of a run that never used its device, or None (also when its first step said it already)."""
    return None if _said_at_first_step else unused_line(value, compat, AT_EXIT)


def never_stepped_line(value: str) -> str | None:
    """The exit line of a run that imported torch and ran no backward pass and no optimizer step, or None.

    Only where :func:`watch_first_step` watched (torch imported, ``ANYDEVICE`` set); None under ``ANYDEVICE_QUIET``.
    """
    if _stepped or not _watching or _quiet():
        return None
    return NEVER_STEPPED.format(asked=value.strip())


def exit_line(value: str, compat: bool, ended_well: bool) -> str | None:
    """The one line a rank ends with, or None: its device was never used (:func:`never_used_line`), else, when the
    program ended well (a return, ``sys.exit(0)``), it never stepped (:func:`never_stepped_line`)."""
    line = never_used_line(value, compat)
    if line is None and ended_well:
        line = never_stepped_line(value)
    return line


def _quiet() -> bool:
    from anydevice import settings

    try:
        return bool(settings.ANYDEVICE_QUIET.flag())
    except Exception:  # a bad value is refused where anydevice reads it; here it does not silence
        return False


def cpu_step_line(value: str, compat: bool, moment: str) -> str | None:
    """The line for a first step whose tensors are on the CPU while ``ANYDEVICE=value`` asked for another device
    (its vendor modules imported: :func:`unused_line` covers the rest), or None.

    Said for every device that does not compute in host memory (its plugin's ``Hardware(host_memory=...)``): one
    with vendor modules (xla, tpu, neuron) or one torch finds itself (cuda, mps, xpu).
    """
    name = asked_device(value)
    if name is None or name == "cpu":
        return None
    from anydevice.runtime.registry import builtin_registry

    registry = builtin_registry()
    canonical = registry.canonical(name)
    if canonical is None or canonical == "cpu":
        return None
    spec = registry.get(canonical).spec
    if spec.hardware is not None and spec.hardware.host_memory:
        return None
    fix = "move the model and its inputs with .to(ad.device())"
    if compat:
        fix = "these tensors were made on the CPU and never moved (cuda-compat moves only what names cuda); " + fix
    elif spec.vendor_modules:
        fix += ", or run a program that names cuda with `anydevice run --cuda-compat`"
    return (
        f"anydevice: ANYDEVICE={value.strip()} was asked for, but this process is not using {canonical}: the tensors of "
        f"its first {moment} are on the CPU, so this step runs on the CPU: {fix}."
    )


def say_at_first_step(value: str, compat: bool, where: str = "cpu", moment: str = OPTIMIZER_STEP) -> None:
    """Write the :data:`AT_FIRST_STEP` line to stderr when the device is not used (then the exit line is not said),
    or :func:`cpu_step_line`'s when the step runs on the CPU; ``where``: the device type of the step's tensors;
    ``moment``: :data:`BACKWARD` or :data:`OPTIMIZER_STEP`."""
    global _said_at_first_step
    shown = "the CPU" if where == "cpu" else where
    line = unused_line(value, compat, AT_FIRST_STEP.replace("{where}", shown).replace("{moment}", moment))
    if line is None and where == "cpu":
        line = cpu_step_line(value, compat, moment)
    if line:
        _said_at_first_step = True
        try:
            sys.stderr.write(line + "\n")
            sys.stderr.flush()
        except (OSError, ValueError, AttributeError):  # stderr closed (2>&-) or None: never the program's failure
            pass


_watching = False
"""Whether :func:`watch_first_step` installed its hooks in this process."""


def watch_first_step(value: str, compat: bool) -> None:
    """At the program's first step, note it stepped and call :func:`say_at_first_step` (torch is imported).

    The first step is the first backward pass or optimizer step, whichever comes first, whatever the loop's
    update (an optimizer, by hand, a closure) and however it later ends (``os._exit`` included). Two watches,
    each checking once and never raising into the program: ``torch.autograd.backward`` and
    ``torch.autograd.grad`` wrapped (:func:`_watch_backward`: both put back at the first call) and a global
    optimizer step pre-hook (``register_optimizer_step_pre_hook``, removed by :func:`_leave`), so later steps
    cost nothing. Only the device type of the step's tensors is read, never a value.
    """
    global _watching
    if _watching:
        return
    _watching = True
    check = asked_device(value) is not None
    owner = os.getpid()  # a forked child inherits the watches: its steps are not this process's first
    from torch.optim.optimizer import register_optimizer_step_pre_hook

    def first_step(moment: str, where: Any) -> None:
        global _stepped
        if _stepped or os.getpid() != owner:
            return
        _stepped = True
        if check:
            say_at_first_step(value, compat, str(where()), moment)

    def before_first_step(optimizer: object, *_: object) -> None:
        try:
            first_step(OPTIMIZER_STEP, lambda: _step_device(optimizer))
            _leave(handle)
        except Exception:  # the program's step is what matters
            pass

    handle = register_optimizer_step_pre_hook(before_first_step)
    _watch_backward(first_step)


def _watch_backward(first_step: Any) -> None:
    """Wrap ``torch.autograd.backward`` (``Tensor.backward`` calls it by that name) and ``torch.autograd.grad``:
    the first call of either puts both back, calls ``first_step(BACKWARD, where)``, then does what it asked."""
    import torch.autograd as autograd

    originals = {name: getattr(autograd, name) for name in ("backward", "grad")}

    def put_back() -> None:
        for name, original in originals.items():
            if getattr(autograd, name) is watched[name]:
                setattr(autograd, name, original)

    def wrap(name: str) -> Any:
        original = originals[name]

        @functools.wraps(original)
        def first_call(tensors: Any, *args: Any, **kwargs: Any) -> Any:
            try:
                put_back()
                first_step(BACKWARD, lambda: _tensor_device(tensors))
            except Exception:  # the program's backward pass is what matters
                pass
            return original(tensors, *args, **kwargs)

        return first_call

    watched = {name: wrap(name) for name in originals}
    for name, function in watched.items():
        setattr(autograd, name, function)


def _tensor_device(tensors: Any) -> str:
    """The device type of the first tensor of a backward pass's outputs ("cpu" when none has one)."""
    first = tensors[0] if isinstance(tensors, (list, tuple)) and tensors else tensors
    device = getattr(first, "device", None)
    return str(getattr(device, "type", "cpu"))


def _step_device(optimizer: object) -> str:
    """The device type of the optimizer's first parameter ("cpu" when it has none)."""
    for group in getattr(optimizer, "param_groups", ()):
        for param in group.get("params", ()):
            return str(param.device.type)
    return "cpu"


def _leave(handle: RemovableHandle) -> None:
    """Remove ``handle``'s hook while torch iterates the hooks' dict, when that is safe.

    It is safe when the hook is the dict's last and the dict an ``OrderedDict`` (torch's): its iterator then
    just ends. Removing an earlier one, or from a plain dict, would raise into the step: the hook then stays,
    doing nothing, and leaves at a later step where it is the last.
    """
    hooks = handle.hooks_dict_ref()
    if type(hooks) is OrderedDict and next(reversed(hooks), None) == handle.id:
        handle.remove()
