"""TPU slice names for compiled checks: Cloud's names, libtpu's topologies, clear refusals (no JAX needed)."""

from __future__ import annotations

import pytest

from anydevice.errors import AnyDeviceError
from anydevice.preflight.compiled import split_target
from anydevice.shims.tpu_slices import parse_slice, valid_names


@pytest.mark.parametrize(
    ("name", "topology", "chips", "counting"),
    [
        ("v5e-8", "v5e:2x4", 8, "8 chips"),
        ("v5litepod-4", "v5e:2x2", 4, "4 chips"),
        ("v6e-8", "v6e:2x4", 8, "8 chips"),
        ("v5p-8", "v5p:2x2x1", 4, "8 TensorCores (4 chips)"),
        ("v4-8", "v4:2x2x1", 4, "8 TensorCores (4 chips)"),
        ("v7x-8", "tpu7x:2x2x1", 4, "8 TensorCores (4 chips)"),
        ("tpu7x-16", "tpu7x:2x2x2", 8, "16 TensorCores (8 chips)"),
    ],
)
def test_cloud_names_map_to_libtpu_topologies(name: str, topology: str, chips: int, counting: str) -> None:
    s = parse_slice(name)
    assert (s.topology, s.chips, s.counting) == (topology, chips, counting)


def test_an_unknown_generation_lists_the_valid_slices() -> None:
    with pytest.raises(AnyDeviceError) as info:
        parse_slice("v9e-8")
    assert "Unknown TPU slice 'v9e-8'" in info.value.message
    assert "tpu:v5e-8" in (info.value.hint or "") and "tpu:v6e-8" in (info.value.hint or "")


def test_a_typo_gets_the_near_name() -> None:
    with pytest.raises(AnyDeviceError) as info:
        parse_slice("v5e8")
    assert "Did you mean 'tpu:v5e-8'" in (info.value.hint or "")


@pytest.mark.parametrize(
    ("name", "why"),
    [("v5e-1", "whole hosts"), ("v5e-12", "no v5e slice has 12"), ("v5p-6", "whole hosts"), ("v5p-7", "no v5p slice has 7")],
)
def test_sizes_the_compiler_cannot_take_are_refused_with_the_valid_ones(name: str, why: str) -> None:
    with pytest.raises(AnyDeviceError) as info:
        parse_slice(name)
    assert why in info.value.message
    assert info.value.hint and info.value.hint.startswith("Valid ")


def test_targets_split_into_device_and_slice() -> None:
    assert split_target("tpu:v5e-8") == ("tpu", "v5e-8")
    assert split_target("tpu") == ("tpu", None)
    assert split_target("cuda:1") == ("cuda:1", None)
    assert split_target("tpu:v5litepod-8") == ("tpu", "v5litepod-8")
    assert all(parse_slice(n).name == n for n in valid_names())


def test_check_refuses_a_slice_target_without_the_compiler_naming_the_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    """Without jax[tpu]/torchax (the main lane) a slice target is a clear error naming the extra, before anything runs."""
    import torch

    import anydevice as ad
    from anydevice.shims import tpu_aot

    if tpu_aot.available() is None:
        pytest.skip("this lane has libtpu's compiler (the tpu-check lane tests the compiled answers)")
    with pytest.raises(AnyDeviceError) as info:
        ad.check(torch.nn.Linear(4, 4), torch.randn(2, 4), target="tpu:v5e-8")
    assert "anydevice[tpu-check]" in (info.value.hint or "")
    assert "not installed" in info.value.message


def test_targets_resolve_slice_names_through_the_plugins_compiler() -> None:
    from anydevice.preflight import targets_of

    assert targets_of("tpu:v5litepod-8,xla") == ["tpu:v5e-8", "xla"]
    with pytest.raises(AnyDeviceError) as info:
        targets_of("xla:v5e-8")  # xla's plugin declares no slice compiler
    assert "xla names no slices" in info.value.message
