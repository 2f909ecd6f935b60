"""Probes for the compilation shim. Kept few and tiny: each compile costs seconds on a CPU."""

from __future__ import annotations

from collections.abc import Callable

import torch

from anydevice.compat_matrix.execute import ProbeContext
from anydevice.compat_matrix.probe import Partial, Probe, Skip
from anydevice.compat_matrix.schema import Stage

T = torch.Tensor


def _tiny(x: T, w: T) -> T:
    return torch.relu(x @ w) + 1.0


def _counter(group: str, name: str) -> int:
    """A dynamo/inductor counter (internal to torch, stable for years); -1 when it is gone."""
    try:
        from torch._dynamo.utils import counters
    except ImportError:
        return -1
    return int(counters[group][name])


def _reset() -> None:
    torch._dynamo.reset()


def _inputs(ctx: ProbeContext, rows: int = 8) -> tuple[T, T]:
    g = torch.Generator().manual_seed(ctx.seed)
    return torch.randn(rows, 16, generator=g), torch.randn(16, 8, generator=g)


def compile_backend_registered(ctx: ProbeContext) -> None:
    backend = ctx.api("backend")().shims.compilation.backend
    if not isinstance(backend, str):
        raise Skip(f"the compilation shim names a backend object ({type(backend).__name__}), not a registered name")
    with ctx.stage(Stage.COMPILE):
        known = torch._dynamo.list_backends(exclude_tags=())
    if backend not in known and backend != "inductor":
        raise AssertionError(f"backend {backend!r} is not registered with torch.compile (known: {', '.join(known)})")


def compile_default_backend(ctx: ProbeContext) -> None:
    _reset()
    torch.manual_seed(ctx.seed)
    model = torch.nn.Sequential(torch.nn.Linear(16, 8), torch.nn.ReLU())
    x = _inputs(ctx)[0]
    expected = model(x)
    on_dev, x_dev = ctx.place((model, x))
    with ctx.stage(Stage.COMPILE):
        compiled = ctx.api("compile")(on_dev)
        first = compiled(x_dev)  # compilation happens on the first call
        ctx.sync()
    ctx.expect_on_device(first)
    ctx.compare(first, expected, atol=1e-5, rtol=1e-5)


def compile_dynamic_shapes(ctx: ProbeContext) -> None:
    _reset()
    before = _counter("stats", "unique_graphs")
    w = _inputs(ctx)[1]
    w_dev = ctx.place(w)
    with ctx.stage(Stage.COMPILE):
        fn = ctx.api("compile")(_tiny, dynamic=True)
        fn(ctx.place(_inputs(ctx, 6)[0]), w_dev)  # 6: no size equals a weight dim (duck sizing)
    for rows in (12, 20):
        x = _inputs(ctx, rows)[0]
        with ctx.stage(Stage.EXECUTE):
            out = fn(ctx.place(x), w_dev)
            ctx.sync()
        ctx.compare(out, _tiny(x, w), atol=1e-5, rtol=1e-5)
    graphs = _counter("stats", "unique_graphs") - before
    if before >= 0 and graphs > 1:
        raise Partial(f"dynamic=True compiled {graphs} graphs for 3 shapes (expected 1)")


def recompile_count(ctx: ProbeContext) -> None:
    _reset()
    before = _counter("stats", "unique_graphs")
    x, w = _inputs(ctx)
    x_dev, w_dev = ctx.place((x, w))
    with ctx.stage(Stage.COMPILE):
        fn = ctx.api("compile")(_tiny)
        fn(x_dev, w_dev)
    with ctx.stage(Stage.EXECUTE):
        for _ in range(3):
            out = fn(x_dev, w_dev)
        ctx.sync()
    ctx.compare(out, _tiny(x, w), atol=1e-5, rtol=1e-5)
    if before < 0:
        raise Skip("torch no longer exposes dynamo's graph counter")
    graphs = _counter("stats", "unique_graphs") - before
    if graphs != 1:
        raise AssertionError(f"4 calls with one shape compiled {graphs} graphs (expected 1)")


def graph_break_count(ctx: ProbeContext) -> None:
    def broken(x: T) -> T:
        y = x.sin()
        torch._dynamo.graph_break()
        return y.cos()

    _reset()
    x_dev = ctx.place(torch.randn(8, generator=torch.Generator().manual_seed(ctx.seed)))
    with ctx.stage(Stage.COMPILE):
        explained = torch._dynamo.explain(broken)(x_dev)
    if explained.graph_break_count != 1 or explained.graph_count != 2:
        raise AssertionError(
            f"explain() saw {explained.graph_break_count} breaks / {explained.graph_count} graphs (expected 1 / 2)"
        )


def export_and_run(ctx: ProbeContext) -> None:
    torch.manual_seed(ctx.seed)
    model = torch.nn.Sequential(torch.nn.Linear(16, 8), torch.nn.Tanh())
    x = _inputs(ctx)[0]
    expected = model(x)
    on_dev, x_dev = ctx.place((model, x))
    with ctx.stage(Stage.COMPILE):
        program = torch.export.export(on_dev, (x_dev,))
    with ctx.stage(Stage.EXECUTE):
        out = program.module()(x_dev)
        ctx.sync()
    ctx.expect_on_device(out)
    ctx.compare(out, expected, atol=1e-5, rtol=1e-5)


def compile_cache_reuse(ctx: ProbeContext) -> None:
    compilation = ctx.api("backend")().shims.compilation
    cache_dir = compilation.cache_dir()
    x, w = _inputs(ctx)
    x_dev, w_dev = ctx.place((x, w))
    hits = _counter("inductor", "fxgraph_cache_hit")
    for _ in range(2):  # the second compile, after forgetting in-memory state, should hit the cache
        _reset()
        with ctx.stage(Stage.COMPILE):
            out = ctx.api("compile")(_tiny)(x_dev, w_dev)
            ctx.sync()
    ctx.compare(out, _tiny(x, w), atol=1e-5, rtol=1e-5)
    if compilation.backend == "inductor" and hits >= 0:
        if _counter("inductor", "fxgraph_cache_hit") <= hits:
            raise AssertionError("recompiling the same graph did not hit inductor's FX graph cache")
        return
    if cache_dir is None:
        raise Skip(f"backend {compilation.backend!r} declares no persistent compile cache")
    if not any(cache_dir.iterdir()):
        raise AssertionError(f"compile cache {cache_dir} is empty after two compiles")


def compile_backward(ctx: ProbeContext) -> None:
    _reset()
    x, w = _inputs(ctx)

    def loss_fn(x: T, w: T) -> T:
        return _tiny(x, w).pow(2).mean()

    w_ref = w.clone().requires_grad_()
    torch.autograd.backward(loss_fn(x, w_ref))
    x_dev, w_dev = ctx.place((x, w))
    w_dev = w_dev.detach().requires_grad_()
    with ctx.stage(Stage.COMPILE):
        compiled = ctx.api("compile")(loss_fn)
        loss = compiled(x_dev, w_dev)
        torch.autograd.backward(loss)
        ctx.sync()
    ctx.compare(w_dev.grad, w_ref.grad, atol=1e-5, rtol=1e-5)


def _p(name: str, fn: Callable[[ProbeContext], None], what: str) -> Probe:
    return Probe(name, "compilation", fn, description=what)


PROBES = [
    _p("compile_backend_registered", compile_backend_registered, "The shim's backend name is registered with torch.compile."),
    _p("compile_default_backend", compile_default_backend, "ad.compile(module) runs and equals CPU eager."),
    _p("compile_dynamic_shapes", compile_dynamic_shapes, "dynamic=True: three batch sizes, one graph, results vs CPU."),
    _p("recompile_count", recompile_count, "Repeated calls with one shape compile exactly one graph."),
    _p("graph_break_count", graph_break_count, "dynamo explain() counts an explicit graph break on device tensors."),
    _p("export_and_run", export_and_run, "torch.export of a module on the device; the exported module runs and equals CPU."),
    _p("compile_cache_reuse", compile_cache_reuse, "A second compile of the same graph hits the compile cache."),
    _p("compile_backward", compile_backward, "Compiled forward and backward; gradient equals CPU eager."),
]
