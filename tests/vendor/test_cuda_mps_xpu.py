"""cuda, mps and xpu: chip names to peaks, and the reasons given on a machine without them."""

from __future__ import annotations

import platform

import pytest
import torch

from anydevice.contract import detect as d
from anydevice.plugins import cuda, mps, xpu
from anydevice.shims.eager import EagerProfiling, EagerVendor, ProfilingTable

pytestmark = pytest.mark.torch_version_sensitive  # docs/architecture.md, "Which tests the core lanes run"


@pytest.mark.parametrize(
    ("name", "chip"),
    [
        ("NVIDIA H100 80GB HBM3", "H100"),
        ("NVIDIA H100 PCIe", "H100 PCIe"),
        ("NVIDIA H100 NVL", "H100 NVL"),
        ("NVIDIA H200", "H200"),
        ("NVIDIA B200", "B200"),
        ("NVIDIA GB200", "GB200"),
        ("NVIDIA A100-SXM4-80GB", "A100"),
        ("AMD Instinct MI300X", "MI300X"),
        ("NVIDIA GeForce RTX 4090", "NVIDIA GeForce RTX 4090"),
    ],
)
def test_chip_from_device_name(name: str, chip: str) -> None:
    assert cuda.chip_from_name(name) == chip


@pytest.mark.parametrize(
    ("name", "tflops"),
    [("NVIDIA H100 80GB HBM3", 989.4), ("NVIDIA H200", 989.4), ("NVIDIA B200", 2250.0), ("AMD Instinct MI300X", 1307.4)],
)
def test_peak_flops_for_known_chips(name: str, tflops: float) -> None:
    profiling = EagerProfiling(
        EagerVendor("cuda", profiling=ProfilingTable(chip=lambda: cuda.chip_from_name(name), peak_tflops=cuda.PEAK_BF16_TFLOPS))
    )
    assert profiling.peak_flops(torch.bfloat16) == pytest.approx(tflops * 1e12)
    assert profiling.peak_flops(torch.float32) is None  # the table is dense bf16/fp16 only


@pytest.mark.parametrize("name", ["NVIDIA H100 NVL", "NVIDIA GeForce RTX 4090", "NVIDIA L4"])
def test_unknown_chips_have_no_peak(name: str) -> None:
    profiling = EagerProfiling(
        EagerVendor("cuda", profiling=ProfilingTable(chip=lambda: cuda.chip_from_name(name), peak_tflops=cuda.PEAK_BF16_TFLOPS))
    )
    assert profiling.peak_flops(torch.bfloat16) is None


def test_cuda_reason_on_a_cpu_build() -> None:
    build = d.torch_build()
    if build.get("cuda") or build.get("hip"):
        pytest.skip("torch here is a CUDA/ROCm build")
    result = cuda.detect()
    assert not result.available and result.problem == "package_missing"
    assert result.reason == f"this torch build ({build['version']}) has no CUDA or ROCm support"


def test_cuda_visible_devices_empty_hides_every_gpu(monkeypatch: pytest.MonkeyPatch) -> None:
    build = d.torch_build()
    if not (build.get("cuda") or build.get("hip")):
        pytest.skip("torch here has no CUDA/ROCm: detection stops at the build")
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")
    result = cuda.detect()
    assert result.problem == "disabled" and "hides every GPU" in result.reason


def test_mps_reason_off_apple_silicon() -> None:
    if platform.system() == "Darwin" and platform.machine() == "arm64":
        pytest.skip("this is Apple silicon")
    result = mps.detect()
    assert result.problem == "unsupported_platform" and "MPS needs macOS on Apple silicon" in result.reason


def test_xpu_reason_without_an_xpu_build() -> None:
    if d.torch_build().get("xpu"):
        pytest.skip("torch here is an XPU build")
    result = xpu.detect()
    assert result.problem == "package_missing" and "has no XPU support" in result.reason
