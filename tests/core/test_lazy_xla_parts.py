"""The lazy-XLA shims' plain-Python parts (anydevice.shims.lazy_xla), in the main lane, without torch_xla.

Tested here: PJRT_DEVICE handling before torch_xla is imported, the version preflight on real installed
packages, the one-process refusal of PJRT CPU, the compile-option checks and the cache directory, the
refusal of FSDP2, what a user gets when torch_xla is absent (the preflight's install hint, or the import
error naming it), and the placement's host-only parts. The xla lane (tests/xla/) runs the shims on torch_xla.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from importlib.metadata import version
from importlib.util import find_spec
from pathlib import Path

import pytest
import torch

from anydevice.errors import DeviceUnavailableError, DistributedError, UnsupportedFeatureError, VersionMismatchError
from anydevice.shims import recompiles
from anydevice.shims.lazy_xla import (
    PJRT_DEVICES,
    XlaCollectives,
    XlaCompilation,
    XlaPlacement,
    XlaVendor,
    check_processes,
    fallback_probe,
    preflight,
    prepare_environment,
    requested_pjrt_device,
    torch_xla_ended,
    xla_shims,
)
from anydevice.shims.recompiles import stop_noting_inputs

needs_no_torch_xla = pytest.mark.skipif(find_spec("torch_xla") is not None, reason="torch_xla is installed here (the xla lane)")

CPU = XlaVendor(name="xla", pjrt_device="CPU", persistent_cache=False, multiprocess=False)
TPU = XlaVendor(name="tpu", pjrt_device="TPU", chip=lambda: "TPU v5e", peak_tflops={"TPU v5e": 197.0})


@pytest.fixture
def no_pjrt(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PJRT_DEVICE", "")  # recorded: what the code under test sets is undone after the test
    monkeypatch.delenv("PJRT_DEVICE")  # (a delenv of an unset name records nothing, and PJRT_DEVICE=TPU leaked)


# --- torch versions and PJRT_DEVICE --------------------------------------------------------------------------------


def test_torch_xla_ends_after_torch_2_9_whatever_the_local_suffix() -> None:
    assert not torch_xla_ended("2.9.0") and not torch_xla_ended("2.8.1+cpu") and not torch_xla_ended("1.13.1")
    assert torch_xla_ended("2.10.0") and torch_xla_ended("2.13.0+cpu") and torch_xla_ended("3.0.0a0")
    assert not torch_xla_ended(None)  # torch not installed: nothing to say


@pytest.mark.usefixtures("no_pjrt")
def test_the_requested_runtime_is_the_users_pjrt_device_upper_cased(monkeypatch: pytest.MonkeyPatch) -> None:
    assert requested_pjrt_device() == "CPU"
    assert requested_pjrt_device("tpu") == "TPU"
    monkeypatch.setenv("PJRT_DEVICE", "cuda")
    assert requested_pjrt_device() == "CUDA"


@pytest.mark.usefixtures("no_pjrt")
def test_preparing_sets_pjrt_device_when_unset_and_upper_cases_the_users_own() -> None:
    prepare_environment(TPU)
    assert os.environ["PJRT_DEVICE"] == "TPU"
    os.environ["PJRT_DEVICE"] = "tpu"  # torch_xla only knows upper case
    prepare_environment(TPU)
    assert os.environ["PJRT_DEVICE"] == "TPU"


def test_a_pjrt_device_naming_another_runtime_is_refused_with_what_it_means(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PJRT_DEVICE", "CPU")
    with pytest.raises(DeviceUnavailableError) as caught:
        prepare_environment(TPU)
    error = caught.value
    assert error.problem == "disabled" and error.name == "tpu"
    assert error.message == "Device 'tpu' is not available: it runs on PJRT_DEVICE=TPU but PJRT_DEVICE=CPU is set."
    assert "select the device that PJRT_DEVICE=CPU means (ANYDEVICE=xla runs any PJRT device)" in str(error)
    assert os.environ["PJRT_DEVICE"] == "CPU"  # the user's setting is left alone


@pytest.mark.usefixtures("no_pjrt")
def test_a_runtime_torch_xla_does_not_know_is_refused_listing_the_known_ones() -> None:
    with pytest.raises(DeviceUnavailableError) as caught:
        prepare_environment(XlaVendor(name="xla", pjrt_device="ROCM"))
    assert caught.value.problem == "unsupported_platform"
    assert "PJRT_DEVICE=ROCM is not a PJRT runtime torch_xla knows" in caught.value.message
    assert f"Set PJRT_DEVICE to one of {', '.join(PJRT_DEVICES)}." in str(caught.value)
    assert "PJRT_DEVICE" not in os.environ


# --- processes -----------------------------------------------------------------------------------------------------


def test_pjrt_cpu_takes_one_process_and_says_how_to_test_several() -> None:
    assert check_processes(CPU, 1) == {}
    assert check_processes(TPU, 4) == {}  # a runtime that can share: no extra variables
    with pytest.raises(UnsupportedFeatureError) as caught:
        check_processes(CPU, 2)
    assert caught.value.message.startswith("xla on PJRT_DEVICE=CPU runs one process, but 2 were requested:")
    assert "ANYDEVICE=cpu (gloo)" in str(caught.value)


def test_loading_a_launched_world_on_pjrt_cpu_is_refused_before_torch_xla_is_imported(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("WORLD_SIZE", "3")
    one_process = XlaVendor(name="xla", pjrt_device="CPU", multiprocess=False, lockstep=())
    with pytest.raises(UnsupportedFeatureError, match="runs one process, but 3 were requested"):
        xla_shims(one_process)


# --- the version preflight -----------------------------------------------------------------------------------------


@needs_no_torch_xla
def test_loading_without_torch_xla_names_the_pair_to_install() -> None:
    with pytest.raises(DeviceUnavailableError) as caught:
        xla_shims(TPU)
    error = caught.value
    assert error.problem == "package_missing" and not isinstance(error, VersionMismatchError)
    assert error.message == "Device 'tpu' is not available: torch_xla is not installed."
    assert error.fix is not None and "torch==2.9.0 torch_xla==2.9.0" in error.fix


def test_a_lockstep_package_of_another_major_minor_is_a_version_mismatch_naming_both() -> None:
    numpy = version("numpy")  # installed everywhere torch is; its x.y is never torch's
    with pytest.raises(VersionMismatchError) as caught:
        preflight(XlaVendor(name="xla", pjrt_device="CPU", lockstep=("numpy",)))
    error = caught.value
    assert (error.package, error.package_version, error.torch_version) == ("numpy", numpy, version("torch"))
    assert error.problem == "version_mismatch"
    major_minor = ".".join(numpy.split(".")[:2])
    assert f"numpy {numpy} needs torch {major_minor}.x but torch {version('torch')} is installed" in error.message


def test_a_lockstep_package_that_pairs_with_torch_passes() -> None:
    preflight(XlaVendor(name="xla", pjrt_device="CPU", lockstep=("torch",)))
    preflight(XlaVendor(name="xla", pjrt_device="CPU", lockstep=()))


@needs_no_torch_xla
@pytest.mark.usefixtures("no_pjrt")
def test_past_the_preflight_the_missing_torch_xla_import_is_what_fails() -> None:
    with pytest.raises(ModuleNotFoundError) as caught:
        xla_shims(XlaVendor(name="xla", pjrt_device="CPU", lockstep=()))
    assert caught.value.name == "torch_xla"


@needs_no_torch_xla
@pytest.mark.usefixtures("no_pjrt")
def test_the_fallback_probe_defaults_to_pjrt_cpu_before_importing_torch_xla() -> None:
    with pytest.raises(ModuleNotFoundError, match="torch_xla"):
        fallback_probe(lambda device: None)
    assert os.environ["PJRT_DEVICE"] == "CPU"


# --- compilation ---------------------------------------------------------------------------------------------------


def test_the_persistent_cache_lives_under_the_cache_dir_by_runtime(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("ANYDEVICE_CACHE_DIR", str(tmp_path))
    cache = XlaCompilation(TPU).cache_dir()
    assert cache == tmp_path / "xla" / "tpu" and cache.is_dir()
    off = XlaCompilation(CPU)  # PJRT CPU cannot deserialise cached executables
    assert off.cache_dir() is None and off.backend == "openxla"


@needs_no_torch_xla
def test_initialising_the_persistent_cache_needs_torch_xla(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("ANYDEVICE_CACHE_DIR", str(tmp_path))
    with pytest.raises(ModuleNotFoundError, match="torch_xla"):
        XlaCompilation(TPU).initialize_cache()


def test_openxla_refuses_inductor_options_and_dynamic_shapes_by_name() -> None:
    compilation = XlaCompilation(TPU)
    model = torch.nn.Linear(2, 2)
    with pytest.raises(UnsupportedFeatureError) as caught:
        compilation.compile(model, mode="max-autotune")
    assert caught.value.message == (
        "ad.compile option 'mode' is not understood on tpu: openxla takes no inductor mode or options."
    )
    assert caught.value.hint == "Options tpu understands: backend, disable, dynamic, fullgraph."
    with pytest.raises(UnsupportedFeatureError, match="'dynamic=True' is not understood on tpu") as dynamic:
        compilation.compile(model, backend="openxla", dynamic=True)
    assert "pad inputs to a few fixed shapes" in str(dynamic.value)


def test_another_backend_is_checked_against_torch_compiles_own_keywords() -> None:
    with pytest.raises(UnsupportedFeatureError) as caught:
        XlaCompilation(TPU).compile(torch.nn.Linear(2, 2), backend="inductor", mode="default", fullgraf=True)
    assert caught.value.message == "ad.compile on tpu got option 'fullgraf', which torch.compile does not have."


# --- placement and collectives -------------------------------------------------------------------------------------


@needs_no_torch_xla
def test_a_placement_reads_torch_xlas_compile_counter_so_needs_torch_xla() -> None:
    with pytest.raises(ModuleNotFoundError, match="torch_xla"):
        XlaPlacement(TPU)


@pytest.fixture
def placement(monkeypatch: pytest.MonkeyPatch) -> Iterator[XlaPlacement]:
    """A placement whose recompile watch reads a counter the test sets (torch_xla's UncachedCompile in the xla lane)."""
    compiled = [7]
    monkeypatch.setattr(recompiles, "compile_count", lambda: compiled[0])
    placement = XlaPlacement(TPU)
    compiled[0] = 12
    yield placement
    stop_noting_inputs()


def test_a_placement_is_lazy_unpinned_and_counts_graphs_since_selection(placement: XlaPlacement) -> None:
    assert placement.lazy and not placement.pinned_memory and placement.device_type == "xla"
    assert placement.compilations() == 5
    assert placement.recompiles.device == "tpu"


def test_a_generator_is_a_cpu_one_seeded_like_torchs(placement: XlaPlacement) -> None:
    generator = placement.generator(1234)
    assert generator.device == torch.device("cpu") and generator.initial_seed() == 1234
    expected = torch.randn(3, generator=torch.Generator().manual_seed(1234))
    assert torch.equal(torch.randn(3, generator=generator), expected)


def test_fsdp_is_refused_with_ddp_or_torch_xlas_own_sharding_as_the_way(placement: XlaPlacement) -> None:
    collectives = XlaCollectives(TPU, placement)
    assert (collectives.backend, collectives.init_method, collectives.tensor_parallel) == ("xla", "xla://", "spmd")
    assert collectives.lacking_reduce_ops == frozenset({"AVG"})
    with pytest.raises(UnsupportedFeatureError) as caught:
        collectives.wrap(torch.nn.Linear(2, 2), "fsdp")
    assert caught.value.message.startswith("FSDP2 (fully_shard) does not run on tpu (torch_xla)")
    assert "Use wrap(model, 'ddp')" in str(caught.value)
    with pytest.raises(DistributedError, match="needs a process group"):  # ddp goes to torch's DDP: init first
        collectives.wrap(torch.nn.Linear(2, 2), "ddp")


@needs_no_torch_xla
def test_the_cuda_shaped_device_module_is_built_on_torch_xla(placement: XlaPlacement) -> None:
    with pytest.raises(ModuleNotFoundError, match="torch_xla"):
        placement.device_module()
