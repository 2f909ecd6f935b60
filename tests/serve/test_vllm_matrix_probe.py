"""The compatibility matrix's ``serve_vllm`` workload probe passes on cpu in the serve lane."""

from __future__ import annotations

import pytest

import anydevice as ad
from anydevice.compat_matrix import catalog
from anydevice.compat_matrix.execute import run_probe
from anydevice.compat_matrix.schema import Status

pytestmark = [pytest.mark.serve, pytest.mark.slow]


@pytest.mark.timeout(1200)
def test_serve_vllm_probe_passes_on_cpu(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ANYDEVICE", "cpu")
    monkeypatch.setenv("VLLM_CPU_KVCACHE_SPACE", "1")
    probe = next(p for p in catalog.builtin_probes() if p.name == "serve_vllm")
    result = run_probe(probe, ad, ad.device())
    assert result.status is Status.PASS, result.log
    assert "vLLM platform CpuPlatform (device type cpu)" in result.log
