"""The torch tensor-parallel plans cuda-compat lowers to SPMD on xla: which entries split a weight, which stay
replicated (the xla lane runs the lowering itself: tests/xla/test_cuda_compat_xla.py)."""

from __future__ import annotations

import pytest
import torch
from torch.distributed.tensor.parallel import (
    ColwiseParallel,
    PrepareModuleInput,
    RowwiseParallel,
    SequenceParallel,
)

from anydevice.cuda_compat.tensor_parallel import plan_rules
from anydevice.errors import UnsupportedFeatureError

pytestmark = pytest.mark.torch_version_sensitive


class Block(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.norm = torch.nn.LayerNorm(8)
        self.up = torch.nn.Linear(8, 16)
        self.down = torch.nn.Linear(16, 8)


def model() -> torch.nn.Module:
    return torch.nn.ModuleDict({"layers": torch.nn.ModuleList([Block(), Block()])})


def test_colwise_and_rowwise_split_weights_and_the_rest_stays_replicated() -> None:
    plan = {
        "layers.*.up": ColwiseParallel(),
        "layers.*.down": RowwiseParallel(),
        "layers.*.norm": SequenceParallel(),
        "layers.0": PrepareModuleInput(),
    }
    rules, kept = plan_rules(model(), plan)
    assert sorted((r.name, r.style) for r in rules) == [
        ("layers.0.down", "rowwise"),
        ("layers.0.up", "colwise"),
        ("layers.1.down", "rowwise"),
        ("layers.1.up", "colwise"),
    ]
    assert kept == ["layers.*.norm: SequenceParallel", "layers.0: PrepareModuleInput"]


def test_a_style_for_the_whole_model_is_kept_replicated_and_a_wrong_name_is_skipped_with_torchs_warning() -> None:
    assert plan_rules(torch.nn.Linear(8, 8), ColwiseParallel()) == ([], ["<whole model>: ColwiseParallel"])
    with pytest.warns(UserWarning, match=r"Parallelize plan key 'layers\.\*\.upp' could not be resolved"):
        rules, _ = plan_rules(model(), {"layers.*.upp": ColwiseParallel(), "layers.0.up": ColwiseParallel()})
    assert [r.name for r in rules] == ["layers.0.up"]


def test_a_style_that_leaves_dtensor_outputs_is_refused_by_name() -> None:
    with pytest.raises(UnsupportedFeatureError, match=r"'layers.0.up': ColwiseParallel\(use_local_output=False\)"):
        plan_rules(model(), {"layers.0.up": ColwiseParallel(use_local_output=False)})
