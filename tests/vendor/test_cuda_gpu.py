"""CUDA / ROCm on a real GPU: selection, chip and peak, memory, compile, profiler, nccl.

Marked ``cuda``; every test skips with detection's reason when no GPU is usable. Run them with
``scripts/gpu-check`` on a GPU machine.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from anydevice.plugins import cuda

_DETECTION = cuda.detect()
pytestmark = [
    pytest.mark.torch_version_sensitive,
    pytest.mark.cuda,
    pytest.mark.skipif(not _DETECTION.available, reason=f"no usable GPU: {_DETECTION.reason}"),
]


def test_selects_cuda_with_the_local_rank_index() -> None:
    import anydevice as ad

    backend = ad.use("cuda")
    assert backend.name == "cuda" and ad.device().type == "cuda" and ad.device().index == 0
    assert backend.shims.compilation.backend == "inductor" and backend.shims.collectives.backend == "nccl"


def test_known_chip_has_a_peak() -> None:
    import torch

    import anydevice as ad

    ad.use("cuda")
    chip = ad.backend().chip
    peak = ad.backend().shims.profiling.peak_flops(torch.bfloat16)
    assert (peak is not None) == (chip in cuda.PEAK_BF16_TFLOPS), (chip, peak)


def test_memory_stats_are_counted() -> None:
    import torch

    import anydevice as ad

    ad.use("cuda")
    x = torch.ones(1024, 1024, device=ad.device())
    stats = ad.memory_stats()
    assert stats["allocated_bytes"] >= x.numel() * 4


def test_compile_runs_with_inductor() -> None:
    import torch

    import anydevice as ad

    ad.use("cuda")
    fn = ad.compile(lambda t: torch.nn.functional.gelu(t) * 2)
    x = torch.randn(64, device=ad.device())
    assert torch.allclose(fn(x), torch.nn.functional.gelu(x) * 2, atol=1e-5)


def test_profiler_records_cuda_kernels(tmp_path: Path) -> None:
    import torch

    import anydevice as ad

    ad.use("cuda")
    with ad.profile(tmp_path) as session:
        torch.randn(256, 256, device=ad.device()).matmul(torch.randn(256, 256, device=ad.device()))
        ad.synchronize()
    text = "".join(p.read_text() for p in session.files if p.suffix == ".json")
    assert '"cat": "kernel"' in text or '"cat":"kernel"' in text
