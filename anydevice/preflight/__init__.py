""" "Will it run on X?": ``anydevice check`` and ``ad.check()``, a static analysis on the CPU, not a run.

Runs the model (or the user's script, in a child process) for a few steps on the CPU, then judges, per
target device, what its plugin declares (:class:`~anydevice.contract.check_facts.CheckFacts`) against what was
seen: graph breaks, input signatures (compiles on static-shape targets), the op inventory (native / CPU
fallback / unsupported), dtypes, CUDA-only calls, world size against whole slices, and memory against
the chip's. The target is never needed here. Schema: :mod:`anydevice.preflight.schema`; docs/check.md.
"""

from __future__ import annotations

import copy
import itertools
from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING, Any

from anydevice.errors import AnyDeviceError

if TYPE_CHECKING:
    import torch

    from anydevice.preflight.schema import Observation, Report


def targets_of(target: str | Sequence[str]) -> list[str]:
    """Canonical device names for ``target`` (``"tpu,neuron"`` or a list); an unknown name raises ``UnknownDeviceError``."""
    from anydevice.runtime.registry import get_registry
    from anydevice.runtime.selection import _canonical_or_raise

    names = [t.strip() for t in (target.split(",") if isinstance(target, str) else target) if t.strip()]
    if not names:
        raise AnyDeviceError("No target given.", "Name one or more devices: --target tpu,neuron,xla (see `anydevice list`).")
    registry = get_registry()
    return list(dict.fromkeys(_canonical_or_raise(n.lower(), registry) for n in names))


def report(observation: Observation, targets: Sequence[str], script: str | None = None) -> Report:
    """Judge ``observation`` for every target (canonical names) and validate the result against the schema."""
    from anydevice.preflight.judge import judge
    from anydevice.preflight.schema import Report
    from anydevice.runtime.registry import get_registry

    registry = get_registry()
    reports = [judge(t, registry.get(t).spec.check, observation) for t in targets]
    from anydevice.contract.detect import version_of

    observation.versions.setdefault("anydevice", version_of("anydevice") or "unknown")
    result = Report(script=script, observation=observation, targets=reports, ok=all(r.verdict == "runs" for r in reports))
    return Report.model_validate(result.model_dump())  # a round trip through the schema: what is printed is valid


def check(
    model: torch.nn.Module,
    example_inputs: Any,
    *,
    target: str | Sequence[str],
    loader: Iterable[Any] | None = None,
    optimizer: torch.optim.Optimizer | None = None,
    steps: int = 4,
    world_size: int = 1,
    mesh: dict[str, int] | None = None,
) -> Report:
    """Will ``model`` run on ``target``? A static analysis on the CPU, not a run; the target is not needed.

    ``example_inputs`` (a tuple of positional arguments, or one tensor) is called on a CPU copy of the model:
    forward, a backward of the summed output and, with ``optimizer``, one step of a copy of it on the model's
    copy (the caller's model and optimizer are untouched). ``loader``: the input
    signatures come from its first ``steps`` batches instead of the example. ``world_size`` and ``mesh``
    (``{"dp": -1, "tp": 4}``) are checked against each target's topology. Returns a
    :class:`~anydevice.preflight.schema.Report`; ``report.ok`` is True when every target "runs".
    """
    import torch

    from anydevice.preflight.observe import Observer

    names = targets_of(target)
    args = example_inputs if isinstance(example_inputs, tuple) else (example_inputs,)
    work, opt = copy.deepcopy((model, optimizer))  # one memo: the copied optimizer holds the copied parameters
    work = work.to("cpu").train()
    args = tuple(a.to("cpu") if isinstance(a, torch.Tensor) else a for a in args)
    observer = Observer(steps, world_size, mesh)
    batches = list(itertools.islice(loader, steps)) if loader is not None else [args]
    for batch in batches:
        observer.batch(batch)
    with observer.recorder:
        with observer.first_call(work, args, {}):
            out = work(*args)
        loss = _scalar(out)
        if loss is not None:
            loss.backward()  # type: ignore[no-untyped-call]
        if opt is not None:
            observer.recorder.in_optimizer = True
            opt.step()
            observer.recorder.in_optimizer = False
    observer.steps_done = 1
    observer.optimizer_stepped(opt, work)
    return report(observer.finish(), names)


def _scalar(out: Any) -> torch.Tensor | None:
    import torch

    tensors = [t for t in (out if isinstance(out, (tuple, list)) else [out]) if isinstance(t, torch.Tensor)]
    floats = [t.float().sum() for t in tensors if t.requires_grad and t.is_floating_point()]
    return torch.stack(floats).sum() if floats else None
