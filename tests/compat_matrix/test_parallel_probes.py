"""The ``parallel`` probe group on cpu (gloo, real ranks): tp, fsdp_tp and reshard pass with their numbers, and a
split run whose numbers or weights disagree with the unsplit run fails its cell."""

from __future__ import annotations

from typing import Any

import pytest

import anydevice as ad
from anydevice.compat_matrix import catalog, probes_parallel
from anydevice.compat_matrix.execute import run_probe
from anydevice.compat_matrix.probe import Probe
from anydevice.compat_matrix.schema import Stage, Status


def _probe(name: str) -> Probe:
    return next(p for p in catalog.builtin_probes() if p.name == name)


def test_the_parallel_group_is_in_the_catalogue() -> None:
    assert [p.name for p in catalog.builtin_probes() if p.group == "parallel"] == ["tp", "fsdp_tp", "reshard"]
    assert {p.name for p in catalog.select(catalog.builtin_probes(), "parallel")} == {"sanity", "tp", "fsdp_tp", "reshard"}


@pytest.mark.slow
@pytest.mark.timeout(900)  # 2 and 4 gloo ranks, each importing torch, on a loaded machine
@pytest.mark.parametrize("name", ["tp", "fsdp_tp", "reshard"])
def test_parallel_probe_passes_on_cpu_with_numerics(name: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ANYDEVICE", "cpu")
    result = run_probe(_probe(name), ad, ad.device())
    assert result.status is Status.PASS, result.log
    assert result.numerics is not None and result.numerics.max_abs_err < 1e-5 and result.numerics.atol == 1e-5
    assert "Shard(dim=0)" in result.log  # the split weights' placements, as the job reported them


def _rows(**change: Any) -> list[dict[str, Any]]:
    split = {n: "(Shard(dim=0),)" for n in ("blocks.0.up.weight", "blocks.1.down.weight", "head.weight")}
    row = {"rank": 0, "mesh": {"tp": 2}, "split": split, "logits": [[1.0, 2.0]], "ref_logits": [[1.0, 2.0]]}
    row.update({"reference": [3.0, 2.5, 2.0], "losses": [3.0, 2.5, 2.0], **change})
    return [row, {**row, "rank": 1}]


@pytest.mark.parametrize(
    ("change", "stage", "says"),
    [
        ({"losses": [3.0, 2.5, 2.001]}, Stage.COMPARE, "not close"),
        ({"logits": [[1.0, 2.01]]}, Stage.COMPARE, "not close"),
        ({"split": {"blocks.0.up.weight": "plain", "blocks.1.down.weight": "plain", "head.weight": "plain"}}, None, "not split"),
        ({"mesh": {"dp": 2}}, None, "mesh"),
    ],
)
def test_a_split_run_that_disagrees_with_the_unsplit_run_fails(
    change: dict[str, Any], stage: Stage | None, says: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("ANYDEVICE", "cpu")
    monkeypatch.setattr(probes_parallel, "_job", lambda ctx, args, ranks, env=None: _rows(**change))
    result = run_probe(_probe("tp"), ad, ad.device())
    assert result.status is Status.FAIL and says in (result.message or ""), result.log
    if stage is not None:
        assert result.failure_stage is stage


def test_a_device_that_declares_no_tensor_parallelism_skips(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ANYDEVICE", "cpu")
    monkeypatch.setattr(ad.backend().shims.collectives, "tensor_parallel", "")
    result = run_probe(_probe("tp"), ad, ad.device())
    assert result.status is Status.SKIP and "tensor_parallel=''" in (result.reason or "")
