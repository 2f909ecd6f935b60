"""The workload probes on cpu: a tiny HF Llama loop and Trainer pass; the CUDA script's cell reports what happened."""

from __future__ import annotations

import importlib.util

import pytest

import anydevice as ad
from anydevice.cli.launch import build_parser
from anydevice.compat_matrix import catalog
from anydevice.compat_matrix.execute import run_probe
from anydevice.compat_matrix.schema import Status

pytestmark = pytest.mark.skipif(importlib.util.find_spec("transformers") is None, reason="transformers is not installed")


def _probe(name: str):  # type: ignore[no-untyped-def]
    return next(p for p in catalog.builtin_probes() if p.name == name)


def test_workload_probes_are_in_the_catalogue():
    names = [p.name for p in catalog.builtin_probes() if p.group == "workloads"]
    assert names == ["hf_llama_loop", "hf_trainer", "cuda_compat_script", "serve_vllm"]


def test_hf_llama_loop_passes_on_cpu_with_numerics(monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setenv("ANYDEVICE", "cpu")
    result = run_probe(_probe("hf_llama_loop"), ad, ad.device())
    assert result.status is Status.PASS, result.log
    assert result.numerics is not None and result.numerics.max_abs_err < 1e-4


@pytest.mark.slow
@pytest.mark.timeout(1800)  # subprocesses that import torch + HF libraries; slow on a loaded machine
def test_hf_trainer_passes_on_cpu(monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setenv("ANYDEVICE", "cpu")
    result = run_probe(_probe("hf_trainer"), ad, ad.device())
    assert result.status is Status.PASS, result.log


@pytest.mark.slow
@pytest.mark.timeout(1800)  # subprocesses that import torch + HF libraries; slow on a loaded machine
def test_cuda_compat_script_passes_or_says_why(monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setenv("ANYDEVICE", "cpu")
    result = run_probe(_probe("cuda_compat_script"), ad, ad.device())
    if "--cuda-compat" in build_parser().format_help():
        assert result.status is Status.PASS, result.log
    else:  # cuda-compat not in this build: the cell fails and says how the run ended
        assert result.status is Status.FAIL and "--cuda-compat script.py` exited 2" in (result.reason or ""), result.reason


@pytest.mark.skipif(importlib.util.find_spec("vllm") is not None, reason="vLLM is installed: tests/serve runs the probe")
def test_serve_vllm_without_vllm_is_a_skip_saying_what_to_install(monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setenv("ANYDEVICE", "cpu")
    result = run_probe(_probe("serve_vllm"), ad, ad.device())
    assert result.status is Status.SKIP and result.reason == "vllm is not installed here (pip install vllm)"
