"""Run one probe in this process and turn whatever happened into a :class:`ProbeResult`."""

from __future__ import annotations

import contextlib
import io
import re
import time
import traceback
import types
import warnings
from collections.abc import Callable
from typing import TYPE_CHECKING

import torch

from anydevice.compat_matrix.context import ProbeContext
from anydevice.compat_matrix.probe import HarnessError, Partial, Probe, Skip
from anydevice.compat_matrix.schema import MAX_LOG, MAX_MESSAGE, MAX_REASON, ProbeResult, Stage, Status, bounded

if TYPE_CHECKING:
    from anydevice.backend import Backend

_FALLBACK = re.compile(
    r"fall(?:s|ing)?[ _-]?back|not (?:currently )?(?:supported|implemented) on the \w+ (?:backend|device)", re.I
)
_OP_NAME = re.compile(r"(aten::[\w.]+)|operator '([\w:.]+)'")
_OK = (Status.PASS, Status.FALLBACK)


def fallback_counter(backend: Backend) -> Callable[[], dict[str, int]]:
    """Per-op CPU-fallback counts from the optional ``Diagnostics`` capability (none: no counts)."""
    from anydevice.shims.contracts import Diagnostics

    counter = (backend.shims.capability(Diagnostics) or Diagnostics()).fallback_ops

    def read() -> dict[str, int]:
        try:
            return {str(k): int(v) for k, v in dict(counter()).items()}
        except Exception:  # an optional counter must never fail a probe
            return {}

    return read


def run_probe(
    probe: Probe,
    ad: types.ModuleType,
    device: torch.device,
    *,
    seed: int = 0,
    simulated: bool = False,
    fallbacks: Callable[[], dict[str, int]] = dict,
    on_stage: Callable[[Stage], None] | None = None,
) -> ProbeResult:
    """Run ``probe`` once, capturing its output and warnings; never raises for a probe's fault."""
    ctx = ProbeContext(ad, device, dict(probe.params), seed=seed, on_stage=on_stage)
    out = io.StringIO()
    before = fallbacks()
    status, stage, reason, exc_type, message = Status.PASS, None, None, None, None
    start = time.perf_counter()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(out):
            try:
                torch.manual_seed(seed)
                probe.fn(ctx)
            except Skip as exc:
                status, reason = Status.SKIP, exc.reason
            except Partial as exc:
                status, reason = Status.PARTIAL, exc.reason
            except HarnessError as exc:
                status, reason = Status.HARNESS_ERROR, exc.reason
            except Exception as exc:  # the probe's failure is the result
                status, stage, reason = _classify(exc, ctx.stage_of(exc))
                exc_type, message = _qualname(exc), f"{type(exc).__name__}: {exc}"
                traceback.print_exc(file=out)
            finally:
                ctx.close()
    duration = time.perf_counter() - start
    warned = list(dict.fromkeys(f"{w.category.__name__}: {w.message}" for w in caught))  # once each
    ops = _fallback_ops(warned, before, fallbacks())
    if status is Status.PASS and ops:
        status = Status.FALLBACK
    if simulated and status in _OK:
        status = Status.FAKE
    log = out.getvalue() + "".join(f"warning: {w}\n" for w in warned)
    return ProbeResult(
        probe=probe.name,
        shim=probe.group,
        description=bounded(probe.description, MAX_REASON) or "",
        params=dict(probe.params),
        status=status,
        failure_stage=stage,
        reason=bounded(reason, MAX_REASON),
        exception_type=exc_type,
        message=bounded(message, MAX_MESSAGE),
        numerics=ctx.numerics,
        fallback_ops=ops,
        duration_s=round(duration, 4),
        log=bounded(log, MAX_LOG) or "",
    )


def _classify(exc: Exception, stage: Stage) -> tuple[Status, Stage | None, str]:
    first = (str(exc).strip().splitlines() or [""])[0]
    if isinstance(exc, AttributeError) and _is_anydevice(getattr(exc, "obj", None)):
        return Status.HARNESS_ERROR, None, f"the anydevice API lacks {getattr(exc, 'name', '?')}: {first}"
    if isinstance(exc, ImportError):
        stage = Stage.IMPORT
    return Status.FAIL, stage, f"{type(exc).__name__} at {stage.value}: {first}"[:MAX_REASON]


def _is_anydevice(obj: object) -> bool:
    module = obj.__name__ if isinstance(obj, types.ModuleType) else type(obj).__module__
    ours = module == "anydevice" or module.startswith("anydevice.")
    return ours and not module.startswith("anydevice.compat_matrix")


def _qualname(exc: BaseException) -> str:
    cls = type(exc)
    return cls.__qualname__ if cls.__module__ == "builtins" else f"{cls.__module__}.{cls.__qualname__}"


def _fallback_ops(warned: list[str], before: dict[str, int], after: dict[str, int]) -> list[str]:
    ops = {name for name, count in after.items() if count > before.get(name, 0)}
    for text in warned:
        if _FALLBACK.search(text) and "cpu" in text.lower():
            found = [a or b for a, b in _OP_NAME.findall(text)]
            ops.update(found or ["(unnamed op)"])
    return sorted(ops)
