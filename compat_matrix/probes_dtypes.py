"""Probes for dtypes: create, compute and reduce in each dtype on the device, compared with CPU."""

from __future__ import annotations

from collections.abc import Callable

import torch

from anydevice.compat_matrix.execute import ProbeContext
from anydevice.compat_matrix.probe import Probe, Skip
from anydevice.compat_matrix.schema import Stage

# dtype name -> (atol, rtol) for float kinds
_FLOAT_TOL = {
    "float32": (1e-4, 1e-4),
    "float64": (1e-10, 1e-10),
    "float16": (2e-2, 1e-2),
    "bfloat16": (1e-1, 2e-2),
}


def _dtype(name: str) -> torch.dtype:
    dtype = getattr(torch, name, None)
    if not isinstance(dtype, torch.dtype):
        raise Skip(f"torch {torch.__version__} has no torch.{name}")
    return dtype


def _float_probe(name: str) -> Callable[[ProbeContext], None]:
    def probe(ctx: ProbeContext) -> None:
        dtype = _dtype(name)
        gen = torch.Generator().manual_seed(ctx.seed)
        a = torch.randn(16, 8, generator=gen).to(dtype)
        b = torch.randn(16, 8, generator=gen).to(dtype)
        atol, rtol = _FLOAT_TOL[name]

        def fn(x: torch.Tensor, y: torch.Tensor) -> tuple[torch.Tensor, ...]:
            return (x * y + x).sum(dim=0), x @ y.T, torch.tanh(x).mean()

        out = ctx.vs_cpu(fn, a, b, atol=atol, rtol=rtol)
        if out[0].dtype != dtype:
            raise AssertionError(f"result dtype {out[0].dtype}, expected {dtype}")

    return probe


def _int_probe(name: str) -> Callable[[ProbeContext], None]:
    def probe(ctx: ProbeContext) -> None:
        dtype = _dtype(name)
        gen = torch.Generator().manual_seed(ctx.seed)
        low, high = (0, 10) if name == "uint8" else (-10, 10)
        a = torch.randint(low, high, (32,), generator=gen, dtype=dtype)
        b = torch.randint(1, 5, (32,), generator=gen, dtype=dtype)

        def fn(x: torch.Tensor, y: torch.Tensor) -> tuple[torch.Tensor, ...]:
            return x + y, x * 2, torch.div(x, y, rounding_mode="floor"), x.max(), torch.argsort(x, stable=True)

        ctx.vs_cpu(fn, a, b, atol=0, rtol=0)

    return probe


def dtype_bool(ctx: ProbeContext) -> None:
    gen = torch.Generator().manual_seed(ctx.seed)
    a = torch.rand(64, generator=gen) > 0.5
    b = torch.rand(64, generator=gen) > 0.3
    ctx.vs_cpu(lambda x, y: (x & y, x | ~y, x ^ y, x.sum(), x.any(), torch.where(x, 1, 0)), a, b, atol=0, rtol=0)


def dtype_complex64(ctx: ProbeContext) -> None:
    gen = torch.Generator().manual_seed(ctx.seed)
    a = torch.randn(8, 8, dtype=torch.complex64, generator=gen)
    b = torch.randn(8, 8, dtype=torch.complex64, generator=gen)
    ctx.vs_cpu(lambda x, y: (x * y.conj(), x @ y, x.abs(), x.sum()), a, b, atol=1e-4, rtol=1e-4)


def _fp8_probe(name: str) -> Callable[[ProbeContext], None]:
    def probe(ctx: ProbeContext) -> None:
        dtype = _dtype(name)
        x = torch.linspace(-4, 4, 64)
        on_dev = ctx.place(x)
        with ctx.stage(Stage.EXECUTE):
            cast = on_dev.to(dtype)
            back = cast.to(torch.float32)
            ctx.sync()
        ctx.expect_on_device(cast)
        ctx.compare(back, x.to(dtype).to(torch.float32), atol=0, rtol=0)

    return probe


def _probe(dtype: str, fn: Callable[[ProbeContext], None], what: str) -> Probe:
    return Probe(f"dtype_{dtype}", "dtypes", fn, params={"dtype": dtype}, description=what)


PROBES = [
    *(
        _probe(name, _float_probe(name), f"{name}: elementwise, matmul and reduction vs CPU")
        for name in ("float32", "float64", "float16", "bfloat16")
    ),
    *(
        _probe(name, _int_probe(name), f"{name}: add, mul, floor division, max, argsort vs CPU (exact)")
        for name in ("int64", "int32", "int8", "uint8")
    ),
    _probe("bool", dtype_bool, "bool: logic ops, sum, any, where vs CPU (exact)"),
    _probe("complex64", dtype_complex64, "complex64: conj multiply, matmul, abs, sum vs CPU"),
    *(
        _probe(name, _fp8_probe(name), f"{name}: cast to and from float32 on the device, bit-exact vs CPU")
        for name in ("float8_e4m3fn", "float8_e5m2")
    ),
]
