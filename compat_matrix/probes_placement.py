"""Probes for the placement shim (plus the sanity probe that gates a run)."""

from __future__ import annotations

import torch

from anydevice.compat_matrix.execute import PlacementError, ProbeContext
from anydevice.compat_matrix.probe import Probe, Skip
from anydevice.compat_matrix.schema import Stage


def sanity(ctx: ProbeContext) -> None:
    """The backend resolves, ``ad.device()`` matches it, and an add on the device equals CPU."""
    backend = ctx.api("backend")()
    device = ctx.api("device")()
    if device.type != backend.device_type:
        raise PlacementError(f"ad.device() is {device}, backend says {backend.device_type}")
    ctx.vs_cpu(lambda a, b: a + 2 * b, torch.arange(8, dtype=torch.float32), torch.ones(8), atol=0, rtol=0)


def device_available(ctx: ProbeContext) -> None:
    backend = ctx.api("backend")()
    if backend.count < 1:
        raise PlacementError(f"backend reports {backend.count} devices")
    with ctx.stage(Stage.PLACE):
        t = torch.empty(4, device=ctx.api("device")())
    ctx.expect_on_device(t)


def device_count(ctx: ProbeContext) -> None:
    backend = ctx.api("backend")()
    counted = backend.shims.placement.device_count()
    if counted != backend.count or counted < 1:
        raise AssertionError(f"placement.device_count() = {counted}, backend.count = {backend.count}")


def tensor_roundtrip(ctx: ProbeContext) -> None:
    x = torch.randn(3, 5, generator=torch.Generator().manual_seed(ctx.seed))
    back = ctx.place(x).to("cpu")
    ctx.compare(back, x, atol=0, rtol=0)


def non_blocking_copy(ctx: ProbeContext) -> None:
    x = torch.randn(256, generator=torch.Generator().manual_seed(ctx.seed))
    with ctx.stage(Stage.PLACE):
        on_dev = x.to(ctx.device, non_blocking=True)
    with ctx.stage(Stage.EXECUTE):
        y = on_dev * 3
        back = y.to("cpu", non_blocking=True)
        ctx.sync()
    ctx.compare(back, x * 3)


def pin_memory(ctx: ProbeContext) -> None:
    if ctx.device.type == "cpu":
        raise Skip("pinned host memory only matters for copies to an accelerator")
    with ctx.stage(Stage.PLACE):
        x = torch.arange(64, dtype=torch.float32).pin_memory()
        if not x.is_pinned():
            raise PlacementError("pin_memory() returned an unpinned tensor")
        y = x.to(ctx.device, non_blocking=True)
    ctx.sync()
    ctx.compare(y, torch.arange(64, dtype=torch.float32), atol=0, rtol=0)


def memory_stats(ctx: ProbeContext) -> None:
    stats = ctx.api("memory_stats")()
    if not isinstance(stats, dict):
        raise AssertionError(f"memory_stats() returned {type(stats).__name__}, not a dict")
    if not stats:
        reason = getattr(stats, "reason", None)
        if not reason:
            raise AssertionError("memory_stats() is empty and gives no reason")
        raise Skip(f"no counters on this device: {reason}")
    bad = {k: v for k, v in stats.items() if not isinstance(v, int) or v < 0}
    if bad:
        raise AssertionError(f"counters that are not non-negative ints: {sorted(bad)[:5]}")


def synchronize(ctx: ProbeContext) -> None:
    a = torch.randn(64, 64, generator=torch.Generator().manual_seed(ctx.seed))
    dev = ctx.place(a)
    with ctx.stage(Stage.EXECUTE):
        out = dev @ dev
        ctx.api("synchronize")()
    ctx.compare(out, a @ a, atol=1e-4, rtol=1e-4)


def rng_seed_determinism(ctx: ProbeContext) -> None:
    seed = ctx.api("manual_seed")
    with ctx.stage(Stage.EXECUTE):
        seed(1234)
        first = torch.randn(32, device=ctx.device)
        seed(1234)
        second = torch.randn(32, device=ctx.device)
        seed(4321)
        other = torch.randn(32, device=ctx.device)
        ctx.sync()
    ctx.compare(second, first, atol=0, rtol=0)
    if torch.equal(first.cpu(), other.cpu()):
        raise AssertionError("different seeds gave the same numbers")


def save_load_portable(ctx: ProbeContext) -> None:
    state = {"w": torch.randn(4, 4, generator=torch.Generator().manual_seed(ctx.seed)), "step": torch.tensor(7)}
    on_dev = ctx.place(state)
    path = ctx.tmp / "ckpt.pt"
    with ctx.stage(Stage.EXECUTE):
        ctx.api("save")(on_dev, path)
        on_cpu = torch.load(path, map_location="cpu", weights_only=True)  # no vendor needed to read it
        loaded = ctx.api("load")(path)
    ctx.compare(on_cpu["w"], state["w"], atol=0, rtol=0)
    ctx.compare(loaded["w"], state["w"], atol=0, rtol=0)


def autocast_default_dtype(ctx: ProbeContext) -> None:
    backend = ctx.api("backend")()
    want = backend.shims.placement.autocast_dtype()
    if want not in (torch.float16, torch.bfloat16):
        raise AssertionError(f"autocast dtype {want} is not a low-precision float")
    gen = torch.Generator().manual_seed(ctx.seed)
    a, b = torch.randn(32, 16, generator=gen), torch.randn(16, 8, generator=gen)
    da, db = ctx.place((a, b))
    with ctx.stage(Stage.EXECUTE):
        with ctx.api("autocast")():
            out = da @ db
        ctx.sync()
    if out.dtype != want:
        raise AssertionError(f"matmul under ad.autocast() gave {out.dtype}, expected {want}")
    ctx.compare(out.float(), a @ b, atol=0.1, rtol=0.05)


def data_loader_prefetch(ctx: ProbeContext) -> None:
    data = torch.arange(40, dtype=torch.float32).reshape(20, 2)
    loader = torch.utils.data.DataLoader(torch.utils.data.TensorDataset(data), batch_size=4)
    with ctx.stage(Stage.PLACE):
        batches = list(ctx.api("data_loader")(loader))
    if len(batches) != 5:
        raise AssertionError(f"{len(batches)} batches, expected 5")
    ctx.expect_on_device(batches)
    with ctx.stage(Stage.EXECUTE):
        total = sum(b[0].sum() for b in batches)
    ctx.compare(total, data.sum(), atol=0, rtol=0)


def nested_to(ctx: ProbeContext) -> None:
    gen = torch.Generator().manual_seed(ctx.seed)
    module = torch.nn.Linear(3, 2)
    tree = {"x": [torch.randn(2, generator=gen), (torch.ones(1, dtype=torch.int64),)], "m": module, "n": 5}
    moved = ctx.place(tree)
    if moved["n"] != 5:
        raise AssertionError("a non-tensor leaf changed")
    with ctx.stage(Stage.EXECUTE):
        out = moved["m"](torch.ones(1, 3, device=ctx.device))
    ctx.expect_on_device(out)


def step_marker(ctx: ProbeContext) -> None:
    step = ctx.api("step")
    x = torch.zeros(4)
    dev = ctx.place(x)
    with ctx.stage(Stage.EXECUTE):
        for _ in range(3):
            dev = dev + 1
            step()
        ctx.api("synchronize")()
    ctx.compare(dev, x + 3, atol=0, rtol=0)


SANITY = Probe("sanity", "sanity", sanity, description="Gate: backend resolves, ad.device() matches, an add equals CPU.")

PROBES = [
    Probe("device_available", "placement", device_available, description="The backend reports >= 1 device and allocates on it."),
    Probe("device_count", "placement", device_count, description="placement.device_count() agrees with ad.backend().count."),
    Probe("tensor_roundtrip", "placement", tensor_roundtrip, description="ad.to() a tensor and back to CPU, bit-exact."),
    Probe("non_blocking_copy", "placement", non_blocking_copy, description="non_blocking copies both ways, then synchronize."),
    Probe("pin_memory", "placement", pin_memory, description="Pinned host tensor copied to the device without blocking."),
    Probe(
        "memory_stats",
        "placement",
        memory_stats,
        description="ad.memory_stats() gives byte counters, or an empty result with a reason.",
    ),
    Probe("synchronize", "placement", synchronize, description="ad.synchronize() after a matmul; result equals CPU."),
    Probe("rng_seed_determinism", "placement", rng_seed_determinism, description="ad.manual_seed() makes device RNG repeatable."),
    Probe(
        "save_load_portable",
        "placement",
        save_load_portable,
        description="ad.save() writes CPU-loadable tensors; ad.load() reads them back.",
    ),
    Probe(
        "autocast_default_dtype",
        "placement",
        autocast_default_dtype,
        description="ad.autocast() runs matmul in the device's low-precision dtype.",
    ),
    Probe(
        "data_loader_prefetch",
        "placement",
        data_loader_prefetch,
        description="ad.data_loader() yields every batch, on the device.",
    ),
    Probe("nested_to", "placement", nested_to, description="ad.to() moves nested containers and modules, leaves other leaves."),
    Probe("step_marker", "placement", step_marker, description="ad.step() between iterations keeps results correct."),
]
