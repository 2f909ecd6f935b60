"""The declared contract on ``xla`` (torch_xla 2.9, PJRT CPU): compile options, fallback counters, reduce ops.

Runs in the XLA lane (``PJRT_DEVICE=CPU pytest -m xla tests/xla``). Nothing is mocked.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

import anydevice as ad
from anydevice.errors import UnsupportedFeatureError

pytestmark = pytest.mark.xla

torch = pytest.importorskip("torch")
pytest.importorskip("torch_xla")


@pytest.fixture(autouse=True)
def on_xla(clean_anydevice: None, monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    monkeypatch.setenv("PJRT_DEVICE", "CPU")
    ad.use("xla")
    yield
    ad.distributed.shutdown()


@pytest.mark.parametrize(("option", "value"), [("mode", "max-autotune"), ("options", {"trace.enabled": True})])
def test_inductor_only_options_are_refused_naming_the_option_and_the_device(option: str, value: object) -> None:
    with pytest.raises(UnsupportedFeatureError, match=f"option '{option}' is not understood on xla: openxla"):
        ad.compile(torch.nn.Linear(2, 2), **{option: value})


def test_dynamic_shapes_are_refused_before_compiling() -> None:
    with pytest.raises(UnsupportedFeatureError, match="'dynamic=True' is not understood on xla"):
        ad.compile(torch.nn.Linear(2, 2), dynamic=True)


def test_understood_options_compile_and_match_eager() -> None:
    model = ad.to(torch.nn.Linear(4, 4))
    compiled = ad.compile(model, fullgraph=True)
    x = ad.to(torch.randn(3, 4))
    assert torch.allclose(compiled(x).cpu(), model(x).cpu(), atol=1e-5)


def test_fallback_counters_come_from_torch_xla_metrics() -> None:
    import torch_xla.debug.metrics as met

    counts = ad.backend().shims.placement.fallback_ops()
    assert all(name.startswith("aten::") and isinstance(n, int) for name, n in counts.items())
    assert set(counts) == {name for name in met.counter_names() if name.startswith("aten::")}


def test_the_process_group_declares_the_average_it_lacks() -> None:
    assert ad.backend().shims.collectives.lacking_reduce_ops == frozenset({"AVG"})
    ad.distributed.init()
    t = ad.to(torch.tensor([2.0, 4.0]))
    assert ad.distributed.all_reduce(t, "avg").cpu().tolist() == [2.0, 4.0]  # world of one
