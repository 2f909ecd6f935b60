"""``ad.compile`` options: what the device understands is passed on, the rest is refused by name."""

from __future__ import annotations

import pytest

import anydevice as ad
from anydevice.errors import UnsupportedFeatureError
from anydevice.shims import compile_options

pytestmark = pytest.mark.torch_version_sensitive  # docs/architecture.md, "Which tests the core lanes run"

torch = pytest.importorskip("torch")


@pytest.fixture(autouse=True)
def on_cpu(clean_anydevice: None) -> None:
    ad.use("cpu")


def test_an_option_torch_compile_lacks_is_refused_naming_it_and_the_device() -> None:
    with pytest.raises(UnsupportedFeatureError, match=r"ad\.compile on cpu got option 'fullgrph'") as info:
        ad.compile(torch.nn.Linear(2, 2), fullgrph=True)
    assert "fullgraph" in str(info.value)  # the hint lists what cpu understands


def test_options_inductor_understands_are_passed_on() -> None:
    model = torch.nn.Linear(4, 4)
    compiled = ad.compile(model, fullgraph=True, dynamic=False, mode="default")
    x = torch.randn(3, 4)
    assert torch.allclose(compiled(x), model(x))


def test_another_backend_takes_any_torch_compile_keyword() -> None:
    model = torch.nn.Linear(4, 4)
    compiled = ad.compile(model, backend="eager", fullgraph=True)
    x = torch.randn(2, 4)
    assert torch.allclose(compiled(x), model(x))


def test_a_device_that_understands_less_names_the_option_and_why() -> None:
    understood = frozenset({"backend", "fullgraph"})
    with pytest.raises(UnsupportedFeatureError, match="option 'mode' is not understood on toy: no modes"):
        compile_options.check("toy", {"fullgraph": True, "mode": "max-autotune"}, understood, "no modes")
    compile_options.check("toy", {"fullgraph": True}, understood)  # understood: no error
