"""The XLA lane: the matrix's serving probe on xla says why vLLM cannot serve it (the xla plugin's serving declaration)."""

from __future__ import annotations

import pytest

import anydevice as ad
from anydevice.compat_matrix import catalog
from anydevice.compat_matrix.execute import run_probe
from anydevice.compat_matrix.schema import Status

pytestmark = pytest.mark.xla


def test_serve_vllm_on_xla_is_a_skip_naming_the_route(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ANYDEVICE", "xla")
    monkeypatch.setenv("PJRT_DEVICE", "CPU")
    probe = next(p for p in catalog.builtin_probes() if p.name == "serve_vllm")
    result = run_probe(probe, ad, ad.device())
    assert result.status is Status.SKIP
    assert result.reason is not None and result.reason.startswith("vLLM cannot serve xla: vLLM has no generic PJRT platform")
    assert "ANYDEVICE=tpu" in result.reason  # the way to serve on a Cloud TPU
