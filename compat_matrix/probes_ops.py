"""Probes for common ops, forward and backward, compared with CPU."""

from __future__ import annotations

import copy
from collections.abc import Callable

import torch
import torch.nn.functional as F

from anydevice.compat_matrix.execute import ProbeContext
from anydevice.compat_matrix.probe import Partial, Probe
from anydevice.compat_matrix.schema import Stage

T = torch.Tensor


def _gen(ctx: ProbeContext) -> torch.Generator:
    return torch.Generator().manual_seed(ctx.seed)


def matmul(ctx: ProbeContext) -> None:
    g = _gen(ctx)
    ctx.vs_cpu(torch.matmul, torch.randn(64, 32, generator=g), torch.randn(32, 48, generator=g), atol=1e-4, rtol=1e-4)


def bmm(ctx: ProbeContext) -> None:
    g = _gen(ctx)
    a, b, c = torch.randn(4, 8, 16, generator=g), torch.randn(4, 16, 8, generator=g), torch.randn(4, 8, 8, generator=g)
    ctx.vs_cpu(lambda x, y, z: (torch.bmm(x, y), torch.baddbmm(z, x, y, alpha=0.5)), a, b, c, atol=1e-4, rtol=1e-4)


def conv2d(ctx: ProbeContext) -> None:
    g = _gen(ctx)
    x, w, b = torch.randn(2, 3, 16, 16, generator=g), torch.randn(8, 3, 3, 3, generator=g), torch.randn(8, generator=g)
    ctx.vs_cpu(lambda x, w, b: F.conv2d(x, w, b, padding=1), x, w, b, atol=1e-4, rtol=1e-4)


def sdpa(ctx: ProbeContext) -> None:
    g = _gen(ctx)
    q, k, v = (torch.randn(2, 4, 16, 8, generator=g) for _ in range(3))
    ctx.vs_cpu(lambda q, k, v: F.scaled_dot_product_attention(q, k, v, is_causal=True), q, k, v, atol=1e-4, rtol=1e-4)


def layer_norm(ctx: ProbeContext) -> None:
    g = _gen(ctx)
    x, w, b = torch.randn(4, 10, 32, generator=g), torch.randn(32, generator=g), torch.randn(32, generator=g)
    ctx.vs_cpu(lambda x, w, b: F.layer_norm(x, (32,), w, b), x, w, b, atol=1e-4, rtol=1e-4)


def softmax_cross_entropy(ctx: ProbeContext) -> None:
    g = _gen(ctx)
    logits, target = torch.randn(16, 10, generator=g), torch.randint(0, 10, (16,), generator=g)
    ctx.vs_cpu(lambda x, t: (F.softmax(x, dim=-1), F.cross_entropy(x, t)), logits, target, atol=1e-5, rtol=1e-4)


def elementwise_math(ctx: ProbeContext) -> None:
    x = torch.linspace(0.1, 4.0, 97)

    def fn(x: T) -> tuple[T, ...]:
        return x.exp(), x.log1p(), x.sin(), x.tanh(), x.sigmoid(), torch.erf(x), x.rsqrt(), x.pow(2.5)

    ctx.vs_cpu(fn, x, atol=1e-4, rtol=1e-4)


def factory_functions(ctx: ProbeContext) -> None:
    def fn(device: torch.device) -> tuple[T, ...]:
        return (
            torch.arange(10, device=device),
            torch.zeros(3, 4, device=device),
            torch.full((2, 2), 7.5, device=device),
            torch.linspace(0, 1, 11, device=device),
            torch.eye(4, device=device),
        )

    expected = fn(torch.device("cpu"))
    with ctx.stage(Stage.EXECUTE):
        actual = fn(ctx.device)
        ctx.sync()
    ctx.expect_on_device(actual)
    ctx.compare(actual, expected, atol=1e-6, rtol=1e-6)


def embedding_backward(ctx: ProbeContext) -> None:
    g = _gen(ctx)
    weight, idx = torch.randn(20, 8, generator=g), torch.randint(0, 20, (6, 5), generator=g)

    def fn(w: T, i: T) -> T:
        w = w.requires_grad_()
        torch.autograd.backward((F.embedding(i, w) ** 2).sum())
        assert w.grad is not None
        return w.grad

    ctx.vs_cpu(fn, weight, idx, atol=1e-5, rtol=1e-5)


def index_put(ctx: ProbeContext) -> None:
    g = _gen(ctx)
    x, vals = torch.zeros(10), torch.randn(6, generator=g)
    idx = torch.tensor([0, 3, 3, 9, 1, 0])
    ctx.vs_cpu(lambda x, i, v: x.index_put_((i,), v, accumulate=True), x, idx, vals, atol=1e-6, rtol=1e-6)


def scatter_gather(ctx: ProbeContext) -> None:
    g = _gen(ctx)
    src, idx = torch.randn(4, 6, generator=g), torch.randint(0, 5, (4, 6), generator=g)

    def fn(s: T, i: T) -> tuple[T, T]:
        return torch.zeros(4, 5, device=s.device).scatter_add(1, i, s), torch.gather(s, 1, i)

    ctx.vs_cpu(fn, src, idx, atol=1e-5, rtol=1e-5)


def sort_topk(ctx: ProbeContext) -> None:
    x = torch.randperm(50, generator=_gen(ctx)).float()  # distinct values: indices are unique

    def fn(x: T) -> tuple[T, ...]:
        values, indices = torch.sort(x, descending=True)
        top_v, top_i = torch.topk(x, 5)
        return values, indices, top_v, top_i

    ctx.vs_cpu(fn, x, atol=0, rtol=0)


def reductions_cumsum(ctx: ProbeContext) -> None:
    x = torch.randn(8, 33, generator=_gen(ctx))
    ctx.vs_cpu(lambda x: (x.cumsum(1), x.mean(0), x.var(1), x.amax(1), x.norm()), x, atol=1e-4, rtol=1e-4)


def where_masked_nonzero(ctx: ProbeContext) -> None:
    x = torch.randn(40, generator=_gen(ctx))
    ctx.vs_cpu(lambda x: (torch.where(x > 0, x, -x), x.masked_fill(x < 0, 0.0), torch.nonzero(x > 0.5)), x, atol=0, rtol=0)


def mlp_backward(ctx: ProbeContext) -> None:
    g = _gen(ctx)
    args = (
        torch.randn(8, 16, generator=g),
        torch.randn(32, 16, generator=g),
        torch.randn(32, generator=g),
        torch.randn(4, 32, generator=g),
        torch.randn(4, generator=g),
    )

    def fn(x: T, w1: T, b1: T, w2: T, b2: T) -> tuple[T, ...]:
        params = [p.requires_grad_() for p in (w1, b1, w2, b2)]
        loss = F.linear(F.gelu(F.linear(x, params[0], params[1])), params[2], params[3]).pow(2).mean()
        return (loss, *torch.autograd.grad(loss, params))

    ctx.vs_cpu(fn, *args, atol=1e-4, rtol=1e-4)


def adamw_fused_step(ctx: ProbeContext) -> None:
    g = _gen(ctx)
    init, grad = torch.randn(64, generator=g), torch.randn(64, generator=g)

    def run(device: torch.device, fused: bool) -> T:
        p = torch.nn.Parameter(init.clone().to(device))
        opt = torch.optim.AdamW([p], lr=0.1, fused=fused or None, foreach=False if not fused else None)
        for _ in range(3):
            p.grad = grad.clone().to(device)
            opt.step()
        return p.detach()

    expected = run(torch.device("cpu"), fused=False)
    try:
        with ctx.stage(Stage.EXECUTE):
            actual = run(ctx.device, fused=True)
            ctx.sync()
    except (RuntimeError, NotImplementedError) as exc:
        with ctx.stage(Stage.EXECUTE):
            actual = run(ctx.device, fused=False)
            ctx.sync()
        ctx.compare(actual, expected, atol=1e-5, rtol=1e-5)
        raise Partial(f"fused AdamW failed ({type(exc).__name__}: {str(exc)[:200]}); the unfused path works") from exc
    ctx.expect_on_device(actual)
    ctx.compare(actual, expected, atol=1e-5, rtol=1e-5)


def transformer_block_fwd_bwd(ctx: ProbeContext) -> None:
    torch.manual_seed(ctx.seed)
    block = torch.nn.TransformerEncoderLayer(32, 4, dim_feedforward=64, dropout=0.0, batch_first=True)
    x = torch.randn(2, 10, 32, generator=_gen(ctx))

    def run(module: torch.nn.Module, inp: T) -> tuple[T, ...]:
        out = module(inp)
        torch.autograd.backward(out.pow(2).mean())
        return (out, *(p.grad for p in module.parameters() if p.grad is not None))

    expected = run(copy.deepcopy(block), x)
    on_dev, x_dev = ctx.place((copy.deepcopy(block), x))
    with ctx.stage(Stage.EXECUTE):
        actual = run(on_dev, x_dev)
        ctx.sync()
    ctx.compare(actual, expected, atol=1e-4, rtol=1e-3)


def _p(name: str, fn: Callable[[ProbeContext], None], what: str) -> Probe:
    return Probe(name, "ops", fn, description=what)


PROBES = [
    _p("matmul", matmul, "float32 matmul (64x32 @ 32x48) vs CPU."),
    _p("bmm_baddbmm", bmm, "Batched matmul and baddbmm vs CPU."),
    _p("conv2d", conv2d, "conv2d with bias and padding vs CPU."),
    _p("sdpa", sdpa, "Causal scaled_dot_product_attention vs CPU."),
    _p("layer_norm", layer_norm, "layer_norm with affine parameters vs CPU."),
    _p("softmax_cross_entropy", softmax_cross_entropy, "softmax and cross_entropy vs CPU."),
    _p("elementwise_math", elementwise_math, "exp, log1p, sin, tanh, sigmoid, erf, rsqrt, pow vs CPU."),
    _p("factory_functions", factory_functions, "arange, zeros, full, linspace, eye created directly on the device."),
    _p("embedding_backward", embedding_backward, "Embedding gradient with repeated indices vs CPU."),
    _p("index_put", index_put, "index_put_ with accumulate and duplicate indices vs CPU."),
    _p("scatter_gather", scatter_gather, "scatter_add and gather vs CPU."),
    _p("sort_topk", sort_topk, "sort and topk values and indices vs CPU (exact)."),
    _p("reductions_cumsum", reductions_cumsum, "cumsum, mean, var, amax, norm vs CPU."),
    _p("where_masked_nonzero", where_masked_nonzero, "where, masked_fill and data-dependent nonzero vs CPU."),
    _p("mlp_backward", mlp_backward, "Two-layer GELU MLP loss and gradients vs CPU."),
    _p("adamw_fused_step", adamw_fused_step, "Three fused AdamW steps vs CPU; partial when only foreach works."),
    _p("transformer_block_fwd_bwd", transformer_block_fwd_bwd, "TransformerEncoderLayer forward and backward vs CPU."),
]
