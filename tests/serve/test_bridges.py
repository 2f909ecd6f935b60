"""The serving bridges' own mechanics, in every lane (no engine needed)."""

from __future__ import annotations

import importlib.util
from collections.abc import Callable
from typing import Any

import pytest

from anydevice.integrations import _serving, vllm
from tests.utils import python


def test_importing_the_bridges_imports_no_engine_and_no_torch() -> None:
    code = (
        "import sys\n"
        "import anydevice.integrations.vllm, anydevice.integrations.sglang, anydevice.cli.doctor_serving\n"
        "print(sorted(m for m in ('torch', 'vllm', 'sglang') if m in sys.modules))\n"
    )
    done = python("-c", code)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]"


def test_unset_anydevice_answers_none_without_importing_vllm(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ANYDEVICE", "  ")  # blank counts as unset
    assert vllm.platform_plugin() is None


def _resolver(module: str, name: str, body: str) -> Callable[..., Any]:
    """A function named ``name`` in a module named ``module`` (what the engines' resolvers look like to the frame walk)."""
    scope: dict[str, Any] = {"__name__": module}
    exec(body, scope)
    fn: Callable[..., Any] = scope[name]
    return fn


VLLM_LIKE = """
def resolve_current_platform_cls_qualname(plugins, ours):
    platform_plugins = dict(plugins)
    activated_plugins = []
    for name, func in platform_plugins.items():
        if func() is not None:
            activated_plugins.append(name)
    return activated_plugins, platform_plugins
"""

SGLANG_LIKE = """
def _resolve_platform(plugins, ours):
    all_plugins = {name: (fn, "dist") for name, fn in plugins.items()}
    activated = {}
    for name, (plugin_fn, _dist) in all_plugins.items():
        result = plugin_fn()
        if result is not None:
            activated[name] = result
    return activated, all_plugins
"""


def _ours(module: str, resolver: str, plugins_local: str, activated_local: str) -> Callable[[], str]:
    def plugin() -> str:
        _serving.hide_other_platform_plugins(module, resolver, plugins_local, activated_local, "anydevice")
        return "our.Platform"

    return plugin


def _vendor() -> str:
    return "vendor.Platform"


def test_other_plugins_are_hidden_from_a_vllm_style_resolution() -> None:
    resolve = _resolver("vllm.platforms", "resolve_current_platform_cls_qualname", VLLM_LIKE)
    ours = _ours("vllm.platforms", "resolve_current_platform_cls_qualname", "platform_plugins", "activated_plugins")
    activated, plugins = resolve({"before": _vendor, "anydevice": ours, "after": _vendor}, "anydevice")
    assert activated == ["anydevice"]  # "before" was detected, then dropped; "after" was never called
    assert plugins["after"]() is None and plugins["before"]() is None


def test_other_plugins_are_hidden_from_an_sglang_style_resolution() -> None:
    resolve = _resolver("sglang.srt.platforms", "_resolve_platform", SGLANG_LIKE)
    ours = _ours("sglang.srt.platforms", "_resolve_platform", "all_plugins", "activated")
    activated, plugins = resolve({"before": _vendor, "anydevice": ours, "after": _vendor}, "anydevice")
    assert activated == {"anydevice": "our.Platform"}
    assert plugins["after"][1] == "dist"  # the rest of each entry is kept


def test_nothing_changes_outside_the_engines_resolver() -> None:
    resolve = _resolver("somewhere.else", "resolve_current_platform_cls_qualname", VLLM_LIKE)
    ours = _ours("vllm.platforms", "resolve_current_platform_cls_qualname", "platform_plugins", "activated_plugins")
    activated, _ = resolve({"vendor": _vendor, "anydevice": ours}, "anydevice")
    assert activated == ["vendor", "anydevice"]  # the engine would refuse, as it does without anydevice


@pytest.mark.skipif(importlib.util.find_spec("vllm") is not None, reason="checks the probe where vLLM is not installed")
def test_serve_vllm_probe_skips_with_the_reason_without_vllm(monkeypatch: pytest.MonkeyPatch) -> None:
    import anydevice as ad
    from anydevice.compat_matrix import catalog
    from anydevice.compat_matrix.execute import run_probe
    from anydevice.compat_matrix.schema import Status

    monkeypatch.setenv("ANYDEVICE", "cpu")
    probe = next(p for p in catalog.builtin_probes() if p.name == "serve_vllm")
    result = run_probe(probe, ad, ad.device())
    assert result.status is Status.SKIP
    assert result.reason == "vllm is not installed here (pip install vllm)"


@pytest.mark.parametrize(
    ("selection", "visible", "expected"),
    [
        ("cuda:1", None, {"CUDA_VISIBLE_DEVICES": "1", "ANYDEVICE": "cuda:0"}),
        ("cuda:1", "2,3", {"CUDA_VISIBLE_DEVICES": "3", "ANYDEVICE": "cuda:0"}),  # the index counts within what is visible
        ("cuda:0", "1", {"CUDA_VISIBLE_DEVICES": "1", "ANYDEVICE": "cuda:0"}),  # what the engine's children see: stable
        ("cuda", "2,3", {}),  # no index: the engine's own flags decide
        ("cpu", None, {}),  # no visible-device variable declared
    ],
)
def test_an_index_becomes_the_engines_visible_device_setting(
    monkeypatch: pytest.MonkeyPatch, selection: str, visible: str | None, expected: dict[str, str]
) -> None:
    if visible is None:
        monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    else:
        monkeypatch.setenv("CUDA_VISIBLE_DEVICES", visible)
    assert _serving.visible_env(_serving.VLLM, selection, selection.partition(":")[0]) == expected


def test_an_index_beyond_the_visible_devices_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    from anydevice.errors import DeviceUnavailableError

    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0")
    with pytest.raises(DeviceUnavailableError, match=r"asks for device 1, but CUDA_VISIBLE_DEVICES=0 shows 1") as info:
        _serving.visible_env(_serving.VLLM, "cuda:1", "cuda")
    assert "pick an index below 1" in str(info.value)


def test_tpu_serving_prefers_vllm_torchtpu_only_next_to_torch_tpu() -> None:
    from anydevice.plugins import tpu

    native, jax = tpu.serving(torch_tpu=True)["vllm"], tpu.serving(torch_tpu=False)["vllm"]
    assert (native.plugins, native.plugins_first, native.platforms) == (("torchtpu",), True, ("tpu",))
    assert (jax.plugins, jax.plugins_first, jax.platforms) == ((), False, ("tpu",))  # it registers without a hardware check
    assert native.visible_devices == jax.visible_devices == "TPU_VISIBLE_CHIPS"


@pytest.mark.skipif(importlib.util.find_spec("libtpu") is not None, reason="checks a machine without libtpu")
def test_tpu_without_libtpu_torch_tpu_or_torch_xla_is_not_servable(monkeypatch: pytest.MonkeyPatch) -> None:
    from anydevice.errors import DeviceUnavailableError

    monkeypatch.setenv("ANYDEVICE", "tpu")
    with pytest.raises(DeviceUnavailableError, match="'tpu' is not available"):
        _serving.resolve_device("tpu", _serving.VLLM)
