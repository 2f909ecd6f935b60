"""Run one probe in this process: what a probe function gets (:class:`ProbeContext`: the device, the
anydevice API, stages, CPU comparison helpers), and turning whatever happened into a :class:`ProbeResult`."""

from __future__ import annotations

import contextlib
import io
import re
import tempfile
import time
import traceback
import types
import warnings
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch

from anydevice.compat_matrix.probe import HarnessError, Partial, Probe, Skip
from anydevice.compat_matrix.schema import MAX_LOG, MAX_MESSAGE, MAX_REASON, Numerics, ProbeResult, Stage, Status, bounded

if TYPE_CHECKING:
    from anydevice.runtime.backend import Backend


class PlacementError(AssertionError):
    """A tensor is not on the device it should be on."""


class NumericsError(AssertionError):
    """A device result differs from the CPU reference beyond tolerance."""


class ProbeContext:
    """Per-probe state and helpers; probes use its methods instead of raw torch calls where they can."""

    def __init__(
        self,
        ad: types.ModuleType,
        device: torch.device,
        params: dict[str, Any],
        seed: int = 0,
        on_stage: Callable[[Stage], None] | None = None,
        target: str | None = None,
    ) -> None:
        self.ad = ad
        self.device = device
        self.params = params
        self.target = target
        """The run's ``--target`` (``"litert"``, ``"tpu:v5e-8"``); None for a device's run."""
        self.seed = seed
        self.current_stage = Stage.EXECUTE
        self.numerics: Numerics | None = None
        self.fallback_ops: list[str] = []
        self._on_stage = on_stage
        self._failed: BaseException | None = None
        self._failed_stage = Stage.EXECUTE
        self._tmp: tempfile.TemporaryDirectory[str] | None = None

    # -- stages -------------------------------------------------------------------------
    @contextmanager
    def stage(self, stage: Stage | str) -> Iterator[None]:
        """Attribute any failure inside the block to ``stage`` (place, compile, execute, compare)."""
        previous = self.current_stage
        self._set_stage(Stage(stage))
        try:
            yield
        except BaseException as exc:
            if self._failed is not exc:  # the innermost stage names the failure
                self._failed, self._failed_stage = exc, Stage(stage)
            raise
        finally:
            self._set_stage(previous)

    def stage_of(self, exc: BaseException) -> Stage:
        """The stage ``exc`` escaped from (the current stage if it came from outside every block)."""
        return self._failed_stage if self._failed is exc else self.current_stage

    def _set_stage(self, stage: Stage) -> None:
        self.current_stage = stage
        if self._on_stage is not None:
            self._on_stage(stage)

    # -- API access ---------------------------------------------------------------------
    def api(self, dotted: str) -> Any:
        """``ad.<dotted>``, or a :class:`HarnessError` naming what the anydevice API lacks."""
        obj: Any = self.ad
        for part in dotted.split("."):
            if not hasattr(obj, part):
                raise HarnessError(f"the anydevice API has no ad.{dotted}")
            obj = getattr(obj, part)
        return obj

    @property
    def tmp(self) -> Path:
        """A fresh temporary directory for this probe, removed afterwards."""
        if self._tmp is None:
            self._tmp = tempfile.TemporaryDirectory(prefix="anydevice-probe-")
        return Path(self._tmp.name)

    def close(self) -> None:
        """Remove the temporary directory, if one was made."""
        if self._tmp is not None:
            self._tmp.cleanup()
            self._tmp = None

    # -- placement ----------------------------------------------------------------------
    def place(self, obj: Any) -> Any:
        """Move ``obj`` to the device with ``ad.to`` and check every tensor landed there."""
        with self.stage(Stage.PLACE):
            moved = self.api("to")(obj)
            self.expect_on_device(moved)
        return moved

    def expect_on_device(self, obj: Any) -> None:
        """Raise :class:`PlacementError` if a tensor in ``obj`` is not on the selected device type."""
        for tensor in _tensors(obj):
            if tensor.device.type != self.device.type:
                raise PlacementError(f"tensor on {tensor.device}, expected {self.device.type}")

    def sync(self) -> None:
        """End the step and wait for the device (``ad.step()`` then ``ad.synchronize()``)."""
        self.api("step")()
        self.api("synchronize")()

    # -- numerics -----------------------------------------------------------------------
    def compare(self, actual: Any, expected: Any, *, atol: float = 1e-5, rtol: float = 1.3e-6) -> None:
        """Compare a device result with a CPU reference; record the error; raise on mismatch."""
        with self.stage(Stage.COMPARE):
            got = [t.detach().to("cpu") for t in _tensors(actual)]
            want = [t.detach().to("cpu") for t in _tensors(expected)]
            if len(got) != len(want):
                raise NumericsError(f"{len(got)} tensors, expected {len(want)}")
            worst_abs = 0.0
            worst_rel = 0.0
            for g, w in zip(got, want, strict=True):
                if g.shape != w.shape:
                    raise NumericsError(f"shape {tuple(g.shape)}, expected {tuple(w.shape)}")
                abs_err, rel_err = _errors(g, w)
                worst_abs = max(worst_abs, abs_err)
                worst_rel = max(worst_rel, rel_err)
            self.numerics = Numerics(max_abs_err=worst_abs, max_rel_err=worst_rel, atol=atol, rtol=rtol)
            for g, w in zip(got, want, strict=True):
                torch.testing.assert_close(_comparable(g), _comparable(w), atol=atol, rtol=rtol, equal_nan=True)

    def vs_cpu(self, fn: Callable[..., Any], *args: Any, atol: float = 1e-5, rtol: float = 1.3e-6) -> Any:
        """Run ``fn(*args)`` on CPU and on the device, compare, and return the device result."""
        expected = fn(*_clone(args))
        on_device = self.place(_clone(args))
        with self.stage(Stage.EXECUTE):
            actual = fn(*on_device)
            self.sync()
        self.expect_on_device(actual)
        self.compare(actual, expected, atol=atol, rtol=rtol)
        return actual

    # -- distributed --------------------------------------------------------------------
    def dist(self) -> Any:
        """``ad.distributed``, initialised (a single-process world when no launcher set one up)."""
        dist = self.api("distributed")
        if not torch.distributed.is_available():
            raise HarnessError("torch.distributed is not available in this torch build")
        if not torch.distributed.is_initialized():
            dist.init()
        return dist


def _tensors(obj: Any) -> list[torch.Tensor]:
    if isinstance(obj, torch.Tensor):
        return [obj]
    if isinstance(obj, torch.nn.Module):
        return [*obj.parameters(), *obj.buffers()]
    if isinstance(obj, dict):
        return [t for v in obj.values() for t in _tensors(v)]
    if isinstance(obj, (list, tuple)):
        return [t for v in obj for t in _tensors(v)]
    return []


def _clone(obj: Any) -> Any:
    if isinstance(obj, torch.Tensor):
        return obj.detach().clone()
    if isinstance(obj, tuple):
        return tuple(_clone(v) for v in obj)
    if isinstance(obj, list):
        return [_clone(v) for v in obj]
    if isinstance(obj, dict):
        return {k: _clone(v) for k, v in obj.items()}
    return obj


def _comparable(t: torch.Tensor) -> torch.Tensor:
    if t.is_floating_point() and t.element_size() == 1:  # float8 kinds: assert_close cannot
        return t.to(torch.float32)
    return t


def _errors(got: torch.Tensor, want: torch.Tensor) -> tuple[float, float]:
    if got.numel() == 0:
        return 0.0, 0.0
    if got.dtype == torch.bool or want.dtype == torch.bool:
        mismatches = float((got != want).sum().item())
        return mismatches, mismatches
    g = got.to(torch.complex128) if got.is_complex() else got.to(torch.float64)
    w = want.to(torch.complex128) if want.is_complex() else want.to(torch.float64)
    diff = (g - w).abs()
    finite = torch.isfinite(diff)
    if not bool(finite.any()):
        return 0.0, 0.0
    abs_err = float(diff[finite].max().item())
    rel = diff / w.abs().clamp_min(1e-12)
    rel_err = float(rel[finite].max().item())
    return abs_err, rel_err


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
    target: str | None = None,
) -> ProbeResult:
    """Run ``probe`` once, capturing its output and warnings; never raises for a probe's fault."""
    ctx = ProbeContext(ad, device, dict(probe.params), seed=seed, on_stage=on_stage, target=target)
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
