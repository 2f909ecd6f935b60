"""`ad.plan` and `anydevice plan` without a compiler: GPU rows are the CPU estimate and torch's flop counter over the
declared peaks, labelled "estimate, not compiled"; `ad.checkpoint_blocks` recomputes blocks with the same gradients."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from torch.utils.flop_counter import FlopCounterMode

import anydevice as ad
from anydevice.errors import AnyDeviceError
from anydevice.planner.rows import compiled_time
from anydevice.planner.search import COMPILED, Outcome
from anydevice.shims.tpu_slices import parse_slice
from tests.utils import anydevice_cli

SCRIPTS = Path(__file__).with_name("scripts")


class Block(torch.nn.Module):
    def __init__(self, width: int) -> None:
        super().__init__()
        self.up, self.down = torch.nn.Linear(width, 4 * width), torch.nn.Linear(4 * width, width)
        self.calls = 0

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        self.calls += 1
        return x + self.down(torch.nn.functional.gelu(self.up(x)))


class Net(torch.nn.Module):
    def __init__(self, width: int = 32, depth: int = 3) -> None:
        super().__init__()
        self.blocks = torch.nn.ModuleList(Block(width) for _ in range(depth))
        self.head = torch.nn.Linear(width, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for block in self.blocks:
            x = block(x)
        return self.head(x)


def test_a_gpu_row_is_the_cpu_estimate_over_declared_peaks_labelled_not_compiled() -> None:
    torch.manual_seed(0)
    model, x = Net(), torch.randn(16, 32)
    row = ad.plan(model, x, target="cuda:h100x8", optimizer=torch.optim.AdamW(model.parameters()))["targets"][0]
    assert row["target"] == "cuda:h100x8" and row["compiler"] is None
    assert row["as_written"]["evidence"].startswith("estimate, not compiled")
    assert row["as_written"]["fits"] is True and row["as_written"]["capacity_bytes"] == 80 * 2**30
    with FlopCounterMode(display=False) as counter:
        Net()(torch.randn(16, 32)).sum().backward()
    assert row["time"]["flops"] == counter.get_total_flops()  # torch's own count of forward and backward
    assert "estimate, not compiled" in row["time"]["evidence"] and "estimate, not compiled" in row["cost"]["evidence"]
    assert row["time"]["roofline_seconds"] == pytest.approx(row["time"]["flops"] / 989.4e12)
    assert row["fit"]["batch"]["evidence"].startswith("estimate, not compiled") and row["fit"]["batch"]["compiles"] == 0
    expected = row["time"]["expected_seconds"]
    assert row["cost"]["usd_per_million_tokens"] == pytest.approx(11.06 * expected / 3600 / 16 * 1e6)


def test_a_given_price_replaces_the_declared_one_and_bad_prices_are_one_clear_error() -> None:
    model = Net()
    plan = ad.plan(model, torch.randn(4, 32), target="cuda:h100x8", price="cuda-h100=2")
    assert plan["targets"][0]["cost"]["usd_per_chip_hour"] == 2.0 and plan["targets"][0]["cost"]["evidence"].startswith(
        "given (--price)"
    )
    for bad in ("h100", "cuda-h100=cheap", "cuda-h100=-1"):
        with pytest.raises(AnyDeviceError, match="DEVICE-CHIP=USD"):
            ad.plan(model, torch.randn(4, 32), target="cuda:h100x8", price=bad)


def test_checkpoint_blocks_recomputes_each_block_with_the_same_gradients_and_names() -> None:
    torch.manual_seed(0)
    plain = Net()
    wrapped = ad.checkpoint_blocks(Net())
    wrapped.load_state_dict(plain.state_dict())
    assert list(wrapped.state_dict()) == list(plain.state_dict()) and type(wrapped) is Net
    x = torch.randn(8, 32)
    plain(x).square().sum().backward()
    wrapped(x).square().sum().backward()
    for (name, a), b in zip(plain.named_parameters(), wrapped.parameters()):
        torch.testing.assert_close(a.grad, b.grad, msg=name)
    assert [b.calls for b in plain.blocks] == [1, 1, 1] and [b.calls for b in wrapped.blocks] == [2, 2, 2]  # recomputed


def test_checkpoint_blocks_refuses_a_model_without_repeated_blocks() -> None:
    with pytest.raises(AnyDeviceError, match="no repeated blocks"):
        ad.checkpoint_blocks(torch.nn.Linear(4, 4))


def test_a_negative_optimal_seconds_is_ignored_with_its_reason() -> None:
    chip = parse_slice("v5e-8").chip
    outcome = Outcome(2, "none", {"dp": 8}, True, 2**30, 15 * 2**30, COMPILED, 1, 1.0,
                      cost={"flops": 1.32e11, "bytes accessed": 4e9, "optimal_seconds": -236.0})  # fmt: skip
    time = compiled_time(outcome, chip, {"count": 512, "unit": "tokens"}, 2)
    assert time["optimal_seconds"] == {
        "value": -236.0,
        "used": False,
        "reason": "ignored: negative (-236 s; libtpu 0.0.42.1 returns negative values)",
    }
    assert time["roofline_seconds"] == pytest.approx(max(1.32e11 / 197e12, 4e9 / 819e9))
    assert time["bound_by"] == "HBM bandwidth"


def test_the_cli_plans_a_scripts_observed_step_for_a_gpu() -> None:
    done = anydevice_cli("plan", str(SCRIPTS / "get_batch.py"), "--target", "cuda:h100x8", "--json", timeout=300)
    assert done.returncode == 0, done.stderr + done.stdout
    row = json.loads(done.stdout)["targets"][0]
    assert row["as_written"]["evidence"].startswith("estimate, not compiled") and row["time"]["unit"] == "tokens"
    assert row["time"]["tokens_per_step"] == 4 * 16  # get_batch.py: 4 sequences of 16 tokens


def test_the_cli_without_a_target_is_one_usage_line() -> None:
    done = anydevice_cli("plan", str(SCRIPTS / "get_batch.py"))
    assert done.returncode == 2 and "needs SCRIPT and --target" in done.stderr and "Traceback" not in done.stderr


def test_collective_bytes_are_read_from_the_result_shapes_libtpu_prints() -> None:
    from anydevice.shims.tpu_aot import collective_bytes

    hlo = (  # lines as libtpu 0.0.42.1 prints them (no operand shapes; layouts with tiles)
        "  ROOT %all-reduce = f32[512,256]{1,0:T(8,128)} all-reduce(%fusion), channel_id=1, to_apply=%add.clone\n"
        "  %ag = (bf16[64]{0}, bf16[512]{0}) all-gather-start(%p), dimensions={0}\n"
        "  %rs = bf16[8,16]{1,0} reduce-scatter(%q), dimensions={0}\n"
        "  %x = f32[4]{0} add(%a, %b)\n"
    )
    assert collective_bytes(hlo) == {"all-reduce": 512 * 256 * 4, "all-gather": 512 * 2, "reduce-scatter": 8 * 16 * 2}
