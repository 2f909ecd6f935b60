"""``ad.device_module()`` and ``ad.generator()`` on cpu: real answers, or an error naming function and device."""

from __future__ import annotations

import pytest
import torch

import anydevice as ad
from anydevice.errors import UnsupportedDeviceFunctionError

pytestmark = pytest.mark.torch_version_sensitive  # docs/architecture.md, "Which tests the core lanes run"


@pytest.fixture
def dm() -> object:
    ad.use("cpu")
    return ad.device_module()


def test_cpu_device_module_answers_the_torch_cuda_surface(dm: object) -> None:
    from anydevice.shims.cuda_shaped import SURFACE

    assert all(callable(getattr(dm, name)) for name in SURFACE)
    assert ad.device_module() is dm  # one object: set_device state is kept
    assert dm.is_available() and dm.device_count() == 1 and dm.current_device() == 0
    dm.set_device(0)
    dm.set_device("cpu")
    dm.synchronize()
    dm.empty_cache()  # the CPU allocator keeps no cache of freed blocks: nothing to release
    assert dm.get_device_name() == ad.backend().chip
    props = dm.get_device_properties()
    assert props.name == dm.get_device_name() and props.total_memory > 2**28  # host RAM
    assert dm.is_bf16_supported()
    dm.manual_seed(7)
    a = torch.rand(3)
    dm.manual_seed_all(7)
    assert torch.equal(a, torch.rand(3))
    assert dm.Stream is torch.cpu.Stream and hasattr(dm, "Event")


@pytest.mark.parametrize(
    "function", ["memory_stats", "memory_allocated", "max_memory_allocated", "memory_reserved", "reset_peak_memory_stats"]
)
def test_what_cpu_lacks_raises_naming_function_and_device(dm: object, function: str) -> None:
    with pytest.raises(UnsupportedDeviceFunctionError, match=rf"^{function}\(\) is not available on cpu: ") as err:
        getattr(dm, function)()
    assert err.value.function == function and err.value.device == "cpu"
    assert isinstance(err.value, ad.errors.UnsupportedFeatureError)


def test_cuda_only_property_is_refused_by_name(dm: object) -> None:
    props = dm.get_device_properties()
    assert not hasattr(props, "multi_processor_count")
    with pytest.raises(UnsupportedDeviceFunctionError, match=r"get_device_properties\(\).major is not available on cpu"):
        props.major


def test_generator_is_seeded_and_repeatable() -> None:
    ad.use("cpu")
    g = ad.generator(1234)
    assert isinstance(g, torch.Generator) and g.device.type == "cpu"
    assert torch.equal(torch.randn(4, generator=g), torch.randn(4, generator=torch.Generator().manual_seed(1234)))


def test_generator_with_diffusers_randn_tensor() -> None:
    randn_tensor = pytest.importorskip("diffusers.utils.torch_utils").randn_tensor
    ad.use("cpu")
    a = randn_tensor((2, 3), generator=ad.generator(0), device=ad.device())
    b = randn_tensor((2, 3), generator=ad.generator(0), device=ad.device())
    assert a.device == ad.device() and torch.equal(a, b)
