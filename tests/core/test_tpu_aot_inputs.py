"""What the compiled TPU check decides with torch alone, before JAX loads: which tensors it refuses (float64,
found through torch's pytree and the module's named tensors) and that a missing compiler is said, not raised
from deep inside. The compiles themselves run in the tpu-check lane (tests/tpu_compile)."""

from __future__ import annotations

import pytest
import torch

from anydevice.errors import AnyDeviceError
from anydevice.shims import tpu_aot

pytestmark = pytest.mark.torch_version_sensitive  # docs/architecture.md, "Which tests the core lanes run"


class Scaled(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.lin = torch.nn.Linear(4, 4)
        self.register_buffer("scale", torch.ones(4, dtype=torch.float64))


@pytest.mark.parametrize(
    ("model", "args", "kwargs", "named"),
    [
        (Scaled(), (torch.randn(2, 4),), {}, "buffer scale"),
        (torch.nn.Linear(4, 4).double(), (torch.randn(2, 4),), {}, "parameter weight"),
        (torch.nn.Linear(4, 4), ({"x": [torch.randn(2, 4, dtype=torch.float64)]},), {}, "input 0"),
        (torch.nn.Linear(4, 4), (), {"mask": torch.zeros(2, dtype=torch.complex128)}, "input 0"),
    ],
)
def test_a_64_bit_tensor_is_named_before_anything_is_lowered(
    model: torch.nn.Module, args: tuple, kwargs: dict, named: str
) -> None:
    with pytest.raises(AnyDeviceError) as info:
        tpu_aot._refuse_float64(model, args, kwargs)
    assert info.value.message.startswith(named) and "64-bit" in info.value.message


def test_float32_bfloat16_and_integer_tensors_pass() -> None:
    model = torch.nn.Embedding(10, 4).to(torch.bfloat16)
    tpu_aot._refuse_float64(model, (torch.zeros(2, 3, dtype=torch.long),), {"w": torch.ones(2)})


def test_without_the_extra_the_compile_names_what_to_install() -> None:
    if tpu_aot.available() is None:
        pytest.skip("this venv has jax[tpu] and torchax (the tpu-check lane compiles for real)")
    with pytest.raises(AnyDeviceError) as info:
        tpu_aot.compile_step(torch.nn.Linear(4, 4), (torch.randn(2, 4),), {}, optimizer=None, target="v5e-8")
    assert "anydevice[tpu-check]" in (info.value.hint or "")
