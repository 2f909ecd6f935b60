"""The parts of anydevice's torchtitan patch that need only torch (``anydevice.integrations.torchtitan``).

The dense attention fallback, the FSDP2 ``PREMUL_SUM`` guard, the ``spmd_backend`` flag decision,
the memory-monitor decision's inputs and ``run``'s single-process variables run here on torch's CPU
build. Rebinding torchtitan's globals and training need torchtitan: the titan lane
(tests/titan) runs them.
"""

from __future__ import annotations

import importlib.util
import logging
import os
import socket
import sys
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch.distributed.fsdp import FSDPModule, fully_shard
from torch.nn.attention.flex_attention import AuxOutput, AuxRequest, create_block_mask

from anydevice import api as ad
from anydevice.integrations import torchtitan

NO_TORCHTITAN = importlib.util.find_spec("torchtitan") is None
LAUNCHER_VARIABLES = ("RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT")


def causal(b: torch.Tensor, h: torch.Tensor, q: torch.Tensor, kv: torch.Tensor) -> torch.Tensor:
    return q >= kv


def window(b: torch.Tensor, h: torch.Tensor, q: torch.Tensor, kv: torch.Tensor) -> torch.Tensor:
    return (q >= kv) & (q - kv < 5)


def qkv(heads: int = 2, kv_heads: int = 2, length: int = 32) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    generator = torch.Generator().manual_seed(0)
    q = torch.randn(2, heads, length, 8, generator=generator)
    k = torch.randn(2, kv_heads, length, 8, generator=generator)
    v = torch.randn(2, kv_heads, length, 8, generator=generator)
    return q, k, v


@pytest.fixture
def single_rank_group(tmp_path: Path) -> Iterator[None]:
    """A real one-process gloo group (what torchtitan initializes on a CPU)."""
    dist.init_process_group("gloo", init_method=f"file://{tmp_path / 'store'}", rank=0, world_size=1)
    try:
        yield
    finally:
        dist.destroy_process_group()


@pytest.fixture
def unpatched_fsdp(monkeypatch: pytest.MonkeyPatch) -> None:
    """FSDP2's own ``set_gradient_divide_factor`` is back after the test, whatever the patch did."""
    monkeypatch.setattr(FSDPModule, "set_gradient_divide_factor", FSDPModule.set_gradient_divide_factor)


# -- attention -------------------------------------------------------------------------------------


def test_the_dense_fallback_computes_causal_attention_under_the_block_mask() -> None:
    q, k, v = qkv()
    block_mask = create_block_mask(causal, 2, 2, 32, 32, device="cpu", BLOCK_SIZE=16)
    out, aux = torchtitan._dense_flex_attention(q, k, v, block_mask=block_mask, scale=0.5)
    torch.testing.assert_close(out, F.scaled_dot_product_attention(q, k, v, is_causal=True, scale=0.5))
    assert aux == AuxOutput(lse=None, max_scores=None)


def test_the_dense_fallback_follows_any_mask_mod_and_grouped_query_heads() -> None:
    q, k, v = qkv(heads=4, kv_heads=2)
    block_mask = create_block_mask(window, None, None, 32, 32, device="cpu", BLOCK_SIZE=16)
    out, _ = torchtitan._dense_flex_attention(q, k, v, block_mask=block_mask, enable_gqa=True)
    i = torch.arange(32)
    allowed = (i[:, None] >= i[None, :]) & (i[:, None] - i[None, :] < 5)
    expected = F.scaled_dot_product_attention(q, k, v, attn_mask=allowed, enable_gqa=True)
    torch.testing.assert_close(out, expected)


def test_the_dense_fallback_trains() -> None:
    q, k, v = (t.requires_grad_() for t in qkv())
    block_mask = create_block_mask(causal, 2, 2, 32, 32, device="cpu", BLOCK_SIZE=16)
    out, _ = torchtitan._dense_flex_attention(q, k, v, block_mask=block_mask)
    out.sum().backward()
    assert q.grad is not None and k.grad is not None and v.grad is not None
    assert torch.isfinite(q.grad).all()


def test_without_a_block_mask_the_fallback_is_plain_attention() -> None:
    q, k, v = qkv()
    out, _ = torchtitan._dense_flex_attention(q, k, v, return_aux=AuxRequest())
    torch.testing.assert_close(out, F.scaled_dot_product_attention(q, k, v))


def test_score_mods_and_aux_outputs_are_refused_by_the_fallback() -> None:
    q, k, v = qkv()
    with pytest.raises(NotImplementedError, match="supports block masks only"):
        torchtitan._dense_flex_attention(q, k, v, score_mod=lambda score, b, h, i, j: score)
    with pytest.raises(NotImplementedError, match="no score_mod, no lse/aux outputs"):
        torchtitan._dense_flex_attention(q, k, v, return_aux=AuxRequest(lse=True))


# -- FSDP2's gradient reduction --------------------------------------------------------------------


def test_without_a_process_group_there_is_no_premul_sum() -> None:
    assert not torchtitan._has_premul_sum()


@pytest.mark.usefixtures("unpatched_fsdp", "single_rank_group")
def test_on_gloo_the_guarded_divide_factor_makes_fsdp_reduce_with_sum() -> None:
    assert not torchtitan._has_premul_sum()  # gloo has no PREMUL_SUM
    assert torchtitan._sum_where_premul_sum_is_missing() == "SUM where the backend has no PREMUL_SUM"
    guarded = FSDPModule.set_gradient_divide_factor
    assert torchtitan._sum_where_premul_sum_is_missing() == "SUM where the backend has no PREMUL_SUM"
    assert FSDPModule.set_gradient_divide_factor is guarded  # patched once, however often patch() runs

    model = torch.nn.Linear(4, 4)
    fully_shard(model)
    assert isinstance(model, FSDPModule)
    model.set_gradient_divide_factor(1.0)  # what torchtitan's disable_fsdp_gradient_division calls
    [group] = model._get_fsdp_state()._fsdp_param_groups
    assert group.gradient_divide_factor == 1.0
    assert group.force_sum_reduction_for_comms
    model(torch.ones(2, 4)).sum().backward()
    assert model.weight.grad is not None


# -- the spmd_backend flag -------------------------------------------------------------------------


def test_a_single_process_or_a_users_flag_adds_nothing(monkeypatch: pytest.MonkeyPatch) -> None:
    assert torchtitan._spmd_backend_args([]) == []
    monkeypatch.setenv("WORLD_SIZE", "1")
    assert torchtitan._spmd_backend_args([]) == []
    monkeypatch.setenv("WORLD_SIZE", "2")
    assert torchtitan._spmd_backend_args(["--parallelism.spmd_backend", "spmd_types"]) == []
    assert torchtitan._spmd_backend_args(["--parallelism.spmd_backend=spmd_types"]) == []


def test_ranks_whose_fsdp_cannot_read_spmd_types_get_partial_dtensor(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    if torchtitan._fsdp_reads_spmd_types():
        pytest.skip(f"torch {torch.__version__}'s fully_shard reads spmd_types")
    monkeypatch.setenv("WORLD_SIZE", "2")
    with caplog.at_level(logging.WARNING, logger="anydevice.integrations.torchtitan"):
        assert torchtitan._spmd_backend_args(["--training.steps", "2"]) == ["--parallelism.spmd_backend", "partial_dtensor"]
    assert "does not read spmd_types annotations" in caplog.text and torch.__version__ in caplog.text


# -- the memory monitor's decision -----------------------------------------------------------------


def test_a_device_module_whose_memory_stats_raise_does_not_count_as_working() -> None:
    assert torchtitan._memory_stats_work(SimpleNamespace(memory_stats=lambda: {"allocated_bytes.all.current": 0}))
    assert not torchtitan._memory_stats_work(SimpleNamespace())
    assert not torchtitan._memory_stats_work(SimpleNamespace(memory_stats=lambda: 1 / 0))


def test_on_cpu_anydevices_module_has_every_monitor_call_but_no_memory_statistics() -> None:
    if ad.device().type != "cpu":
        pytest.skip("the selection here is not cpu")
    module, source = torchtitan.device_module()
    assert module is ad.device_module() and source == "anydevice.device_module()"
    assert [f for f in torchtitan.MONITOR_NEEDS if not callable(getattr(module, f, None))] == []
    assert not torchtitan._memory_stats_work(module)  # so patch() swaps in the anydevice.memory_stats() monitor


# -- patch and run without torchtitan --------------------------------------------------------------


def test_with_no_torchtitan_module_loaded_nothing_is_rebound() -> None:
    assert not any(name == "torchtitan" or name.startswith("torchtitan.") for name in sys.modules)
    assert torchtitan.rebind_copies("cuda", torch.cuda, "cpu", ad.device_module()) == []


@pytest.mark.skipif(not NO_TORCHTITAN, reason="torchtitan is installed: the titan lane runs patch()")
def test_patch_without_torchtitan_stops_at_its_import() -> None:
    with pytest.raises(ModuleNotFoundError, match="torchtitan"):
        torchtitan.patch()


@pytest.mark.skipif(not NO_TORCHTITAN, reason="torchtitan is installed: the titan lane runs run()")
def test_run_without_a_launcher_sets_torchruns_single_process_variables(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in LAUNCHER_VARIABLES:  # recorded as unset, so that the test leaves them unset
        monkeypatch.setenv(name, "")
        monkeypatch.delenv(name)
    argv = list(sys.argv)
    with pytest.raises(ModuleNotFoundError, match="torchtitan"):
        torchtitan.run(["--module", "llama3"])
    assert {name: os.environ[name] for name in LAUNCHER_VARIABLES[:-1]} == {
        "RANK": "0",
        "LOCAL_RANK": "0",
        "WORLD_SIZE": "1",
        "LOCAL_WORLD_SIZE": "1",
        "MASTER_ADDR": "127.0.0.1",
    }
    assert 0 < int(os.environ["MASTER_PORT"]) < 65536
    assert sys.argv == argv


@pytest.mark.skipif(not NO_TORCHTITAN, reason="torchtitan is installed: the titan lane runs run()")
def test_run_under_a_launcher_keeps_its_variables(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LOCAL_RANK", "3")
    monkeypatch.setenv("WORLD_SIZE", "8")
    monkeypatch.setenv("RANK", "")
    monkeypatch.delenv("RANK")
    with pytest.raises(ModuleNotFoundError, match="torchtitan"):
        torchtitan.run([])
    assert (os.environ["LOCAL_RANK"], os.environ["WORLD_SIZE"], os.environ.get("RANK")) == ("3", "8", None)


def test_a_free_port_can_be_bound() -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", torchtitan._free_port()))
